package syslogsource

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/event"
)

// Header names multiport_syslogtcp sets besides Facility and Severity.
const (
	HeaderPriority = "Priority"
	HeaderVersion  = "Version"
)

// Charset is how multiport_syslogtcp decodes a port's bytes (Flume's
// charset.default and charset.port.<port>). Input that is not valid in the
// charset makes an Invalid event with the raw bytes, as Flume's strict
// decoder does.
type Charset uint8

const (
	UTF8 Charset = iota
	Latin1
	ASCII
)

// ParseCharset maps a Java charset name to a Charset.
func ParseCharset(name string) (Charset, bool) {
	switch normCharset(name) {
	case "utf8":
		return UTF8, true
	case "iso88591", "latin1", "l1", "iso8859_1", "cp819", "ibm819":
		return Latin1, true
	case "usascii", "ascii", "ascii7", "iso646us", "646", "us":
		return ASCII, true
	}
	return 0, false
}

func normCharset(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		case c == '-' || c == ' ' || c == '.':
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func (c Charset) valid(b []byte) bool {
	switch c {
	case UTF8:
		return utf8.Valid(b)
	case ASCII:
		for _, x := range b {
			if x >= utf8.RuneSelf {
				return false
			}
		}
	}
	return true
}

// MultiportParser turns one line into an event the way Flume's
// multiport_syslogtcp source (SyslogParser) does. It is safe for concurrent
// use.
type MultiportParser struct {
	Keep Keep
	// Now returns the current time, for "-" timestamps and the year of RFC
	// 3164 ones; nil means time.Now.
	Now func() time.Time
}

// errMultiport is what Flume's IllegalArgumentException becomes: the line
// turns into an Invalid event with its text as the body.
var errMultiport = errors.New("bad syslog message")

// Event builds the event for one line (without its newline), appending the
// body to slab. readFail reports an event Flume counts in EventReadFail:
// bytes not valid in the charset, or a line it cannot parse; such an event
// has the whole line as its body and flume.syslog.status Invalid. A line cut
// at eventSize is tagged Incomplete when it parses.
//
// Where Flume's parser fails with an exception it does not catch (a
// fraction running to the end of the timestamp, an unparseable date) and
// loses the rest of the connection's read buffer, sluice makes an Invalid
// event like any other parse failure.
func (p *MultiportParser) Event(line []byte, cs Charset, incomplete bool, slab []byte) (ev event.Event, out []byte, readFail bool) {
	start := len(slab)
	if !cs.valid(line) {
		slab = append(slab, line...)
		b := slab[start:len(slab):len(slab)]
		return event.Event{Headers: event.Headers{{Key: HeaderStatus, Value: StatusInvalid}}, Body: b}, slab, true
	}
	h := make(event.Headers, 0, 8)
	slab, err := p.parse(line, cs, &h, slab)
	if err != nil {
		slab = append(slab[:start], line...)
		b := slab[start:len(slab):len(slab)]
		return event.Event{Headers: event.Headers{{Key: HeaderStatus, Value: StatusInvalid}}, Body: b}, slab, true
	}
	if incomplete {
		h.Set(HeaderStatus, StatusIncomplete)
	}
	b := slab[start:len(slab):len(slab)]
	return event.Event{Headers: h, Body: b}, slab, false
}

// units counts the UTF-16 code units (Java chars) of b in charset cs.
func units(b []byte, cs Charset) int {
	if cs != UTF8 {
		return len(b)
	}
	n := 0
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			n++
			b = b[1:]
			continue
		}
		r, size := utf8.DecodeRune(b)
		n++
		if r >= 0x10000 {
			n++
		}
		b = b[size:]
	}
	return n
}

