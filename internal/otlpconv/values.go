package otlpconv

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// text returns v as header text and its type name ("" for a string).
func text(v pcommon.Value) (string, string) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return v.Str(), ""
	case pcommon.ValueTypeInt:
		return strconv.FormatInt(v.Int(), 10), TypeInt
	case pcommon.ValueTypeDouble:
		return strconv.FormatFloat(v.Double(), 'g', -1, 64), TypeDouble
	case pcommon.ValueTypeBool:
		return strconv.FormatBool(v.Bool()), TypeBool
	case pcommon.ValueTypeBytes:
		return string(v.Bytes().AsRaw()), bytesType(v.Bytes().AsRaw())
	case pcommon.ValueTypeMap:
		return string(appendJSON(nil, v)), TypeMap
	case pcommon.ValueTypeSlice:
		return string(appendJSON(nil, v)), TypeArray
	}
	return "", TypeEmpty
}

// bytesType is the type name of bytes: TypeBytes, or "" when they are not
// valid UTF-8, since the sink sends such text as bytes anyway. So a Flume
// header or body that is not UTF-8 comes back from a round trip without a
// type header it did not have.
func bytesType(b []byte) string {
	if utf8.Valid(b) {
		return TypeBytes
	}
	return ""
}

// bodyBytes appends v as an event body to dst and returns its type name
// ("" for a string).
func bodyBytes(dst []byte, v pcommon.Value) ([]byte, string) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return append(dst, v.Str()...), ""
	case pcommon.ValueTypeBytes:
		return append(dst, v.Bytes().AsRaw()...), bytesType(v.Bytes().AsRaw())
	case pcommon.ValueTypeEmpty:
		return dst, TypeEmpty
	case pcommon.ValueTypeInt:
		return strconv.AppendInt(dst, v.Int(), 10), TypeInt
	case pcommon.ValueTypeDouble:
		// As an attribute's text (Go's shortest form; NaN, +Inf, -Inf).
		return strconv.AppendFloat(dst, v.Double(), 'g', -1, 64), TypeDouble
	case pcommon.ValueTypeBool:
		return strconv.AppendBool(dst, v.Bool()), TypeBool
	case pcommon.ValueTypeMap:
		return appendJSON(dst, v), TypeMap
	}
	return appendJSON(dst, v), TypeArray
}

// appendJSON appends v as JSON: a map as an object (in its order), an array
// as an array, a string as a string, an int as an integer, a double always
// with a fraction or exponent (1.0, not 1, so that it reads back as a
// double; NaN and ±Inf as the strings "NaN", "Infinity", "-Infinity"), bytes
// as a base64 string, an empty value as null.
func appendJSON(b []byte, v pcommon.Value) []byte {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return appendJSONString(b, v.Str())
	case pcommon.ValueTypeInt:
		return strconv.AppendInt(b, v.Int(), 10)
	case pcommon.ValueTypeDouble:
		return appendJSONDouble(b, v.Double())
	case pcommon.ValueTypeBool:
		return strconv.AppendBool(b, v.Bool())
	case pcommon.ValueTypeBytes:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes().AsRaw())
		return append(b, '"')
	case pcommon.ValueTypeMap:
		b = append(b, '{')
		first := true
		for k, e := range v.Map().All() {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSON(b, e)
		}
		return append(b, '}')
	case pcommon.ValueTypeSlice:
		b = append(b, '[')
		s := v.Slice()
		for i := range s.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, s.At(i))
		}
		return append(b, ']')
	}
	return append(b, "null"...)
}

func appendJSONDouble(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	if bytes.ContainsAny(b[start:], ".eE") {
		return b
	}
	return append(b, ".0"...)
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// setText sets dst to the value that text s of type typ stands for (the
// reverse of text). A text that does not parse as its type is set as a
// string: nothing is lost, only the type.
func setText(dst pcommon.Value, s, typ string) {
	switch typ {
	case "":
		dst.SetStr(s)
		return
	case TypeInt:
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			dst.SetInt(n)
			return
		}
	case TypeDouble:
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			dst.SetDouble(f)
			return
		}
	case TypeBool:
		if v, err := strconv.ParseBool(s); err == nil {
			dst.SetBool(v)
			return
		}
	case TypeBytes:
		dst.SetEmptyBytes().FromRaw([]byte(s))
		return
	case TypeEmpty:
		if s == "" {
			return // dst is empty already
		}
	case TypeMap, TypeArray:
		if setJSON(dst, []byte(s), typ) == nil {
			return
		}
		dst.SetStr("") // undo a partial decode
	}
	dst.SetStr(s)
}

// setJSON decodes the JSON object (TypeMap) or array (TypeArray) data into
// dst, keeping the order of an object's keys.
func setJSON(dst pcommon.Value, data []byte, typ string) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return err
	}
	want := json.Delim('{')
	if typ == TypeArray {
		want = '['
	}
	if tok != want {
		return fmt.Errorf("not a JSON %s", typ)
	}
	if err := decodeInto(d, tok, dst, 0); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the JSON value")
	}
	if _, err := d.Token(); err == nil {
		return errors.New("data after the JSON value")
	}
	return nil
}

// maxDepth bounds the nesting setJSON follows.
const maxDepth = 64

// decodeInto sets dst to the JSON value that starts with tok.
func decodeInto(d *json.Decoder, tok json.Token, dst pcommon.Value, depth int) error {
	if depth > maxDepth {
		return errors.New("JSON nested too deep")
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := dst.SetEmptyMap()
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				vt, err := d.Token()
				if err != nil {
					return err
				}
				if err := decodeInto(d, vt, m.PutEmpty(key), depth+1); err != nil {
					return err
				}
			}
		case '[':
			s := dst.SetEmptySlice()
			for d.More() {
				vt, err := d.Token()
				if err != nil {
					return err
				}
				if err := decodeInto(d, vt, s.AppendEmpty(), depth+1); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("unexpected %v", t)
		}
		_, err := d.Token() // the closing delimiter
		return err
	case string:
		dst.SetStr(t)
	case json.Number:
		s := string(t)
		if !bytes.ContainsAny([]byte(s), ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				dst.SetInt(n)
				return nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		dst.SetDouble(f)
	case bool:
		dst.SetBool(t)
	case nil:
		// null: an empty value
	}
	return nil
}
