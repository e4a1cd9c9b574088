package config

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf16"
	"unicode/utf8"
)

// Entry is one property of a .properties file: its key and value with the
// escapes decoded, and the line where its logical line (the key) starts.
type Entry struct {
	Key   string
	Value string
	Line  int
}

// ParseProperties reads Java .properties text the way java.util.Properties.load
// reads it, and returns its properties in file order. When a key occurs more
// than once the last occurrence wins, as in Java, and only it is returned.
//
// The grammar, as Java has it:
//   - A logical line is a physical line (ended by \n, \r or \r\n) plus the
//     following physical lines while it ends in an odd number of
//     backslashes; the backslash is dropped and so is the leading white
//     space of each continuation line.
//   - Leading white space (space, tab, form feed) is skipped. Blank lines are
//     skipped, and a line whose first other character is '#' or '!' is a
//     comment. A '#' anywhere else is an ordinary character.
//   - The key ends at the first unescaped '=', ':' or white space. White space
//     around the separator is skipped, and one '=' or ':' after white space
//     is part of the separator ("k = v", "k : v", "k v" all give k -> v).
//   - In keys and values \t \n \r \f and \uXXXX are escapes, and a backslash
//     before any other character stands for that character ("\=", "\:",
//     "\ ", "\#", "\\").
//
// Where Java throws on a malformed \uXXXX escape, ParseProperties records a
// Problem with file and line, skips that line and goes on; the error it
// returns is then a *Problems.
//
// Input is taken as UTF-8. Flume reads the file with the JVM's platform
// charset (a FileReader), which is UTF-8 on almost every current system and
// the default from Java 18 on. Bytes that are not UTF-8 become U+FFFD, as
// Java's decoder makes them, and a leading byte order mark is dropped (Java
// would keep it as part of the first key, which no agent could then match).
// A \uXXXX escape pair that forms a UTF-16 surrogate pair gives its
// character; a lone surrogate, which a Go string cannot hold, gives U+FFFD.
func ParseProperties(file string, r io.Reader) ([]Entry, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	var probs Problems
	entries := parseProperties(file, data, &probs)
	return entries, probs.Err()
}

func parseProperties(file string, data []byte, probs *Problems) []Entry {
	all := parseAll(file, data, probs)
	// The last of duplicate keys wins.
	last := make(map[string]int, len(all))
	for i, e := range all {
		last[e.Key] = i
	}
	out := all[:0]
	for i, e := range all {
		if last[e.Key] == i {
			out = append(out, e)
		}
	}
	return out
}

// parseAll is parseProperties keeping every occurrence of a key, in file
// order, so the loader can report keys set twice.
func parseAll(file string, data []byte, probs *Problems) []Entry {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	if !utf8.Valid(data) {
		data = replaceInvalidUTF8(data)
	}
	var all []Entry
	for _, ll := range logicalLines(data) {
		e, bad := splitEntry(ll.text)
		if bad != "" {
			probs.Add(file, ll.line, bad, `malformed \uXXXX escape; write \u followed by exactly four hexadecimal digits`)
			continue
		}
		e.Line = ll.line
		all = append(all, e)
	}
	return all
}

// physLine is one physical line without its terminator.
type physLine struct {
	text []byte
	line int
}

type logicalLine struct {
	text []byte
	line int // the physical line it starts on
}

// physicalLines splits data at \n, \r and \r\n. A terminator at the very end
// does not start another (empty) line.
func physicalLines(data []byte) []physLine {
	var out []physLine
	line := 1
	start := 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c != '\n' && c != '\r' {
			continue
		}
		out = append(out, physLine{data[start:i], line})
		line++
		if c == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		start = i + 1
	}
	if start < len(data) {
		out = append(out, physLine{data[start:], line})
	}
	return out
}

func isPropSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

func trimPropSpace(b []byte) []byte {
	for len(b) > 0 && isPropSpace(b[0]) {
		b = b[1:]
	}
	return b
}