// advance returns the byte offset n Java chars after byte offset i of b, or
// -1 when b ends first.
func advance(b []byte, i, n int, cs Charset) int {
	if cs != UTF8 {
		if i+n > len(b) {
			return -1
		}
		return i + n
	}
	for n > 0 {
		if i >= len(b) {
			return -1
		}
		if b[i] < utf8.RuneSelf {
			i++
			n--
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		i += size
		n--
		if r >= 0x10000 {
			n--
		}
	}
	return i
}

func (p *MultiportParser) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

// parse follows SyslogParser.parseMessage. Positions are bytes; the few
// checks Flume makes in chars convert.
func (p *MultiportParser) parse(msg []byte, cs Charset, h *event.Headers, slab []byte) ([]byte, error) {
	if len(msg) == 0 || msg[0] != '<' {
		return slab, errMultiport
	}
	end := bytes.IndexByte(msg, '>')
	if end <= 0 || units(msg[:end], cs) > 6 {
		return slab, errMultiport
	}
	prio := string(msg[1:end])
	pri, ok := javaParseInt(prio)
	if !ok {
		return slab, errMultiport
	}
	h.Set(HeaderPriority, prio)
	h.Set(HeaderFacility, itoa(pri/8))
	h.Set(HeaderSeverity, itoa(pri%8))
	if len(msg) <= end+1 {
		return slab, errMultiport
	}
	cur := end + 1
	version := ""
	if len(msg) > cur+2 && msg[cur] == '1' && msg[cur+1] == ' ' {
		version = "1"
		h.Set(HeaderVersion, version)
		cur += 2
	}
	var ts int64
	var tsString string
	switch c := msg[cur]; {
	case c == '-':
		tsString = "-"
		ts = p.now().UnixMilli()
		if advance(msg, cur, 3, cs) < 0 { // Flume wants two more chars: a space and the hostname
			return slab, errMultiport
		}
		cur = advance(msg, cur, 2, cs)
	case c >= 'A' && c <= 'Z':
		e := advance(msg, cur, 15, cs)
		if e < 0 || e >= len(msg) {
			return slab, errMultiport
		}
		tsString = string(msg[cur:e])
		ts, ok = joda3164(tsString, p.now())
		if !ok {
			ts = 0 // Flume logs the failure and uses 0
		}
		cur = advance(msg, e, 1, cs)
	default:
		sp := bytes.IndexByte(msg[cur:], ' ')
		if sp < 0 {
			return slab, errMultiport
		}
		tsString = string(msg[cur : cur+sp])
		if ts, ok = multiport5424Time(tsString); !ok {
			return slab, errMultiport
		}
		cur += sp + 1
	}
	h.Set("timestamp", strconv.FormatInt(ts, 10))
	sp := bytes.IndexByte(msg[cur:], ' ')
	if sp < 0 {
		return slab, errMultiport
	}
	host := string(msg[cur : cur+sp])
	h.Set("host", host)
	next := cur + sp
	if len(msg) > next+1 && p.Keep&KeepAll == 0 {
		fp := FlumeParser{Keep: p.Keep}
		slab = fp.prependKept(slab, prio, version, tsString, true, host, true)
		return append(slab, msg[next+1:]...), nil
	}
	return append(slab, msg...), nil
}

// multiport5424Time follows SyslogParser.parseRfc5424Date: the first 19
// chars by Joda in UTC, then an optional fraction (rounded to milliseconds by
// its digit count) and an optional zone: Z, or ±hh:mm; any other character
// means UTC.
func multiport5424Time(s string) (int64, bool) {
	if len(s) <= 19 {
		return 0, false
	}
	ts, ok := jodaPrefix5424(s[:19])
	if !ok {
		return 0, false
	}
	cur := 19
	if s[cur] == '.' {
		e := cur + 1
		if len(s) <= e {
			return 0, false
		}
		for e < len(s) && s[e] >= '0' && s[e] <= '9' {
			e++
		}
		if e == len(s) {
			return 0, false // Flume reads past the end and fails
		}
		n := e - (cur + 1)
		if n == 0 {
			return 0, false
		}
		ms, err := strconv.ParseInt(s[cur+1:e], 10, 64)
		if err != nil {
			return 0, false
		}
		if n > 3 {
			ms = int64(float64(ms) / math.Pow(10, float64(n-3)))
		} else if n < 3 {
			ms = int64(float64(ms) * math.Pow(10, float64(3-n)))
		}
		ts += ms
		cur = e
	}
	if cur >= len(s) {
		return 0, false
	}
	switch s[cur] {
	case '+', '-':
		if len(s) <= cur+5 {
			return 0, false
		}
		z := s[cur+1 : cur+6]
		if !isDigit(z[0]) || !isDigit(z[1]) || z[2] != ':' || !isDigit(z[3]) || !isDigit(z[4]) {
			return 0, false
		}
		off := int64((int(z[0]-'0')*10+int(z[1]-'0'))*60+int(z[3]-'0')*10+int(z[4]-'0')) * 60000
		if s[cur] == '+' {
			ts -= off
		} else {
			ts += off
		}
	}
	return ts, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
