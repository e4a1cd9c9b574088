package syslogsource

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

// Header names and status values, as Flume's SyslogUtils spells them.
const (
	HeaderFacility = "Facility"
	HeaderSeverity = "Severity"
	HeaderStatus   = "flume.syslog.status"
	StatusInvalid  = "Invalid"
	// StatusIncomplete tags a message cut at eventSize.
	StatusIncomplete = "Incomplete"
)

// Keep says which parsed fields stay in the body (Flume's keepFields).
type Keep uint8

const (
	KeepPriority Keep = 1 << iota
	KeepVersion
	KeepTimestamp
	KeepHostname
	// KeepAll keeps the whole message as the body.
	KeepAll
)

// ParseKeepFields reads keepFields as Flume's chooseFieldsToKeep does:
// "none" or "false" keep nothing, "all" or "true" keep the whole message,
// anything else keeps each of priority, version, timestamp and hostname whose
// name appears in it. known is false when a list names none of them.
func ParseKeepFields(v string) (k Keep, known bool) {
	v = strings.ToLower(strings.TrimSpace(v))
	switch v {
	case "none", "false":
		return 0, true
	case "all", "true":
		return KeepAll, true
	}
	for _, f := range []struct {
		name string
		k    Keep
	}{{"priority", KeepPriority}, {"version", KeepVersion}, {"timestamp", KeepTimestamp}, {"hostname", KeepHostname}} {
		if strings.Contains(v, f.name) {
			k |= f.k
		}
	}
	return k, k != 0
}

// The two formats SyslogUtils tries, in order, written for Go's regexp with
// Java's meaning: \s is [ \t\n\x0B\f\r], '.' excludes Java's line
// terminators, and Matcher.matches() anchors both ends. Matching runs on the
// raw bytes; an invalid UTF-8 byte can only match where Java's U+FFFD would.
const (
	jws  = `[ \t\n\x0B\f\r]`
	jdot = `[^\n\r\x{85}\x{2028}\x{2029}]`
)

const (
	head5424 = `^<(\d{1,3})>(?:(\d?)` + jws + `?)` +
		`(?:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:[+-]\d{2}:\d{2}|Z)?)|-)` + jws +
		`(?:([\w][\w\d.@\-]*)|-)` + jws
	head3164 = `^<(\d{1,3})>(?:(\d)?` + jws + `?)` +
		`([A-Z][a-z][a-z]` + jws + `{1,2}\d{1,2}` + jws + `\d{2}:\d{2}:\d{2})` + jws +
		`([\w][\w\d.@-]*)` + jws
)

// flumeRegexps are compiled when a syslog source first parses, not when
// the agent starts: most agents run none, and the four cost 120 KB.
var flumeRegexps = sync.OnceValue(func() (r struct{ re5424, re3164, re5424Multi, re3164Multi *regexp.Regexp }) {
	r.re5424 = regexp.MustCompile(head5424 + `(` + jdot + `*)\z`)
	r.re3164 = regexp.MustCompile(head3164 + `(` + jdot + `*)\z`)
	// For octet-counted frames, which Flume never receives and whose text
	// may span lines, the text may hold any character.
	r.re5424Multi = regexp.MustCompile(head5424 + `((?s:.*))\z`)
	r.re3164Multi = regexp.MustCompile(head3164 + `((?s:.*))\z`)
	return r
})

// FlumeParser turns one syslog message into an event the way Flume's
// syslogtcp and syslogudp sources (SyslogUtils) do. It is safe for
// concurrent use.
type FlumeParser struct {
	Keep Keep
	// Loc is the zone timestamps without an offset are read in (Flume uses
	// the JVM's default zone); nil means time.Local.
	Loc *time.Location
	// Now returns the current time, for the year of RFC 3164 timestamps;
	// nil means time.Now.
	Now func() time.Time
}