// oddTrailingBackslashes reports whether b ends in an odd number of '\'.
func oddTrailingBackslashes(b []byte) bool {
	n := 0
	for i := len(b) - 1; i >= 0 && b[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// logicalLines joins continuation lines and drops blank and comment lines,
// with the same results as Java's Properties.LineReader.
func logicalLines(data []byte) []logicalLine {
	phys := physicalLines(data)
	var out []logicalLine
	for i := 0; i < len(phys); {
		first := phys[i]
		i++
		cur := trimPropSpace(first.text)
		if len(cur) == 0 || cur[0] == '#' || cur[0] == '!' {
			continue
		}
		var buf []byte
		for {
			if !oddTrailingBackslashes(cur) {
				buf = append(buf, cur...)
				break
			}
			buf = append(buf, cur[:len(cur)-1]...)
			if i >= len(phys) {
				break
			}
			if len(buf) == 0 {
				// A line holding only a backslash: Java's reader is then
				// still at the start of a logical line, so the next
				// physical line starts afresh (and may be a comment).
				break
			}
			cur = trimPropSpace(phys[i].text)
			i++
		}
		if len(buf) == 0 && i < len(phys) {
			continue
		}
		// At the end of the input a lone backslash line gives Java an
		// empty logical line, that is the property "" = "".
		out = append(out, logicalLine{buf, first.line})
	}
	return out
}

// splitEntry splits a logical line into key and value and decodes both. On
// a malformed \u escape it returns the raw key text in bad.
func splitEntry(line []byte) (e Entry, bad string) {
	keyLen := 0
	valueStart := len(line)
	hasSep := false
	escaped := false
	for keyLen < len(line) {
		c := line[keyLen]
		if !escaped && (c == '=' || c == ':') {
			valueStart = keyLen + 1
			hasSep = true
			break
		}
		if !escaped && isPropSpace(c) {
			valueStart = keyLen + 1
			break
		}
		escaped = c == '\\' && !escaped
		keyLen++
	}
	for valueStart < len(line) {
		c := line[valueStart]
		if !isPropSpace(c) {
			if hasSep || (c != '=' && c != ':') {
				break
			}
			hasSep = true
		}
		valueStart++
	}
	rawKey := line[:keyLen]
	key, ok := unescapeProp(rawKey)
	if !ok {
		return Entry{}, string(rawKey)
	}
	val, ok := unescapeProp(line[valueStart:])
	if !ok {
		return Entry{}, key
	}
	return Entry{Key: key, Value: val}, ""
}

// unescapeProp decodes the escapes of a key or value; ok is false on a
// malformed \uXXXX.
func unescapeProp(in []byte) (string, bool) {
	if bytes.IndexByte(in, '\\') < 0 {
		return string(in), true
	}
	out := make([]byte, 0, len(in))
	var high rune // a pending high surrogate from a \u escape
	flushHigh := func() {
		if high != 0 {
			out = utf8.AppendRune(out, utf8.RuneError)
			high = 0
		}
	}
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c != '\\' {
			flushHigh()
			out = append(out, c)
			continue
		}
		i++
		if i >= len(in) {
			// Java's reader never leaves an unescaped backslash at the end
			// of a key or value; drop it if one gets here anyway.
			break
		}
		c = in[i]
		if c != 'u' {
			flushHigh()
			switch c {
			case 't':
				c = '\t'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 'f':
				c = '\f'
			}
			out = append(out, c)
			continue
		}
		if len(in)-(i+1) < 4 {
			return "", false
		}
		var v rune
		for _, h := range in[i+1 : i+5] {
			d, ok := hexDigit(h)
			if !ok {
				return "", false
			}
			v = v<<4 | d
		}
		i += 4
		switch {
		case utf16.IsSurrogate(v) && v < 0xDC00: // high surrogate
			flushHigh()
			high = v
		case utf16.IsSurrogate(v): // low surrogate
			if high != 0 {
				out = utf8.AppendRune(out, utf16.DecodeRune(high, v))
				high = 0
			} else {
				out = utf8.AppendRune(out, utf8.RuneError)
			}
		default:
			flushHigh()
			out = utf8.AppendRune(out, v)
		}
	}
	flushHigh()
	return string(out), true
}

func hexDigit(c byte) (rune, bool) {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0'), true
	case 'a' <= c && c <= 'f':
		return rune(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return rune(c-'A') + 10, true
	}
	return 0, false
}

// replaceInvalidUTF8 replaces each byte that is not part of valid UTF-8 with
// U+FFFD.
func replaceInvalidUTF8(b []byte) []byte {
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}
