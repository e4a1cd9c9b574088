package jsonstr

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// decode decodes the content of a JSON string with AppendEscape and
// AppendRune, as the scanners that use them do.
func decode(s []byte) (string, bool) {
	var out []byte
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\':
			var n int
			var ok bool
			if out, n, ok = AppendEscape(out, s[i:]); !ok {
				return "", false
			}
			i += n
		case c == '"' || c < 0x20:
			return "", false // not inside a JSON string
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			var n int
			out, n = AppendRune(out, s[i:])
			i += n
		}
	}
	return string(out), true
}

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{`plain`, "plain", true},
		{`a\"b\\c\/d`, `a"b\c/d`, true},
		{`\b\f\n\r\t`, "\b\f\n\r\t", true},
		{`\u00e9\u4e2d`, "é中", true},
		{`\ud83d\ude00`, "😀", true},        // a surrogate pair is one rune
		{`\ud83d`, "\uFFFD", true},         // a lone high surrogate
		{`\ude00x`, "\uFFFDx", true},       // a lone low surrogate
		{`\ud83d\u0041`, "\uFFFDA", true},  // a high surrogate and no low one
		{"caf\xc3\xa9", "café", true},      // UTF-8 kept
		{"a\xffb", "a\uFFFDb", true},       // an invalid byte is U+FFFD
		{"\xe4\xb8", "\uFFFD\uFFFD", true}, // a cut sequence, byte by byte
		{`\x`, "", false},                  // no such escape
		{`\u12`, "", false},                // cut short
		{`\u12g4`, "", false},              // not hexadecimal
		{`\`, "", false},                   // a backslash at the end
	} {
		got, ok := decode([]byte(c.in))
		if ok != c.ok || got != c.want {
			t.Errorf("decode(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzDecode holds the decoding to encoding/json's on every string content
// json.Unmarshal accepts.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`plain`, `\ud83d\ude00`, `\ud83d`, "a\xffb", `\u0000`, `\/\b`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		var want string
		quoted := append(append([]byte{'"'}, s...), '"')
		werr := json.Unmarshal(quoted, &want)
		got, ok := decode(s)
		if ok != (werr == nil) {
			t.Fatalf("decode(%q) ok = %v, encoding/json: %v", s, ok, werr)
		}
		if ok && got != want {
			t.Fatalf("decode(%q) = %q, encoding/json %q", s, got, want)
		}
	})
}
