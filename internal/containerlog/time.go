package containerlog

import (
	"fmt"
	"time"
)

// ParseTime parses an RFC 3339 time as the runtimes write it
// (2006-01-02T15:04:05.999999999Z07:00: up to nine fractional digits, Z or
// an offset of hours and minutes) and returns it in Unix nanoseconds. It
// takes a byte slice and does not allocate, as it runs for every record.
func ParseTime(b []byte) (int64, error) {
	bad := func(what string) (int64, error) {
		return 0, fmt.Errorf("time %q is not RFC 3339 (%s)", trim(b), what)
	}
	if len(b) < len("2006-01-02T15:04:05Z") {
		return bad("too short")
	}
	num := func(b []byte) (int, bool) {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	minute, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return bad("not YYYY-MM-DDTHH:MM:SS")
	}
	if year < 1678 || year > 2261 {
		return bad("year outside what nanoseconds since 1970 can hold")
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return bad("a field is out of range")
	}
	rest := b[19:]
	nanos := 0
	if rest[0] == '.' {
		digits := 0
		for digits+1 < len(rest) && rest[digits+1] >= '0' && rest[digits+1] <= '9' {
			digits++
		}
		if digits == 0 || digits > 9 {
			return bad("1 to 9 fractional digits")
		}
		nanos, _ = num(rest[1 : 1+digits])
		for i := digits; i < 9; i++ {
			nanos *= 10
		}
		rest = rest[1+digits:]
	}
	offset := 0
	switch {
	case len(rest) == 1 && rest[0] == 'Z':
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := num(rest[1:3])
		om, ok2 := num(rest[4:6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return bad("offset out of range")
		}
		offset = (oh*60 + om) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return bad("no Z or ±hh:mm offset")
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nanos, time.UTC)
	return t.Unix()*1e9 - int64(offset)*1e9 + int64(t.Nanosecond()), nil
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
