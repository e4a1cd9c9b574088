package containerlog

import (
	"encoding/binary"
	"fmt"
)

// ParseTime parses an RFC 3339 time as the runtimes write it
// (2006-01-02T15:04:05.999999999Z07:00: up to nine fractional digits, Z or
// an offset of hours and minutes) and returns it in Unix nanoseconds. It
// takes a byte slice and does not allocate, as it runs for every record.
func ParseTime(b []byte) (int64, error) {
	return parseTimeIn(b, nil)
}

// parseTimeIn is ParseTime remembering the last UTC minute in m (nil: no
// memory).
func parseTimeIn(b []byte, m *minute) (int64, error) {
	if ns, ok := parseTimeUTC(b, m); ok {
		return ns, nil
	}
	return parseTime(b)
}

// minute is the minute of the last UTC time read: a file's records come
// many to a minute, and a time in the same minute is read from its
// seconds on.
type minute struct {
	text [2]uint64 // its "YYYY-MM-DDTHH:MM" as parseTimeUTC loads it
	secs int64     // its Unix seconds
	ok   bool
}

// parseTimeUTC reads the times dockerd and containerd on a UTC node
// write, 2006-01-02T15:04:05.999999999Z with 0 to 9 fractional digits, its
// fields at fixed offsets, reading eight bytes at a time; with m, a time in
// m's minute from its seconds on, and else it keeps the time's minute in
// m. It reports false for anything else (an offset, a field out of range,
// a year it does not read), which parseTime then reads or explains; what
// it accepts, parseTime reads the same (TestParseTimeUTC,
// FuzzParseTimeUTC).
func parseTimeUTC(b []byte, m *minute) (int64, bool) {
	if len(b) < 20 || len(b) > 30 || b[len(b)-1] != 'Z' {
		return 0, false
	}
	// Little-endian: byte i of a word is bits 8i to 8i+7. The words hold
	// "YYYY-MM-", "DDTHH:MM" and, overlapping, "HH:MM:SS"; every byte that
	// is not a separator must be a digit.
	w0 := binary.LittleEndian.Uint64(b[0:8])
	w1 := binary.LittleEndian.Uint64(b[8:16])
	var secs int64
	if m != nil && m.ok && m.text == [2]uint64{w0, w1} {
		s1, s2 := b[17]-'0', b[18]-'0'
		if b[16] != ':' || s1 > 5 || s2 > 9 {
			return 0, false
		}
		secs = m.secs + int64(s1)*10 + int64(s2)
	} else {
		w2 := binary.LittleEndian.Uint64(b[11:19])
		const (
			sep0, sepVal0 = 0xff0000ff00000000, 0x2d00002d00000000 // '-' at 4 and 7
			sep1, sepVal1 = 0x0000ff0000ff0000, 0x00003a0000540000 // 'T' at 2, ':' at 5
			sep2, sepVal2 = 0x0000ff0000ff0000, 0x00003a00003a0000 // ':' at 2 and 5
		)
		if w0&sep0 != sepVal0 || w1&sep1 != sepVal1 || w2&sep2 != sepVal2 ||
			!digits8(w0, ^uint64(sep0)) || !digits8(w1, ^uint64(sep1)) || !digits8(w2, ^uint64(sep2)) {
			return 0, false
		}
		// The digits' values: a digit XOR '0' is its value, with no
		// borrow from a neighbour as subtracting would make.
		d0, d1, d2 := w0^0x3030303030303030, w1^0x3030303030303030, w2^0x3030303030303030
		digit := func(w uint64, i int) int { return int(w >> (8 * i) & 0xff) }
		year := digit(d0, 0)*1000 + digit(d0, 1)*100 + digit(d0, 2)*10 + digit(d0, 3)
		month := digit(d0, 5)*10 + digit(d0, 6)
		day := digit(d1, 0)*10 + digit(d1, 1)
		hour := digit(d2, 0)*10 + digit(d2, 1)
		mins := digit(d2, 3)*10 + digit(d2, 4)
		sec := digit(d2, 6)*10 + digit(d2, 7)
		if year < 1678 || year > 2261 || month < 1 || month > 12 || day < 1 || (day > 28 && day > daysIn(month, year)) ||
			hour > 23 || mins > 59 || sec > 59 {
			return 0, false
		}
		secs = unixDays(year, month, day)*86400 + int64(hour*3600+mins*60)
		if m != nil {
			*m = minute{text: [2]uint64{w0, w1}, secs: secs, ok: true}
		}
		secs += int64(sec)
	}
	nanos := 0
	switch frac := b[19 : len(b)-1]; {
	case len(frac) == 0:
	case frac[0] != '.' || len(frac) == 1:
		return 0, false
	case len(frac) == 10:
		// Nine digits, as RFC3339Nano writes most times: eight read at
		// once, then the ninth.
		w := binary.LittleEndian.Uint64(frac[1:9])
		c := frac[9] - '0'
		if !digits8(w, ^uint64(0)) || c > 9 {
			return 0, false
		}
		// Byte 0 is the first digit: pairs, then fours, then all eight
		// are summed in lanes of 16, 32 and 64 bits, none overflowing.
		w ^= 0x3030303030303030
		w = (w*10 + w>>8) & 0x00ff00ff00ff00ff
		w = (w*100 + w>>16) & 0x0000ffff0000ffff
		w = (w*10000 + w>>32) & 0xffffffff
		nanos = int(w)*10 + int(c)
	default:
		for _, c := range frac[1:] {
			if c-'0' > 9 {
				return 0, false
			}
			nanos = nanos*10 + int(c-'0')
		}
		nanos *= pow10[10-len(frac)]
	}
	return secs*1e9 + int64(nanos), true
}

