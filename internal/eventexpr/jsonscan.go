package eventexpr

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strings"
	"unsafe"
)

// jsonScan checks a JSON text in one pass, the way json() needs it checked
// before anything reads it: strictly (the grammar of RFC 8259, what
// encoding/json.Valid accepts), within the nesting limit and the value
// budget, and without recursion, so that a megabyte of "[[[[" costs a
// loop, not a stack. When the text is an object it also notes the root's
// members, so that json(body).field, the common case, reads its value
// from the text without building a tree (fastjson builds one only for
// what the members cannot answer).
type jsonScan struct {
	// stack holds '{' or '[' for each container open.
	stack []byte
	// members are the root object's members, in the order written.
	members []jsonMember
	// rootObject reports the root is an object, so members is all of it.
	rootObject bool
}

// jsonMember is one member of the root object, as written in the text:
// offsets, not strings, so that noting one is no pointer write.
type jsonMember struct {
	keyFrom, keyTo int32 // between the quotes, escapes not undone
	valFrom, valTo int32 // the value's text
	// kind is the value's first byte, or '\\' for a string with escapes.
	kind byte
	// keyEscaped reports the key has escapes, so key is not its name.
	keyEscaped bool
}

func (m *jsonMember) key(s string) string { return s[m.keyFrom:m.keyTo] }
func (m *jsonMember) val(s string) string { return s[m.valFrom:m.valTo] }

// scanResult is what a scan found.
type scanResult int

const (
	scanValid scanResult = iota
	scanInvalid
	scanTooDeep  // nested deeper than MaxJSONDepth
	scanTooLarge // more values than the budget
)

// scan checks s, a whole JSON text, counting its values against limit.
func (sc *jsonScan) scan(s string, limit int) scanResult {
	i := skipSpace(s, 0)
	// Offsets are int32: a text longer than that (jsonMaxBytes is at most
	// 1 GiB) leaves its members to the tree.
	sc.rootObject = i < len(s) && s[i] == '{' && len(s) <= math.MaxInt32
	var r scanResult
	r, sc.stack, sc.members = scanText(s, i, limit, sc.rootObject, sc.stack[:0], sc.members[:0])
	return r
}

// scanText is scan with its buffers in locals (registers, not stores to
// the scanner at each member); it returns them for reuse.
func scanText(s string, i, limit int, rootObject bool, stack []byte, members []jsonMember) (scanResult, []byte, []jsonMember) {
	values := 0
	var m jsonMember // the root object's member being read
	for {
		// A value starts at i (spaces skipped). fastjson counts the
		// levels of values, scalars too, and refuses the 301st: so do
		// we, so that what passes here it parses.
		if i >= len(s) {
			return scanInvalid, stack, members
		}
		if len(stack) >= MaxJSONDepth {
			return scanTooDeep, stack, members
		}
		if values++; values > limit {
			return scanTooLarge, stack, members
		}
		if len(stack) == 1 && rootObject {
			m.valFrom, m.kind = int32(i), s[i]
		}
		switch c := s[i]; c {
		case '"':
			end, escaped, ok := scanString(s, i+1)
			if !ok {
				return scanInvalid, stack, members
			}
			if escaped && len(stack) == 1 {
				m.kind = '\\'
			}
			i = end
		case '{', '[':
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			i = skipSpace(s, i+1)
			if i < len(s) && s[i] == closer {
				i++
				break // an empty container is a whole value
			}
			stack = append(stack, c)
			if c == '{' {
				var ok bool
				if i, ok = readKey(s, i, len(stack) == 1, &m); !ok {
					return scanInvalid, stack, members
				}
			}
			continue
		case 't':
			if !strings.HasPrefix(s[i:], "true") {
				return scanInvalid, stack, members
			}
			i += len("true")
		case 'f':
			if !strings.HasPrefix(s[i:], "false") {
				return scanInvalid, stack, members
			}
			i += len("false")
		case 'n':
			if !strings.HasPrefix(s[i:], "null") {
				return scanInvalid, stack, members
			}
			i += len("null")
		default:
			end, ok := scanNumber(s, i)
			if !ok {
				return scanInvalid, stack, members
			}
			i = end
		}
		// A value ended at i: close the containers it ends, until a
		// comma asks for the next value.
		for {
			if len(stack) == 1 && rootObject {
				m.valTo = int32(i)
				members = append(members, m)
			}
			i = skipSpace(s, i)
			if len(stack) == 0 {
				if i != len(s) {
					return scanInvalid, stack, members
				}
				return scanValid, stack, members
			}
			if i >= len(s) {
				return scanInvalid, stack, members
			}
			top := stack[len(stack)-1]
			if s[i] == ',' {
				i = skipSpace(s, i+1)
				if top == '{' {
					var ok bool
					if i, ok = readKey(s, i, len(stack) == 1, &m); !ok {
						return scanInvalid, stack, members
					}
				}
				break
			}
			if (top == '{' && s[i] != '}') || (top == '[' && s[i] != ']') {
				return scanInvalid, stack, members
			}
			stack = stack[:len(stack)-1]
			i++
		}
	}
}

// readKey reads an object's key and its colon at i, leaving i at the
// value; a key of the root object (root) is kept in m.
func readKey(s string, i int, root bool, m *jsonMember) (int, bool) {
	if i >= len(s) || s[i] != '"' {
		return i, false
	}
	end, esc, ok := scanString(s, i+1)
	if !ok {
		return i, false
	}
	if root {
		m.keyFrom, m.keyTo, m.keyEscaped = int32(i+1), int32(end-1), esc
	}
	i = skipSpace(s, end)
	if i >= len(s) || s[i] != ':' {
		return i, false
	}
	return skipSpace(s, i+1), true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(s string, i int) int {
	for i < len(s) && s[i] <= ' ' && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// plainInString marks the bytes a string can hold as they are: not a
// quote, not a backslash, not a control character.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString reads the string whose opening quote is just before i and
// returns the index after its closing quote and whether it has escapes.
func scanString(s string, i int) (end int, escaped, ok bool) {
	for {
		// Eight bytes at a time: to the first that needs a look.
		for i+8 <= len(s) {
			if m := needsLook(load64(s, i)); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				goto look
			}
			i += 8
		}
		for i < len(s) && plainInString[s[i]] {
			i++
		}
	look:
		if i >= len(s) {
			return i, escaped, false
		}
		switch s[i] {
		case '"':
			return i + 1, escaped, true
		case '\\':
			escaped = true
			if i+1 >= len(s) {
				return i, escaped, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s) || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) || !isHex(s[i+5]) {
					return i, escaped, false
				}
				i += 6
			default:
				return i, escaped, false
			}
		default: // a control character
			return i, escaped, false
		}
	}
}

// load64 reads the eight bytes of s at i, the first the lowest.
func load64(s string, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s), len(s))[i:])
}

// needsLook marks the bytes of x that are a quote, a backslash or a
// control character by their high bit. Each test is the classic "has a
// byte less than n" of a word; it may also mark bytes above the first it
// marks (a borrow), never one below, so the lowest mark is the first such
// byte.
func needsLook(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less := func(x uint64, n uint64) uint64 { return (x - ones*n) & ^x & highs }
	return less(x, 0x20) | less(x^(ones*'"'), 1) | less(x^(ones*'\\'), 1)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber reads the number at i: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(s string, i int) (int, bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i+1)
	default:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func digits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
