package containerlog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonstr"
)

// dockerRecord is a line of dockerd's json-file log driver. dockerd leaves
// "log" out when it is empty and may add "attrs" (the --log-opt labels and
// env), which sluice does not read.
type dockerRecord struct {
	Log    *string `json:"log"`
	Stream string  `json:"stream"`
	Time   string  `json:"time"`
}

// ParseDocker parses one line of Docker's json-file format (without its
// newline):
//
//	{"log":"log content 1\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}
//
// dockerd ends "log" with the container's newline; a record whose "log"
// does not end with one is a piece of a line longer than 16 KiB (or the
// last output of a container that did not end it): Partial. Text is "log"
// without that newline (and a '\r' before it): a slice of line when it is
// printable ASCII without escapes (most lines), else newly allocated; Time
// is a slice of line when it has no escapes.
//
// dockerd cuts a long line every 16 KiB whatever the bytes, and writes a
// UTF-8 character cut in two as U+FFFD in each record: the file no longer
// holds that character, so the joined line holds U+FFFD where it was.
func ParseDocker(line []byte) (Record, error) {
	return parseDocker(line, nil)
}

// parseDocker is ParseDocker with the last minute read in m (nil: none).
func parseDocker(line []byte, m *minute) (Record, error) {
	var r Record
	if text, nl, stream, tm, ok := plainDocker(line); ok {
		s, ok := parseStream(stream)
		if ok && len(tm) > 0 {
			ns, err := parseTimeIn(tm, m)
			if err != nil {
				return r, err
			}
			r.Time, r.Nanos, r.Stream, r.Partial, r.Text = tm, ns, s, !nl, text
			return r, nil
		}
	}
	log, stream, tm, ok := scanDocker(line)
	if !ok {
		// Not the plain shape dockerd writes (attrs, odd spacing, or not
		// JSON at all): the standard decoder decides, and explains.
		var d dockerRecord
		if err := json.Unmarshal(line, &d); err != nil {
			return r, fmt.Errorf("not a JSON object of Docker's json-file format: %w", err)
		}
		stream, tm = []byte(d.Stream), []byte(d.Time)
		log = nil
		if d.Log != nil {
			log = []byte(*d.Log)
		}
	}
	s, ok := parseStream(stream)
	if !ok {
		if len(stream) == 0 {
			return r, errors.New(`no "stream"`)
		}
		return r, fmt.Errorf("stream %q is neither stdout nor stderr", trim(stream))
	}
	if len(tm) == 0 {
		return r, errors.New(`no "time"`)
	}
	ns, err := parseTimeIn(tm, m)
	if err != nil {
		return r, err
	}
	r.Time, r.Nanos, r.Stream = tm, ns, s
	if t, ok := bytes.CutSuffix(log, []byte("\n")); ok {
		log = bytes.TrimSuffix(t, []byte("\r"))
	} else {
		r.Partial = true
	}
	r.Text = log
	return r, nil
}

// plainDocker reads the record dockerd writes for a line that needs no
// decoding, at once and without copying:
//
//	{"log":"<text>[\r]\n","stream":"<stream>","time":"<time>"}
//
// with "log" valid UTF-8 and "stream" and "time" ASCII, none with control
// characters, '"' or '\\' (the escapes "\r" and "\n" at the end of "log"
// aside). text is "log" without
// them and nl says whether "log" ended with "\n". It returns ok false for
// anything else, which scanDocker reads (FuzzPlainDocker: both read the
// same).
func plainDocker(b []byte) (text []byte, nl bool, stream, tm []byte, ok bool) {
	const logKey, streamKey, timeKey = `{"log":"`, `","stream":"`, `","time":"`
	if !bytes.HasPrefix(b, []byte(logKey)) || b[len(b)-1] != '}' {
		return nil, false, nil, nil, false
	}
	rest := b[len(logKey) : len(b)-1]
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		return nil, false, nil, nil, false
	}
	text = rest[:q]
	if k := bytes.IndexByte(text, '\\'); k >= 0 {
		if e := string(text[k:]); e != `\n` && e != `\r\n` {
			return nil, false, nil, nil, false
		}
		text, nl = text[:k], true
	}
	rest = rest[q:]
	if !bytes.HasPrefix(rest, []byte(streamKey)) {
		return nil, false, nil, nil, false
	}
	rest = rest[len(streamKey):]
	if q = bytes.IndexByte(rest, '"'); q < 0 {
		return nil, false, nil, nil, false
	}
	stream, rest = rest[:q], rest[q:]
	if !bytes.HasPrefix(rest, []byte(timeKey)) {
		return nil, false, nil, nil, false
	}
	rest = rest[len(timeKey):]
	if q = bytes.IndexByte(rest, '"'); q < 0 || q != len(rest)-1 {
		return nil, false, nil, nil, false
	}
	tm = rest[:q]
	if !plainText(text) || !plainASCII(stream) || !plainASCII(tm) || bytes.IndexByte(stream, '\\') >= 0 || bytes.IndexByte(tm, '\\') >= 0 {
		return nil, false, nil, nil, false
	}
	return text, nl, stream, tm, true
}