// Message is one framed syslog message before parsing, as SyslogUtils holds
// it when it builds an event: the bytes it buffered, the priority digits it
// read and whether it found the message bad or cut it at eventSize.
type Message struct {
	Raw        []byte // the message without its newline; may alias a read buffer
	Prio       int    // the priority, when !Bad
	Bad        bool   // no valid <PRI> at the start: Flume's Invalid
	Incomplete bool   // cut at eventSize
	Multiline  bool   // octet-counted: the text after the header may hold line breaks
}

// scanPrio runs SyslogUtils' START and PRIO states over b (which starts at a
// message). It returns where the DATA state begins, the priority, whether
// the message is bad, and done=false when b ended inside the priority. As in
// Flume, a '\n' inside "<...>" is data, not the end of the message.
func scanPrio(b []byte) (dataStart, prio int, bad, done bool) {
	if len(b) == 0 {
		return 0, 0, false, false
	}
	if b[0] != '<' {
		return 1, 0, true, true
	}
	n := 0
	for i := 1; i < len(b); i++ {
		c := b[i]
		if c == '>' {
			return i + 1, prio, n == 0, true
		}
		n++
		if c < '0' || c > '9' || n > 3 {
			return i + 1, 0, true, true
		}
		prio = prio*10 + int(c-'0')
	}
	return len(b), prio, false, false
}

// ScanStream finds the next message in a TCP stream with newline framing,
// as SyslogUtils.extractEvent does: newlines before a message are skipped, a
// message ends at a '\n' (not part of it) or when it reaches maxSize bytes
// (then it is Incomplete and the rest of the line starts a new message). It
// returns the message, how many bytes of data it used, and ok=false when data
// holds no complete message yet (consumed then counts skipped newlines).
func ScanStream(data []byte, maxSize int) (m Message, consumed int, ok bool) {
	start := 0
	for start < len(data) && data[start] == '\n' {
		start++
	}
	b := data[start:]
	ds, prio, bad, done := scanPrio(b)
	if !done {
		return Message{}, start, false
	}
	limit := min(len(b), maxSize)
	if ds < limit {
		if i := bytes.IndexByte(b[ds:limit], '\n'); i >= 0 {
			end := ds + i
			return Message{Raw: b[:end], Prio: prio, Bad: bad}, start + end + 1, true
		}
	}
	if len(b) >= maxSize {
		return Message{Raw: b[:maxSize], Prio: prio, Bad: bad, Incomplete: true}, start + maxSize, true
	}
	return Message{}, start, false
}

// ScanDatagram reads a whole message, as SyslogUtils does for a UDP
// datagram: leading newlines are skipped and the message ends at the next
// '\n' when stopAtNewline (the rest is dropped) or at the end of b. ok is
// false when Flume could not build an event because no priority digits were
// read (an empty datagram, or "<" alone): Flume counts that as EventReadFail.
func ScanDatagram(b []byte, stopAtNewline bool) (m Message, ok bool) {
	for len(b) > 0 && b[0] == '\n' {
		b = b[1:]
	}
	ds, prio, bad, done := scanPrio(b)
	if !done {
		if len(b) <= 1 { // nothing, or "<" with no digits: Integer.parseInt("") fails
			return Message{}, false
		}
		return Message{Raw: b, Prio: prio}, true
	}
	if stopAtNewline {
		if i := bytes.IndexByte(b[ds:], '\n'); i >= 0 {
			b = b[:ds+i]
		}
	}
	return Message{Raw: b, Prio: prio, Bad: bad}, true
}

