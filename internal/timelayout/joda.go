package timelayout

import (
	"fmt"
	"strings"
	"time"
)

// JodaLetters lists the pattern letters sluice translates, for messages.
const JodaLetters = "y (year), M (month), d (day), H (hour 0-23), h (hour 1-12), a (AM/PM), m (minute), s (second), " +
	"S (fraction of second), E (weekday), Z or X (offset)"

// jodaFields records which fields a pattern holds, to check a translation.
type jodaFields struct {
	year, month, day, hour24, hour12, ampm, minute, second, offset bool
	frac                                                           int // digits of fraction, 0 if none
}

// Joda translates a Joda-Time (or SimpleDateFormat) pattern into Go
// layouts, one to parse and one to format. Go layouts have no quoting, so
// literal text that Go would read as a layout element (digits, "Jan",
// "Mon", "MST", "PM") cannot be carried over and is an error, as is every
// letter sluice does not translate. The result is checked by formatting
// and parsing back a reference time.
//
// Differences that remain: Go always writes hours of H with two digits,
// and reads an offset written as Z (UTC) where the pattern has Z or X.
func Joda(pattern string) (*Layout, error) {
	var parse, format strings.Builder
	var f jodaFields
	literal := func(s string) error {
		if bad := goLayoutElement(s); bad != "" {
			return fmt.Errorf("the literal text %q cannot be expressed in a Go time layout because it contains %q", s, bad)
		}
		parse.WriteString(s)
		format.WriteString(s)
		return nil
	}
	for i := 0; i < len(pattern); {
		c := pattern[i]
		switch {
		case c == '\'':
			// 'text' is literal; '' is one quote, inside or outside quotes.
			j := i + 1
			var lit strings.Builder
			if j < len(pattern) && pattern[j] == '\'' {
				lit.WriteByte('\'')
				i = j + 1
			} else {
				for {
					if j >= len(pattern) {
						return nil, fmt.Errorf("the quote at position %d is not closed", i+1)
					}
					if pattern[j] == '\'' {
						if j+1 < len(pattern) && pattern[j+1] == '\'' {
							lit.WriteByte('\'')
							j += 2
							continue
						}
						break
					}
					lit.WriteByte(pattern[j])
					j++
				}
				i = j + 1
			}
			if err := literal(lit.String()); err != nil {
				return nil, err
			}
			continue
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		default:
			if err := literal(string(c)); err != nil {
				return nil, err
			}
			i++
			continue
		}
		n := 1
		for i+n < len(pattern) && pattern[i+n] == c {
			n++
		}
		tok := pattern[i : i+n]
		i += n
		var p, w string // parse and format elements
		pad := func(short, long string) (string, string) {
			if n == 1 {
				return short, short
			}
			return short, long // a short element also reads two digits
		}
		switch {
		case c == 'y' && n == 2:
			p, w, f.year = "06", "06", true
		case c == 'y':
			p, w, f.year = "2006", "2006", true
		case c == 'M' && n <= 2:
			p, w = pad("1", "01")
			f.month = true
		case c == 'M' && n == 3:
			p, w, f.month = "Jan", "Jan", true
		case c == 'M':
			p, w, f.month = "January", "January", true
		case c == 'd' && n <= 2:
			p, w = pad("2", "02")
			f.day = true
		case c == 'H' && n <= 2:
			p, w, f.hour24 = "15", "15", true
		case c == 'h' && n <= 2:
			p, w = pad("3", "03")
			f.hour12 = true
		case c == 'a' && n == 1:
			p, w, f.ampm = "PM", "PM", true
		case c == 'm' && n <= 2:
			p, w = pad("4", "04")
			f.minute = true
		case c == 's' && n <= 2:
			p, w = pad("5", "05")
			f.second = true
		case c == 'S':
			s := parse.String()
			if !strings.HasSuffix(s, ".") && !strings.HasSuffix(s, ",") {
				return nil, fmt.Errorf("the fraction of a second %s must follow a '.' or ',' to be read by Go", tok)
			}
			if n > 9 {
				return nil, fmt.Errorf("%s has more than 9 digits of fraction", tok)
			}
			// ".999" reads 1 to n digits; ".000" writes exactly n.
			p, w, f.frac = strings.Repeat("9", n), strings.Repeat("0", n), n
		case c == 'E' && n <= 3:
			p, w = "Mon", "Mon"
		case c == 'E':
			p, w = "Monday", "Monday"
		case c == 'Z' && n == 1:
			p, w, f.offset = "Z0700", "-0700", true
		case c == 'Z' && n == 2:
			p, w, f.offset = "Z07:00", "-07:00", true
		case c == 'X' && n == 1:
			p, w = "Z07", "Z07" // hours only: not checked against the +05:30 reference
		case c == 'X' && n == 2:
			p, w, f.offset = "Z0700", "Z0700", true
		case c == 'X' && n == 3:
			p, w, f.offset = "Z07:00", "Z07:00", true
		case c == 'Z':
			return nil, fmt.Errorf("%s (a time zone id) is not supported; use Z (-0800) or ZZ (-08:00)", tok)
		case c == 'z':
			return nil, fmt.Errorf("%s (a time zone name) cannot be parsed, by Joda either; use Z (-0800) or ZZ (-08:00)", tok)
		default:
			return nil, fmt.Errorf("the pattern letters %s are not supported; sluice translates %s", tok, JodaLetters)
		}
		parse.WriteString(p)
		format.WriteString(w)
	}
	l := planned(&Layout{spec: pattern, parse: parse.String(), format: format.String(), hasYear: f.year})
	if err := l.check(f); err != nil {
		return nil, err
	}
	return l, nil
}

