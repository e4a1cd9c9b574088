package syslogsource

import (
	"net/netip"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// appendJavaText appends b to dst as Flume's round trip through a Java
// String turns it: bytes decoded as UTF-8 with every maximal invalid
// subsequence replaced by U+FFFD (what new String(bytes, UTF_8) does), then
// encoded again. Valid UTF-8 comes out unchanged.
func appendJavaText(dst, b []byte) []byte {
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			i := 1
			for i < len(b) && b[i] < utf8.RuneSelf {
				i++
			}
			dst = append(dst, b[:i]...)
			b = b[i:]
			continue
		}
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			dst = append(dst, b[:size]...)
			b = b[size:]
			continue
		}
		dst = append(dst, "\uFFFD"...)
		b = b[invalidLen(b):]
	}
	return dst
}

// invalidLen is the length of the maximal subpart of an ill-formed UTF-8
// sequence at the start of b (Unicode's "substitution of maximal subparts"):
// the lead byte plus the continuation bytes that were still acceptable, with
// the bounds Java's UTF-8 decoder applies.
func invalidLen(b []byte) int {
	lo, hi, need := byte(0x80), byte(0xBF), 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		lo, need = 0xA0, 2
	case c >= 0xE1 && c <= 0xEF:
		// ED A0..BF xx is a surrogate: Java decodes the three bytes, then
		// rejects them as one malformed sequence.
		need = 2
	case c == 0xF0:
		lo, need = 0x90, 3
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		hi, need = 0x8F, 3
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// javaParseInt parses s as Java's Integer.parseInt does: an optional sign,
// then one or more decimal digits of any script, within int32.
func javaParseInt(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	neg := false
	if s[0] == '+' || s[0] == '-' {
		neg = s[0] == '-'
		s = s[1:]
		if s == "" {
			return 0, false
		}
	}
	n := int64(0)
	for _, r := range s {
		d := digitValue(r)
		if d < 0 {
			return 0, false
		}
		n = n*10 + int64(d)
		if n > 1<<31 {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	if n > 1<<31-1 || n < -(1<<31) {
		return 0, false
	}
	return int(n), true
}

// digitValue is Character.digit(r, 10): the value of a Unicode decimal
// digit, or -1.
func digitValue(r rune) int {
	if r >= '0' && r <= '9' {
		return int(r - '0')
	}
	if r < utf8.RuneSelf || !unicode.IsDigit(r) {
		return -1
	}
	// Decimal digits come in runs of ten starting at a zero.
	for _, rg := range unicode.Nd.R16 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	return -1
}

// javaHostAddress formats ip as Java's InetAddress.getHostAddress does:
// dotted IPv4, or all eight IPv6 groups in lower-case hex without "::".
func javaHostAddress(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	raw := ip.As16()
	b := make([]byte, 0, 40)
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b = append(b, ':')
		}
		b = strconv.AppendUint(b, uint64(raw[i])<<8|uint64(raw[i+1]), 16)
	}
	if z := ip.Zone(); z != "" {
		b = append(b, '%')
		b = append(b, z...)
	}
	return string(b)
}

// smallInts holds the decimal strings of 0..999, so Facility, Severity and
// priority headers cost no allocation.
var smallInts = func() [1000]string {
	var a [1000]string
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

func itoa(n int) string {
	if n >= 0 && n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.Itoa(n)
}