// Event builds the event for m: headers Facility and Severity always (0 and
// 0 for a bad message), and for a message one of Flume's formats matches,
// priority, version (when present), timestamp (when it parses) and host
// (unless "-"); flume.syslog.status is Invalid for a bad message and
// Incomplete for a cut one. The body is the message text after the header
// (with keepFields prepended), or the whole message when no format matches,
// the text is empty, or keepFields is all. The body is appended to slab,
// which is returned; the event's body aliases it.
func (p *FlumeParser) Event(m Message, slab []byte) (event.Event, []byte) {
	h := make(event.Headers, 0, 6)
	fac, sev := 0, 0
	var body []byte
	bodySet := false
	if !m.Bad {
		fac, sev = m.Prio/8, m.Prio%8
		start := len(slab)
		slab, bodySet = p.format(m.Raw, m.Multiline, &h, slab)
		body = slab[start:]
	}
	h.Set(HeaderFacility, itoa(fac))
	h.Set(HeaderSeverity, itoa(sev))
	if m.Bad {
		h.Set(HeaderStatus, StatusInvalid)
	} else if m.Incomplete {
		h.Set(HeaderStatus, StatusIncomplete)
	}
	if !bodySet {
		start := len(slab)
		slab = append(slab, m.Raw...)
		body = slab[start:]
	}
	return event.Event{Headers: h, Body: body[:len(body):len(body)]}, slab
}

// format applies the first of Flume's formats that matches raw, setting
// headers, and appends the body text to slab when it is not empty and
// keepFields is not all (bodySet reports whether it did).
func (p *FlumeParser) format(raw []byte, multiline bool, h *event.Headers, slab []byte) ([]byte, bool) {
	var g [12]int
	is5424 := true
	re := flumeRegexps()
	r5424, r3164 := re.re5424, re.re3164
	if multiline {
		r5424, r3164 = re.re5424Multi, re.re3164Multi
	}
	loc := r5424.FindSubmatchIndex(raw)
	if loc == nil {
		if loc = r3164.FindSubmatchIndex(raw); loc == nil {
			return slab, false
		}
		is5424 = false
	}
	copy(g[:], loc)
	group := func(i int) (string, bool) {
		if g[2*i] < 0 {
			return "", false
		}
		return string(raw[g[2*i]:g[2*i+1]]), true
	}
	prio, _ := group(1)
	version, _ := group(2)
	stamp, hasStamp := group(3)
	host, hasHost := group(4)
	if prio != "" {
		h.Set("priority", prio)
	}
	if version != "" {
		h.Set("version", version)
	}
	if hasStamp {
		var ms int64
		var ok bool
		if is5424 {
			ms, ok = flume5424Time(stamp, p.loc())
		} else {
			ms, ok = flume3164Time(stamp, p.loc(), p.now())
		}
		if ok {
			h.Set("timestamp", strconv.FormatInt(ms, 10))
		}
	}
	if hasHost && host != "" {
		h.Set("host", host)
	}
	text := raw[g[10]:g[11]]
	if p.Keep&KeepAll != 0 {
		return slab, false
	}
	n := len(slab)
	slab = p.prependKept(slab, prio, version, stamp, hasStamp, host, hasHost)
	slab = appendJavaText(slab, text)
	if len(slab) == n {
		return slab, false
	}
	return slab, true
}

// prependKept writes the kept fields before the text as Flume's
// addFieldsToBody does: "<pri>" then version, timestamp and hostname, each
// followed by a space; a missing timestamp or hostname prints as "null", as
// Java's string concatenation does.
func (p *FlumeParser) prependKept(slab []byte, prio, version, stamp string, hasStamp bool, host string, hasHost bool) []byte {
	k := p.Keep
	if k&KeepPriority != 0 {
		slab = append(slab, '<')
		slab = append(slab, prio...)
		slab = append(slab, '>')
	}
	if k&KeepVersion != 0 && version != "" {
		slab = append(slab, version...)
		slab = append(slab, ' ')
	}
	if k&KeepTimestamp != 0 {
		if !hasStamp {
			stamp = "null"
		}
		slab = append(slab, stamp...)
		slab = append(slab, ' ')
	}
	if k&KeepHostname != 0 {
		if !hasHost {
			host = "null"
		}
		slab = append(slab, host...)
		slab = append(slab, ' ')
	}
	return slab
}

func (p *FlumeParser) loc() *time.Location {
	if p.Loc == nil {
		return time.Local
	}
	return p.Loc
}

func (p *FlumeParser) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}
