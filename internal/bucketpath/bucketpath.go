// Package bucketpath expands Flume's escape sequences (its BucketPath) in
// paths and names: %{header} is the value of an event header, %x a part of
// the event's time (%Y %m %d %H %M %S %s %t %y %j %k %l %p %a %A %b %B %c
// %D %e %n %I %z), %% a percent sign, and %[localhost], %[IP] and %[FQDN]
// the agent's host. The time is the event's "timestamp" header (Unix
// milliseconds), or the agent's clock with UseLocalTime, optionally rounded
// down first (round, roundValue, roundUnit), in a configured time zone.
//
// Flume replaces an unknown %x with nothing; sluice refuses it when the
// template is parsed, since it is almost always a typo in a path.
package bucketpath

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

// Unit is what the time is rounded down to a multiple of.
type Unit int

const (
	// Second rounds the seconds within the minute.
	Second Unit = iota
	// Minute rounds the minutes within the hour.
	Minute
	// Hour rounds the hours within the day.
	Hour
)

// Options say how the time escapes are resolved.
type Options struct {
	// Location is the time zone of the time escapes; nil means the local one.
	Location *time.Location
	// Round rounds the time down to a multiple of RoundValue RoundUnits
	// (Flume's hdfs.round). %t is never rounded.
	Round      bool
	RoundValue int
	RoundUnit  Unit
	// UseLocalTime uses the agent's clock instead of the timestamp header.
	UseLocalTime bool
}

// ErrNoTimestamp is returned (wrapped) by Expand when the template needs
// the event time and the event has no usable timestamp header.
var ErrNoTimestamp = errors.New("no valid timestamp header")

type part struct {
	kind byte   // 'l' literal, 'h' header, 't' time escape letter in c
	text string // literal or header name
	c    byte
}

// Template is a parsed string with escapes. It is safe for concurrent use.
type Template struct {
	src   string
	parts []part
	timed bool
}

// Parse compiles s. Escapes are matched as Flume's TAG_REGEX does: %
// followed by a word character or %, %{name} with name made of word
// characters, '.' and '-', and %[name]; any other % is literal.
func Parse(s string) (*Template, error) {
	t := &Template{src: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, part{kind: 'l', text: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' || i+1 >= len(s) {
			lit.WriteByte(c)
			continue
		}
		n := s[i+1]
		switch {
		case n == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end >= 0 && end > 0 && isHeaderName(s[i+2:i+2+end]) {
				flush()
				t.parts = append(t.parts, part{kind: 'h', text: s[i+2 : i+2+end]})
				i += 2 + end
				continue
			}
			if end == 0 {
				return nil, fmt.Errorf("%q has an empty %%{} escape; write %%{header}", s)
			}
			// Not an escape to Flume either: kept literally.
			lit.WriteByte(c)
		case n == '[':
			end := strings.IndexByte(s[i+2:], ']')
			if end <= 0 || !isWord(s[i+2:i+2+end]) {
				lit.WriteByte(c)
				continue
			}
			v, err := hostValue(s[i+2 : i+2+end])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
			lit.WriteString(v)
			i += 2 + end
		case n == '%':
			lit.WriteByte('%')
			i++
		case isWordByte(n):
			if !strings.ContainsRune(timeLetters, rune(n)) {
				return nil, fmt.Errorf("%q has the unknown escape %%%c; use %%{header}, a time escape (%s), %%[localhost], %%[IP], %%[FQDN], or %%%% for a literal %%",
					s, n, "%"+strings.Join(strings.Split(timeLetters, ""), " %"))
			}
			flush()
			t.parts = append(t.parts, part{kind: 't', c: n})
			t.timed = true
			i++
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return t, nil
}

// timeLetters are the time escapes Flume resolves.
const timeLetters = "aAbBcdeDHIjklmMnpsStyYz"

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func isHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isWordByte(c) && c != '.' && c != '-' {
			return false
		}
	}
	return s != ""
}

// String returns the template as it was written.
func (t *Template) String() string { return t.src }

// Timed reports whether the template uses the event time.
func (t *Template) Timed() bool { return t.timed }

// Static returns the expansion when the template has no per-event escape.
func (t *Template) Static() (string, bool) {
	switch {
	case len(t.parts) == 0:
		return "", true
	case len(t.parts) == 1 && t.parts[0].kind == 'l':
		return t.parts[0].text, true
	}
	return "", false
}

// Time returns the time the escapes of an event use, in milliseconds: now
// with UseLocalTime, else the timestamp header. ok is false when the header
// is missing or not a whole number.
func Time(headers event.Headers, opt *Options, now int64) (ms int64, ok bool) {
	if opt.UseLocalTime {
		return now, true
	}
	h, found := headers.Get("timestamp")
	if !found {
		return 0, false
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64)
	return ms, err == nil
}

