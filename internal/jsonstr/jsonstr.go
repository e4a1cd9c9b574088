// Package jsonstr decodes the parts of a JSON string that hand-written
// scanners share (the http source's fast decoder, Docker's json-file
// records): an escape sequence and a byte above ASCII, each decoded as
// encoding/json decodes it, so that every scanner gives the same text for
// the same bytes.
package jsonstr

import (
	"unicode/utf16"
	"unicode/utf8"
)

// AppendEscape decodes the escape sequence at the start of s (s[0] is a
// backslash) onto out and returns out and how many bytes of s it took. A
// \u escape of a surrogate pair is one rune; a lone surrogate is U+FFFD. It
// reports false for an escape JSON does not have or one cut short.
func AppendEscape(out, s []byte) ([]byte, int, bool) {
	if len(s) < 2 || s[0] != '\\' {
		return out, 0, false
	}
	switch e := s[1]; e {
	case '"', '\\', '/':
		return append(out, e), 2, true
	case 'b':
		return append(out, '\b'), 2, true
	case 'f':
		return append(out, '\f'), 2, true
	case 'n':
		return append(out, '\n'), 2, true
	case 'r':
		return append(out, '\r'), 2, true
	case 't':
		return append(out, '\t'), 2, true
	case 'u':
		r, ok := hex4(s[2:])
		if !ok {
			return out, 0, false
		}
		if utf16.IsSurrogate(r) {
			if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
				if r2, ok := hex4(s[8:]); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						return utf8.AppendRune(out, d), 12, true
					}
				}
			}
			r = utf8.RuneError
		}
		return utf8.AppendRune(out, r), 6, true
	}
	return out, 0, false
}

// AppendRune appends the UTF-8 sequence at the start of s onto out and
// returns out and how many bytes of s it took: a byte that starts no valid
// sequence becomes U+FFFD and takes one byte. s must not be empty.
func AppendRune(out, s []byte) ([]byte, int) {
	r, size := utf8.DecodeRune(s)
	if r == utf8.RuneError && size == 1 {
		return utf8.AppendRune(out, utf8.RuneError), 1
	}
	return append(out, s[:size]...), size
}

// hex4 reads the four hexadecimal digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
