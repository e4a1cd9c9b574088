package elasticsearchsink

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice/internal/event"
)

// sluice's serializer ("sluice"; Flume's are in serializer.go), event body
// to document:
//
//   - a body that is one JSON object is indexed as is, with "@timestamp"
//     added first when the object has no top-level "@timestamp" key;
//     newlines between its tokens become spaces (a bulk body is one
//     document per line, and valid JSON has no raw newline inside strings);
//   - any other body becomes {"@timestamp":..., "message": <body as a
//     string>, <header>: <value>, ...} with the headers in key order (the
//     headers "@timestamp" and "message" are left out, the document's own
//     fields win). Bytes that are not UTF-8 become U+FFFD.
//
// "@timestamp" comes from the timestamp header (milliseconds since the
// epoch, as Flume's timestamp interceptor sets it), else from the
// "@timestamp" header, else from the time the agent received the event,
// else now. A non-numeric timestamp header is passed on as a string for
// the server to parse.

const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// eventTime returns the event's time in milliseconds and, when the
// timestamp header is set but not numeric, its text.
func eventTime(e *event.Event, now int64) (ms int64, text string) {
	for _, k := range [...]string{"timestamp", "@timestamp"} {
		if v, ok := e.Headers.Get(k); ok && v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n, ""
			}
			return 0, v
		}
	}
	if e.ReceivedAt > 0 {
		return e.ReceivedAt / 1e6, ""
	}
	return now / 1e6, ""
}

// appendTimestamp appends the JSON string of the event's @timestamp.
func appendTimestamp(dst []byte, ms int64, text string) []byte {
	if text != "" {
		return appendJSONString(dst, text)
	}
	dst = append(dst, '"')
	dst = time.UnixMilli(ms).UTC().AppendFormat(dst, timestampLayout)
	return append(dst, '"')
}

// appendDocument appends the document of e (no trailing newline).
func appendDocument(dst []byte, e *event.Event, ms int64, text string, keys event.Headers) ([]byte, event.Headers) {
	body := trimSpace(e.Body)
	if len(body) >= 2 && body[0] == '{' {
		if ok, hasTS := scanObject(body, "@timestamp"); ok {
			start := len(dst)
			if hasTS {
				dst = append(dst, body...)
			} else {
				dst = append(dst, `{"@timestamp":`...)
				dst = appendTimestamp(dst, ms, text)
				rest := trimSpace(body[1:])
				if rest[0] != '}' {
					dst = append(dst, ',')
				}
				dst = append(dst, rest...)
			}
			if bytes.IndexByte(body, '\n') >= 0 || bytes.IndexByte(body, '\r') >= 0 {
				for i := start; i < len(dst); i++ {
					if dst[i] == '\n' || dst[i] == '\r' {
						dst[i] = ' '
					}
				}
			}
			return dst, keys
		}
	}
	dst = append(dst, `{"@timestamp":`...)
	dst = appendTimestamp(dst, ms, text)
	dst = append(dst, `,"message":`...)
	dst = appendJSONBytes(dst, e.Body)
	keys = e.Headers.AppendSorted(keys[:0])
	for _, kv := range keys {
		if kv.Key == "message" || kv.Key == "@timestamp" {
			continue
		}
		dst = append(dst, ',')
		dst = appendJSONString(dst, kv.Key)
		dst = append(dst, ':')
		dst = appendJSONString(dst, kv.Value)
	}
	return append(dst, '}'), keys
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. It reads s through a byte
// view of its memory (no copy) and never writes to it.
func appendJSONString(dst []byte, s string) []byte {
	return appendJSONBytes(dst, bytesOf(s))
}

// bytesOf is a byte view of s's memory, without a copy: read it, never
// write to it.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// appendJSONBytes is appendJSONString for a byte slice, without copying it
// into a string.
func appendJSONBytes(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			dst = appendEscape(dst, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendEscape(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}
