package elasticsearchsink

import "encoding/json"

// scanObject reports whether b is one valid JSON object (surrounding white
// space allowed) and whether it has the top-level key key. It accepts
// exactly what json.Valid accepts (FuzzScanObject checks), in one pass and
// several times faster.
func scanObject(b []byte, key string) (ok, hasKey bool) {
	s := scanner{b: b}
	s.space()
	if s.i >= len(b) || b[s.i] != '{' {
		return false, false
	}
	s.i++
	s.space()
	if s.i < len(b) && b[s.i] == '}' {
		s.i++
	} else {
		for {
			if s.i >= len(b) || b[s.i] != '"' {
				return false, false
			}
			start := s.i
			escaped, ok := s.str()
			if !ok {
				return false, false
			}
			raw := b[start+1 : s.i-1]
			if !hasKey {
				if escaped {
					var k string
					hasKey = json.Unmarshal(b[start:s.i], &k) == nil && k == key
				} else {
					hasKey = string(raw) == key
				}
			}
			s.space()
			if s.i >= len(b) || b[s.i] != ':' {
				return false, false
			}
			s.i++
			if !s.value(1) {
				return false, false
			}
			s.space()
			if s.i >= len(b) {
				return false, false
			}
			if b[s.i] == '}' {
				s.i++
				break
			}
			if b[s.i] != ',' {
				return false, false
			}
			s.i++
			s.space()
		}
	}
	s.space()
	return s.i == len(b), hasKey
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

// value scans one value after optional white space.
func (s *scanner) value(depth int) bool {
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		if depth >= maxDepth {
			return false
		}
		s.i++
		s.space()
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			return true
		}
		for {
			s.space()
			if s.i >= len(s.b) || s.b[s.i] != '"' {
				return false
			}
			if _, ok := s.str(); !ok {
				return false
			}
			s.space()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return false
			}
			s.i++
			if !s.value(depth + 1) {
				return false
			}
			s.space()
			if s.i >= len(s.b) {
				return false
			}
			if s.b[s.i] == '}' {
				s.i++
				return true
			}
			if s.b[s.i] != ',' {
				return false
			}
			s.i++
		}
	case c == '[':
		if depth >= maxDepth {
			return false
		}
		s.i++
		s.space()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return true
		}
		for {
			if !s.value(depth + 1) {
				return false
			}
			s.space()
			if s.i >= len(s.b) {
				return false
			}
			if s.b[s.i] == ']' {
				s.i++
				return true
			}
			if s.b[s.i] != ',' {
				return false
			}
			s.i++
		}
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return false
	}
	s.i += len(w)
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && isDigit(s.b[s.i]) {
		s.i++
	}
	return s.i > start
}

func (s *scanner) number() bool {
	b := s.b
	if b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(b) {
		return false
	}
	if b[s.i] == '0' {
		s.i++
	} else if !s.digits() {
		return false
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// plain marks the bytes a string holds without attention.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str scans a string starting at its opening quote and reports whether it
// had escapes.
func (s *scanner) str() (escaped, ok bool) {
	b := s.b
	i := s.i + 1
	for {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return false, false
		}
		switch b[i] {
		case '"':
			s.i = i + 1
			return escaped, true
		case '\\':
			escaped = true
			i++
			if i >= len(b) {
				return false, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return false, false
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false, false
					}
				}
				i += 5
			default:
				return false, false
			}
		default: // a control character
			return false, false
		}
	}
}