// Expand appends the expansion of t for an event with headers whose time
// is ms (from Time) to dst. %t is the timestamp header as written, or ms
// with UseLocalTime.
func (t *Template) Expand(dst []byte, headers event.Headers, ms int64, opt *Options) []byte {
	var tm time.Time
	rounded := ms
	if t.timed {
		loc := opt.Location
		if loc == nil {
			loc = time.Local
		}
		if opt.Round {
			rounded = roundDown(ms, opt.RoundValue, opt.RoundUnit, loc)
		}
		tm = time.UnixMilli(rounded).In(loc)
	}
	for _, p := range t.parts {
		switch p.kind {
		case 'l':
			dst = append(dst, p.text...)
		case 'h':
			dst = append(dst, headers.Value(p.text)...)
		case 't':
			if p.c == 't' {
				if h, ok := headers.Get("timestamp"); ok && !opt.UseLocalTime {
					dst = append(dst, h...)
				} else {
					dst = strconv.AppendInt(dst, ms, 10)
				}
				continue
			}
			dst = appendTime(dst, p.c, tm, rounded)
		}
	}
	return dst
}

// appendTime appends what Flume's SimpleDateFormat pattern for escape c
// prints for tm (in an English locale).
func appendTime(dst []byte, c byte, tm time.Time, ms int64) []byte {
	switch c {
	case 'a':
		return tm.AppendFormat(dst, "Mon")
	case 'A':
		return tm.AppendFormat(dst, "Monday")
	case 'b':
		return tm.AppendFormat(dst, "Jan")
	case 'B':
		return tm.AppendFormat(dst, "January")
	case 'c': // EEE MMM d HH:mm:ss yyyy
		return tm.AppendFormat(dst, "Mon Jan 2 15:04:05 2006")
	case 'd':
		return tm.AppendFormat(dst, "02")
	case 'e':
		return strconv.AppendInt(dst, int64(tm.Day()), 10)
	case 'D':
		return tm.AppendFormat(dst, "01/02/06")
	case 'H':
		return tm.AppendFormat(dst, "15")
	case 'I':
		return tm.AppendFormat(dst, "03")
	case 'j':
		return tm.AppendFormat(dst, "002")
	case 'k':
		return strconv.AppendInt(dst, int64(tm.Hour()), 10)
	case 'l':
		return tm.AppendFormat(dst, "3")
	case 'm':
		return tm.AppendFormat(dst, "01")
	case 'M':
		return tm.AppendFormat(dst, "04")
	case 'n':
		return strconv.AppendInt(dst, int64(tm.Month()), 10)
	case 'p':
		return tm.AppendFormat(dst, "PM")
	case 's':
		return strconv.AppendInt(dst, ms/1000, 10)
	case 'S':
		return tm.AppendFormat(dst, "05")
	case 'y':
		return tm.AppendFormat(dst, "06")
	case 'Y':
		return tm.AppendFormat(dst, "2006")
	case 'z':
		return tm.AppendFormat(dst, "-0700")
	}
	return dst
}

// roundDown rounds ms down as Flume's TimestampRoundDownUtil does: the
// field of unit (second of the minute, minute of the hour, hour of the
// day) down to a multiple of value, and the smaller fields to zero, in loc.
func roundDown(ms int64, value int, unit Unit, loc *time.Location) int64 {
	if value <= 0 {
		value = 1
	}
	tm := time.UnixMilli(ms).In(loc)
	y, mo, d := tm.Date()
	h, mi, s := tm.Clock()
	switch unit {
	case Hour:
		tm = time.Date(y, mo, d, h-h%value, 0, 0, 0, loc)
	case Minute:
		tm = time.Date(y, mo, d, h, mi-mi%value, 0, 0, loc)
	default:
		tm = time.Date(y, mo, d, h, mi, s-s%value, 0, loc)
	}
	return tm.UnixMilli()
}

var host struct {
	once           sync.Once
	name, ip, fqdn string
	nameErr        error
}

// hostValue resolves %[localhost], %[IP] and %[FQDN] (case-insensitive) as
// Java's InetAddress.getLocalHost does: the host name, its address, and the
// name the address resolves back to (the host name when it does not).
func hostValue(key string) (string, error) {
	host.once.Do(func() {
		host.name, host.nameErr = os.Hostname()
		host.ip, host.fqdn = "127.0.0.1", host.name
		if host.nameErr != nil {
			return
		}
		if ips, err := net.LookupIP(host.name); err == nil && len(ips) > 0 {
			host.ip = ips[0].String()
			for _, ip := range ips {
				if ip.To4() != nil {
					host.ip = ip.String()
					break
				}
			}
			if names, err := net.LookupAddr(host.ip); err == nil && len(names) > 0 {
				host.fqdn = strings.TrimSuffix(names[0], ".")
			}
		}
	})
	switch strings.ToLower(key) {
	case "localhost":
		return host.name, host.nameErr
	case "ip":
		return host.ip, host.nameErr
	case "fqdn":
		return host.fqdn, host.nameErr
	}
	return "", fmt.Errorf("%%[%s] is not a host escape; use %%[localhost], %%[IP] or %%[FQDN]", key)
}
