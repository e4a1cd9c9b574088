package httpsource

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/event"
)

// BadRequestError is a request the JSON handler cannot read; the source
// answers it with 400 and the message.
type BadRequestError struct {
	Msg string
}

func (e *BadRequestError) Error() string { return e.Msg }

// UnsupportedCharsetError is a request in a charset the JSON handler does not
// read (it reads UTF-8, UTF-16 and UTF-32, as Flume's does).
type UnsupportedCharsetError struct {
	Charset string
}

func (e *UnsupportedCharsetError) Error() string {
	return fmt.Sprintf("unsupported charset %q: the JSON handler reads UTF-8, UTF-16 and UTF-32 only", e.Charset)
}

// jsonEvent is one element of the request array. Values are kept raw and
// read by text, so numbers keep their literal spelling.
type jsonEvent struct {
	Headers map[string]json.RawMessage `json:"headers"`
	Body    json.RawMessage            `json:"body"`
}

// text reads a JSON value the way Flume's Gson reads a String field: strings
// as they are, numbers and booleans as written, null as absent (ok false).
// Objects and arrays are errors.
func text(raw json.RawMessage) (s string, ok bool, err error) {
	if len(raw) == 0 {
		return "", false, nil
	}
	switch raw[0] {
	case '"':
		err = json.Unmarshal(raw, &s)
		return s, err == nil, err
	case 'n':
		return "", false, nil
	case '{':
		return "", false, errors.New("must be a string, not an object")
	case '[':
		return "", false, errors.New("must be a string, not an array")
	}
	return string(raw), true, nil
}

// DecodeJSON reads a JSONHandler request body: a JSON array of objects
// {"headers": {"k": "v"}, "body": "text"}, in charset (UTF-8 when empty).
// Each body is encoded back into charset, as Flume's handler does. It returns
// *BadRequestError for input that is not such an array, naming where it went
// wrong, and *UnsupportedCharsetError for another charset.
func DecodeJSON(data []byte, charset string) ([]event.Event, error) {
	return decode(data, charset, nil)
}

// decode is DecodeJSON asking reserve (when not nil) for the bytes each
// step will allocate before it allocates them: a charset conversion, the
// decoding (as scanShape bounds it), and, for input the fast decoder leaves
// to encoding/json, that decoder's larger need. An error from reserve ends
// decoding and is returned as it is.
func decode(data []byte, charset string, reserve func(n int64) error) ([]event.Event, error) {
	if reserve == nil {
		reserve = func(int64) error { return nil }
	}
	cs, err := normCharset(charset)
	if err != nil {
		return nil, err
	}
	if cs != "utf-8" {
		// The UTF-8 copy, then each body encoded back: at most twice the input.
		if err := reserve(2 * int64(len(data))); err != nil {
			return nil, err
		}
		data, err = toUTF8(data, cs)
		if err != nil {
			return nil, err
		}
	}
	sh := scanShape(data)
	cost := sh.cost(len(data))
	if err := reserve(cost); err != nil {
		return nil, err
	}
	if out, ok := decodeFast(data, sh.events); ok {
		if cs != "utf-8" {
			for i := range out {
				out[i].Body = encodeBody(string(out[i].Body), cs)
			}
		}
		return out, nil
	}
	// Invalid JSON is refused by the general decoder before it allocates,
	// with the message that says where; only valid input needs its bytes.
	if json.Valid(data) {
		if err := reserve((generalFactor - 1) * cost); err != nil {
			return nil, err
		}
	}
	return decodeGeneral(data, cs)
}

// decodeGeneral is DecodeJSON through encoding/json, for every input
// decodeFast leaves to it; it words the errors.
func decodeGeneral(data []byte, cs string) ([]event.Event, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, &BadRequestError{Msg: "request body is empty; send a JSON array of events such as [{\"headers\":{},\"body\":\"text\"}]"}
	}
	if trimmed[0] != '[' {
		return nil, &BadRequestError{Msg: "request body must be a JSON array of events such as [{\"headers\":{},\"body\":\"text\"}]"}
	}
	var in []*jsonEvent
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, &BadRequestError{Msg: describeJSONError(data, err)}
	}
	out := make([]event.Event, len(in))
	var order [][]string // each event's header keys in the request's order, read once an event has headers
	for i, je := range in {
		if je == nil {
			return nil, &BadRequestError{Msg: fmt.Sprintf("invalid JSON syntax: event %d is null; each event must be an object", i)}
		}
		e := &out[i]
		if len(je.Headers) > 0 {
			if order == nil {
				o, err := keyOrders(data, len(in))
				if err != nil {
					return nil, &BadRequestError{Msg: describeJSONError(data, err)}
				}
				order = o
			}
			h, err := orderedHeaders(je.Headers, order[i], i)
			if err != nil {
				return nil, err
			}
			e.Headers = h
		}
		body, _, err := text(je.Body)
		if err != nil {
			return nil, &BadRequestError{Msg: fmt.Sprintf("invalid event %d: body %v", i, err)}
		}
		e.Body = encodeBody(body, cs)
	}
	return out, nil
}

// orderedHeaders returns the headers of event i, m, in the order of keys,
// each key at its first place, and then any key of m that keys does not
// list (none, FuzzJSONHandler says), by key. It empties m.
func orderedHeaders(m map[string]json.RawMessage, keys []string, i int) (event.Headers, error) {
	h := make(event.Headers, 0, len(m))
	for len(m) > 0 {
		for _, k := range keys {
			raw, ok := m[k]
			if !ok {
				continue // given twice: taken at its first place
			}
			delete(m, k)
			v, ok, err := text(raw)
			if err != nil {
				return nil, &BadRequestError{Msg: fmt.Sprintf("invalid event %d: header %q %v", i, k, err)}
			}
			if ok {
				h = append(h, event.Header{Key: k, Value: v})
			}
		}
		keys = slices.Sorted(maps.Keys(m))
	}
	return h, nil
}