// digits8 reports whether every byte of w under mask (whole bytes) is an
// ASCII digit: its high nibble is 3, and adding 6 leaves it 3 (no byte
// carries into the next unless it is 0xfa or more, which fails the first
// test anyway).
func digits8(w, mask uint64) bool {
	const hi, three, six = 0xf0f0f0f0f0f0f0f0, 0x3030303030303030, 0x0606060606060606
	return w&hi&mask == three&mask && (w+six)&hi&mask == three&mask
}

// parseTime is ParseTime for any time it reads, with an error saying what
// is wrong with one it does not.
func parseTime(b []byte) (int64, error) {
	if len(b) < len("2006-01-02T15:04:05Z") {
		return badTime(b, "too short")
	}
	// two reads the two digits at b[i:i+2]; ok is false unless both are
	// digits (a byte below '0' wraps around to more than 9).
	two := func(i int) (n int, ok bool) {
		hi, lo := b[i]-'0', b[i+1]-'0'
		return int(hi)*10 + int(lo), hi <= 9 && lo <= 9
	}
	century, ok1 := two(0)
	yy, ok2 := two(2)
	month, ok3 := two(5)
	day, ok4 := two(8)
	hour, ok5 := two(11)
	minute, ok6 := two(14)
	sec, ok7 := two(17)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return badTime(b, "not YYYY-MM-DDTHH:MM:SS")
	}
	year := century*100 + yy
	if year < 1678 || year > 2261 {
		return badTime(b, "year outside what nanoseconds since 1970 can hold")
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return badTime(b, "a field is out of range")
	}
	rest := b[19:]
	nanos := 0
	if rest[0] == '.' {
		digits := 0
		for _, c := range rest[1:] {
			if c < '0' || c > '9' {
				break
			}
			digits++
			nanos = nanos*10 + int(c-'0')
			if digits > 9 {
				return badTime(b, "1 to 9 fractional digits")
			}
		}
		if digits == 0 {
			return badTime(b, "1 to 9 fractional digits")
		}
		nanos *= pow10[9-digits]
		rest = rest[1+digits:]
	}
	offset := 0
	switch {
	case len(rest) == 1 && rest[0] == 'Z':
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := two(len(b) - 5)
		om, ok2 := two(len(b) - 2)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return badTime(b, "offset out of range")
		}
		offset = (oh*60 + om) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return badTime(b, "no Z or ±hh:mm offset")
	}
	secs := unixDays(year, month, day)*86400 + int64(hour*3600+minute*60+sec-offset)
	return secs*1e9 + int64(nanos), nil
}

// badTime is ParseTime's error for b.
func badTime(b []byte, what string) (int64, error) {
	return 0, fmt.Errorf("time %q is not RFC 3339 (%s)", trim(b), what)
}

// pow10[n] is 10 to the n.
var pow10 = [10]int{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

// unixDays returns the days from 1970-01-01 to the date, a valid one of a
// year from 1 on. It is what time.Date computes, without its normalizing
// of out-of-range fields and its time zones: ParseTime runs for every
// record and has checked the fields already.
func unixDays(year, month, day int) int64 {
	// Counted from 1 March of year 0, so that a leap day ends its year,
	// in unsigned arithmetic, where dividing by a constant is multiplying
	// (719468 days from there to 1970-01-01; 153 days in every 5 months
	// from March on).
	y, m := uint(year), uint(month)
	if m <= 2 {
		y, m = y-1, m+12
	}
	d := 365*y + y/4 - y/100 + y/400 + (153*(m-3)+2)/5 + uint(day) - 1
	return int64(d) - 719468
}

func isLeap(year int) bool { return year%4 == 0 && (year%100 != 0 || year%400 == 0) }

func daysIn(month, year int) int {
	switch month {
	case 2:
		if isLeap(year) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
