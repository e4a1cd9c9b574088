package containerlog

import "fmt"

// ParseTime parses an RFC 3339 time as the runtimes write it
// (2006-01-02T15:04:05.999999999Z07:00: up to nine fractional digits, Z or
// an offset of hours and minutes) and returns it in Unix nanoseconds. It
// takes a byte slice and does not allocate, as it runs for every record.
func ParseTime(b []byte) (int64, error) {
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

// daysBefore is how many days a common year has before each month.
var daysBefore = [12]int{0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334}

// unixDays returns the days from 1970-01-01 to the date, a valid one of a
// year from 1 on. It is what time.Date computes, without its normalizing
// of out-of-range fields and its time zones: ParseTime runs for every
// record and has checked the fields already.
func unixDays(year, month, day int) int64 {
	// leaps counts the leap years before y, from year 1 on.
	leaps := func(y int) int {
		y--
		return y/4 - y/100 + y/400
	}
	d := 365*(year-1970) + leaps(year) - leaps(1970) + daysBefore[month-1] + day - 1
	if month > 2 && isLeap(year) {
		d++
	}
	return int64(d)
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