// keyOrders reads the keys of each event's headers object of data, n
// events that encoding/json has decoded already, in the order the request
// wrote them: the events' headers keep that order, as Flume's handler does
// (Gson decodes a JSON object into a map that keeps its insertion order),
// where encoding/json gives a map of none.
func keyOrders(data []byte, n int) ([][]string, error) {
	var in []struct {
		Headers keyOrder `json:"headers"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, err
	}
	if len(in) != n {
		return nil, fmt.Errorf("%d events, then %d", n, len(in))
	}
	out := make([][]string, n)
	for i := range in {
		out[i] = in[i].Headers
	}
	return out, nil
}

// keyOrder is the keys of a JSON object, in their order (a key given twice
// is listed twice: the caller takes each once, at its first place).
type keyOrder []string

// UnmarshalJSON lists the keys of b, which encoding/json has found to be
// one valid JSON value, without decoding the values (a json.Decoder for
// each object would cost more than the memory budget allows a request).
func (k *keyOrder) UnmarshalJSON(b []byte) error {
	p := fastParser{b: b}
	p.ws()
	if !p.byte('{') {
		return nil // null (anything else was refused before)
	}
	for {
		p.ws()
		if p.byte('}') {
			return nil
		}
		key, ok := p.str()
		p.ws()
		if !ok || !p.byte(':') || !p.skipValue() {
			return fmt.Errorf("a headers object that is not valid JSON at byte %d", p.i)
		}
		*k = append(*k, key)
		p.ws()
		p.byte(',')
	}
}

func normCharset(cs string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(cs)) {
	case "", "utf-8":
		return "utf-8", nil
	case "utf-16":
		return "utf-16", nil
	case "utf-32":
		return "utf-32", nil
	}
	return "", &UnsupportedCharsetError{Charset: cs}
}

// describeJSONError turns a decoding error into a message that names the
// position, as line, column and byte offset.
func describeJSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		// Offset counts the bytes read, the offending one included.
		off := syn.Offset
		if off > 0 && off <= int64(len(data)) && !strings.HasPrefix(syn.Error(), "unexpected end") {
			off--
		}
		return "invalid JSON syntax at " + position(data, off) + ": " + syn.Error()
	case errors.As(err, &typ):
		what := "a value"
		if typ.Field != "" {
			what = "field " + typ.Field
		}
		return fmt.Sprintf("invalid event at %s: %s must not be a JSON %s; send an array of objects with \"headers\" (an object of strings) and \"body\" (a string)",
			position(data, typ.Offset), what, typ.Value)
	}
	return "invalid JSON: " + err.Error()
}

// position prints byte offset off of data as "line L, column C (byte off)",
// counting columns in characters.
func position(data []byte, off int64) string {
	off = max(0, min(off, int64(len(data))))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	col := 1 + utf8.RuneCount(data[start:off])
	return fmt.Sprintf("line %d, column %d (byte %d)", line, col, off)
}

// toUTF8 decodes a UTF-16 or UTF-32 request body. As Java's decoders do, a
// byte-order mark picks the byte order; big-endian otherwise.
func toUTF8(data []byte, cs string) ([]byte, error) {
	bad := func(what string) error {
		return &BadRequestError{Msg: fmt.Sprintf("request body is not valid %s: %s", strings.ToUpper(cs), what)}
	}
	var order binary.ByteOrder = binary.BigEndian
	var out []byte
	switch cs {
	case "utf-16":
		if len(data) >= 2 {
			switch {
			case data[0] == 0xFE && data[1] == 0xFF:
				data = data[2:]
			case data[0] == 0xFF && data[1] == 0xFE:
				order, data = binary.LittleEndian, data[2:]
			}
		}
		if len(data)%2 != 0 {
			return nil, bad("odd number of bytes")
		}
		units := make([]uint16, len(data)/2)
		for i := range units {
			units[i] = order.Uint16(data[2*i:])
		}
		out = make([]byte, 0, len(data))
		for _, r := range utf16.Decode(units) {
			out = utf8.AppendRune(out, r)
		}
	case "utf-32":
		if len(data) >= 4 {
			switch {
			case bytes.HasPrefix(data, []byte{0, 0, 0xFE, 0xFF}):
				data = data[4:]
			case bytes.HasPrefix(data, []byte{0xFF, 0xFE, 0, 0}):
				order, data = binary.LittleEndian, data[4:]
			}
		}
		if len(data)%4 != 0 {
			return nil, bad("length is not a multiple of 4 bytes")
		}
		out = make([]byte, 0, len(data)/2)
		for i := 0; i < len(data); i += 4 {
			r := rune(order.Uint32(data[i:]))
			if !utf8.ValidRune(r) {
				return nil, bad(fmt.Sprintf("code point %#x at byte %d", uint32(r), i))
			}
			out = utf8.AppendRune(out, r)
		}
	}
	return out, nil
}

// encodeBody encodes s in cs as Java's String.getBytes does: UTF-16 with a
// big-endian byte-order mark, UTF-32 big-endian without one.
func encodeBody(s, cs string) []byte {
	switch cs {
	case "utf-16":
		units := utf16.Encode([]rune(s))
		b := make([]byte, 0, 2+2*len(units))
		if len(units) > 0 {
			b = append(b, 0xFE, 0xFF)
		}
		for _, u := range units {
			b = binary.BigEndian.AppendUint16(b, u)
		}
		return b
	case "utf-32":
		b := make([]byte, 0, 4*len(s))
		for _, r := range s {
			b = binary.BigEndian.AppendUint32(b, uint32(r))
		}
		return b
	}
	return []byte(s)
}