// goLayoutElement returns the part of literal text that a Go layout would
// read as an element, or "".
func goLayoutElement(s string) string {
	if i := strings.IndexAny(s, "0123456789"); i >= 0 {
		return s[i : i+1]
	}
	for _, el := range []string{"Jan", "Mon", "MST", "PM", "pm"} {
		if strings.Contains(s, el) {
			return el
		}
	}
	return ""
}

// check formats reference times with the format layout and parses them
// back with the parse layout, and fails when a field of the pattern does
// not survive: that means adjacent elements ran together in a way Go reads
// differently from Joda. One reference has two-digit fields, the other
// one-digit ones (a run like "dy" reads "232009" right and "52024" wrong).
func (l *Layout) check(f jodaFields) error {
	for _, r := range []time.Time{ref, refShort} {
		if err := l.checkWith(f, r); err != nil {
			return err
		}
	}
	return nil
}

// refShort is a reference whose fields have one digit where they can.
var refShort = time.Date(2024, time.March, 5, 1, 2, 3, 4000000, time.FixedZone("", -7*3600))

func (l *Layout) checkWith(f jodaFields, ref time.Time) error {
	got, err := time.Parse(l.parse, ref.Format(l.format))
	if err != nil {
		return fmt.Errorf("cannot be translated to a Go time layout: adjacent fields run together in %q (%v); separate them", l.parse, err)
	}
	hour := ref.Hour()
	if f.hour12 && !f.ampm {
		hour %= 12
	}
	_, refOff := ref.Zone()
	_, gotOff := got.Zone()
	ok := (!f.year || got.Year() == ref.Year()) &&
		(!f.month || got.Month() == ref.Month()) &&
		(!f.day || got.Day() == ref.Day()) &&
		((!f.hour24 && !f.hour12) || got.Hour() == hour) &&
		(!f.minute || got.Minute() == ref.Minute()) &&
		(!f.second || got.Second() == ref.Second()) &&
		(!f.offset || gotOff == refOff) &&
		(f.frac == 0 || got.Nanosecond() == truncFrac(ref.Nanosecond(), f.frac))
	if !ok {
		return fmt.Errorf("cannot be translated to a Go time layout: adjacent fields run together in %q; separate them", l.parse)
	}
	return nil
}

// truncFrac keeps the first digits digits of a nanosecond count.
func truncFrac(ns, digits int) int {
	p := 1
	for range 9 - digits {
		p *= 10
	}
	return ns / p * p
}