// plainText reports whether b is text a JSON string holds as it is, and
// encoding/json reads as it is: valid UTF-8 without control characters.
// dockerd writes a line's UTF-8 raw (only '"', '\\', control characters
// and, as encoding/json does, <, > and & escaped), so most lines that are
// not ASCII (Chinese, accents, emoji) are read here, in place, rather than
// decoded rune by rune into a copy.
func plainText(b []byte) bool {
	if plainASCII(b) {
		return true
	}
	for _, c := range b {
		if c < 0x20 {
			return false
		}
	}
	return utf8.Valid(b)
}

// plainASCII reports whether b holds only ASCII bytes that a JSON string
// may hold as they are (no control characters), eight at a time.
func plainASCII(b []byte) bool {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		// A byte of 0x80 or more has its high bit set; one below 0x20
		// sets it (the first such byte, with no borrow from below) when
		// 0x20 is taken from each byte, and no other byte does.
		x := binary.LittleEndian.Uint64(b)
		if (x|(x-0x20*ones))&high != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// scanDocker reads the object dockerd writes: string values only, no
// white space, each of "log", "stream" and "time" at most once. It returns
// ok false for anything else, which the standard decoder then reads; what
// it accepts, the standard decoder reads the same (FuzzParseDocker).
func scanDocker(b []byte) (log, stream, tm []byte, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, nil, nil, false
	}
	i := 1
	var seen [3]bool
	for i < len(b)-1 {
		key, n, ok := scanString(b[i:], nil)
		if !ok || i+n >= len(b) || b[i+n] != ':' {
			return nil, nil, nil, false
		}
		i += n + 1
		var dst *[]byte
		var k int
		switch string(key) {
		case "log":
			dst, k = &log, 0
		case "stream":
			dst, k = &stream, 1
		case "time":
			dst, k = &tm, 2
		default:
			return nil, nil, nil, false
		}
		if seen[k] {
			return nil, nil, nil, false // the standard decoder keeps the last; let it
		}
		seen[k] = true
		var buf []byte
		if k == 0 {
			buf = make([]byte, 0, len(b)-i)
		}
		v, n, ok := scanString(b[i:], buf)
		if !ok {
			return nil, nil, nil, false
		}
		*dst = v
		i += n
		if b[i] == ',' {
			i++
			if i >= len(b)-1 {
				return nil, nil, nil, false
			}
		} else if b[i] != '}' || i != len(b)-1 {
			return nil, nil, nil, false
		}
	}
	return log, stream, tm, true
}

// scanString decodes the JSON string at the start of b and returns it and
// how many bytes it took. Without escapes or bytes above ASCII the result
// is a slice of b (buf nil) or appended to buf; with them it is appended
// to buf (allocated when nil). Invalid UTF-8 and lone surrogates become
// U+FFFD, as encoding/json makes them.
func scanString(b []byte, buf []byte) ([]byte, int, bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, 0, false
	}
	i := 1
	for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 && b[i] < utf8.RuneSelf {
		i++
	}
	if i < len(b) && b[i] == '"' {
		if buf != nil {
			return append(buf, b[1:i]...), i + 1, true
		}
		return b[1:i], i + 1, true
	}
	out := append(buf, b[1:i]...)
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return out, i + 1, true
		case c < 0x20:
			return nil, 0, false
		case c == '\\':
			var n int
			var ok bool
			if out, n, ok = jsonstr.AppendEscape(out, b[i:]); !ok {
				return nil, 0, false
			}
			i += n
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			var n int
			out, n = jsonstr.AppendRune(out, b[i:])
			i += n
		}
	}
	return nil, 0, false
}
