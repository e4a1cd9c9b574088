package httpsource

import (
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/jsonstr"
)

// decodeFast decodes the common shape of a JSONHandler request, a UTF-8
// array of {"headers": {...}, "body": ...} objects, straight into events,
// with one allocation per body and per header string and none of
// encoding/json's intermediate values (which cost about 300 bytes per
// event, 1.2 KB with a header). It gives the same events as the general
// decoder for every input it accepts, and returns ok false, to hand the
// input to the general decoder, for anything else: a syntax error (whose
// message the general decoder words), a key other than "headers" and
// "body", a duplicate key, a value of the wrong type. FuzzDecodeFast checks
// the two agree.
func decodeFast(data []byte, events int) (out []event.Event, ok bool) {
	out = make([]event.Event, 0, events)
	p := fastParser{b: data}
	p.ws()
	if !p.byte('[') {
		return nil, false
	}
	p.ws()
	if p.byte(']') {
		return p.end(out)
	}
	for {
		p.ws()
		e, ok := p.event()
		if !ok {
			return nil, false
		}
		out = append(out, e)
		p.ws()
		if p.byte(']') {
			return p.end(out)
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) end(out []event.Event) ([]event.Event, bool) {
	p.ws()
	if p.i != len(p.b) {
		return nil, false
	}
	return out, true
}

func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// event reads one {"headers": ..., "body": ...} object.
func (p *fastParser) event() (e event.Event, ok bool) {
	if !p.byte('{') {
		return e, false
	}
	var sawHeaders, sawBody bool
	var body []byte
	p.ws()
	if !p.byte('}') {
		for {
			p.ws()
			key, simple, ok := p.rawString()
			if !ok || !simple {
				return e, false
			}
			p.ws()
			if !p.byte(':') {
				return e, false
			}
			p.ws()
			switch string(key) {
			case "headers":
				if sawHeaders {
					return e, false
				}
				sawHeaders = true
				if e.Headers, ok = p.headers(); !ok {
					return e, false
				}
			case "body":
				if sawBody {
					return e, false
				}
				sawBody = true
				if p.lit("null") {
					break
				}
				if body, ok = p.textBytes(); !ok {
					return e, false
				}
			default:
				return e, false
			}
			p.ws()
			if p.byte('}') {
				break
			}
			if !p.byte(',') {
				return e, false
			}
		}
	}
	if body == nil {
		body = []byte{}
	}
	e.Body = body
	return e, true
}

// headers reads the headers object (or null): nil when it has no member,
// as the general decoder gives.
func (p *fastParser) headers() (event.Headers, bool) {
	if p.lit("null") {
		return nil, true
	}
	if !p.byte('{') {
		return nil, false
	}
	p.ws()
	if p.byte('}') {
		return nil, true
	}
	var h event.Headers
	var null []bool // which of h are null, once there is one
	for {
		p.ws()
		k, ok := p.str()
		if !ok {
			return nil, false
		}
		p.ws()
		if !p.byte(':') {
			return nil, false
		}
		p.ws()
		if p.lit("null") {
			if null == nil {
				null = make([]bool, len(h), len(h)+1)
			}
			h = append(h, event.Header{Key: k})
			null = append(null, true)
		} else {
			v, ok := p.text()
			if !ok {
				return nil, false
			}
			h = append(h, event.Header{Key: k, Value: v})
			if null != nil {
				null = append(null, false)
			}
		}
		p.ws()
		if p.byte('}') {
			return decodedHeaders(h, null), true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// text reads a string, number or boolean as Flume reads a String field:
// strings as they are, numbers and booleans as written.
func (p *fastParser) text() (string, bool) {
	if p.i >= len(p.b) {
		return "", false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.str()
	case c == 't':
		return "true", p.lit("true")
	case c == 'f':
		return "false", p.lit("false")
	case c == '-' || '0' <= c && c <= '9':
		start := p.i
		if !p.number() {
			return "", false
		}
		return string(p.b[start:p.i]), true
	}
	return "", false
}

// textBytes is text as a new byte slice, copied once.
func (p *fastParser) textBytes() ([]byte, bool) {
	if p.i < len(p.b) && p.b[p.i] == '"' {
		content, simple, ok := p.rawString()
		if !ok {
			return nil, false
		}
		if simple {
			return append(make([]byte, 0, len(content)), content...), true
		}
		return unquote(content)
	}
	s, ok := p.text()
	return []byte(s), ok
}

// number reads a JSON number.
func (p *fastParser) number() bool {
	p.byte('-')
	switch {
	case p.byte('0'):
	case p.digits() == 0:
		return false
	}
	if p.byte('.') && p.digits() == 0 {
		return false
	}
	if p.byte('e') || p.byte('E') {
		if !p.byte('+') {
			p.byte('-')
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

func (p *fastParser) digits() int {
	n := 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// rawString reads a string token and returns its content; simple is true
// when the content is the string itself (valid UTF-8, no escapes).
func (p *fastParser) rawString() (content []byte, simple, ok bool) {
	if !p.byte('"') {
		return nil, false, false
	}
	start := p.i
	simple = true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			content = p.b[start:p.i]
			p.i++
			if simple && !utf8.Valid(content) {
				simple = false
			}
			return content, simple, true
		case c == '\\':
			simple = false
			p.i += 2
		case c < 0x20:
			return nil, false, false
		default:
			p.i++
		}
	}
	return nil, false, false
}

// skipValue passes over one JSON value of valid JSON, whatever it holds,
// and reports false at bytes that are not one.
func (p *fastParser) skipValue() bool {
	p.ws()
	if p.i >= len(p.b) {
		return false
	}
	switch p.b[p.i] {
	case '"':
		_, _, ok := p.rawString()
		return ok
	case '{', '[':
		depth := 0
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				if _, _, ok := p.rawString(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			p.i++
			if depth == 0 {
				return true
			}
		}
		return false
	}
	start := p.i // a number or a literal: up to what ends it
	for p.i < len(p.b) && !strings.ContainsRune(",}] \t\r\n", rune(p.b[p.i])) {
		p.i++
	}
	return p.i > start
}

// str reads a string token as encoding/json does (escapes decoded, invalid
// UTF-8 replaced).
func (p *fastParser) str() (string, bool) {
	content, simple, ok := p.rawString()
	if !ok {
		return "", false
	}
	if simple {
		return string(content), true
	}
	b, ok := unquote(content)
	return string(b), ok
}

// unquote decodes the content of a JSON string as encoding/json does:
// escapes decoded (a surrogate pair as one rune, a lone surrogate as
// U+FFFD), each byte of invalid UTF-8 replaced by U+FFFD. It reports false
// for an escape JSON does not have.
func unquote(s []byte) ([]byte, bool) {
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			var n int
			var ok bool
			if out, n, ok = jsonstr.AppendEscape(out, s[i:]); !ok {
				return nil, false
			}
			i += n
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			var n int
			out, n = jsonstr.AppendRune(out, s[i:])
			i += n
		}
	}
	return out, true
}

// shape is what a cheap pass over a request body counts before it is
// decoded, to bound what decoding will allocate.
type shape struct {
	events        int // objects inside the top array
	headerMaps    int // objects inside those
	headerEntries int // members of those
}

// scanShape counts the objects and members of data by depth, skipping
// strings; it does not validate (decoding does).
func scanShape(data []byte) shape {
	var sh shape
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '[':
			depth++
		case '{':
			depth++
			switch depth {
			case 2:
				sh.events++
			case 3:
				sh.headerMaps++
			}
		case ']', '}':
			depth--
		case ':':
			if depth == 3 {
				sh.headerEntries++
			}
		}
	}
	return sh
}

// Costs of decoding, measured on Go 1.26 (TestDecodeCost checks them):
// an Event value; an event's headers (a slice of pairs: its first, smallest
// allocation); a header entry (32 bytes, four times over: the slice grows
// by doubling while the object is read, and may end at twice the entries;
// and, past 32 headers, its share of the index Dedupe makes);
// and the slowest path's factor (encoding/json's intermediate values, for
// input the fast decoder leaves to it).
const (
	eventCost       = 64 + 16
	headerMapCost   = 48
	headerEntryCost = 4*32 + 64
	generalFactor   = 4
)

// cost is an upper bound of the bytes decoding a body of n bytes of this
// shape allocates on the fast path: the events, their headers (which grow
// by doubling), and one copy of the strings and bodies (at most the body's
// bytes, plus a quarter for the allocator's rounding of each).
func (sh shape) cost(n int) int64 {
	return int64(sh.events)*eventCost + int64(sh.headerMaps)*headerMapCost + int64(sh.headerEntries)*headerEntryCost + int64(n)*5/4
}

// decodedHeaders makes the keys of h, decoded in order from a JSON object,
// unique as the general decoder does: a key keeps the place where it first
// appears and its last value, and a key whose last value is null (null[i],
// when null is not nil) is left out. An object whose members are all left
// out gives empty headers, not nil, as the general decoder does.
func decodedHeaders(h event.Headers, null []bool) event.Headers {
	if null == nil {
		h.Dedupe()
		return h
	}
	// Rare (a null header): a map keeps it linear in hostile input.
	at := make(map[string]int, len(h))
	out, outNull := h[:0], null[:0] // each written at or before the index read
	for i, kv := range h {
		if j, ok := at[kv.Key]; ok {
			out[j].Value, outNull[j] = kv.Value, null[i]
			continue
		}
		at[kv.Key] = len(out)
		out, outNull = append(out, kv), append(outNull, null[i])
	}
	kept := out[:0]
	for j, kv := range out {
		if !outNull[j] {
			kept = append(kept, kv)
		}
	}
	clear(h[len(kept):])
	if len(kept) == 0 {
		return event.Headers{}
	}
	return kept
}
