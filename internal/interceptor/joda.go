package interceptor

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// jodaTime parses times written in a Joda-Time (or SimpleDateFormat)
// pattern, translated once into a Go layout. Flume's millis serializer uses
// Joda's DateTimeFormat.forPattern with the JVM's default time zone; here
// that is the process's local zone.
type jodaTime struct {
	pattern string
	layout  string
	hasYear bool
	loc     *time.Location
}

// jodaLetters lists the pattern letters sluice translates, for messages.
const jodaLetters = "y (year), M (month), d (day), H (hour 0-23), h (hour 1-12), a (AM/PM), m (minute), s (second), S (fraction of second), E (weekday), Z (offset)"

// newJodaTime reads the Joda pattern at key (required) and records a problem
// when it is missing or cannot be translated.
func newJodaTime(p *config.Props, key string) *jodaTime {
	pattern := requiredRaw(p, key, "a Joda time pattern such as yyyy-MM-dd HH:mm:ss")
	if pattern == "" {
		return &jodaTime{layout: time.RFC3339, hasYear: true, loc: time.Local}
	}
	j, err := translateJoda(pattern)
	if err != nil {
		p.Errorf(key, "%q: %v", pattern, err)
		return &jodaTime{layout: time.RFC3339, hasYear: true, loc: time.Local}
	}
	return j
}

// parse returns the epoch milliseconds of v. Fields the pattern lacks take
// Joda's defaults: 1970-01-01 00:00:00.000.
func (j *jodaTime) parse(v string) (int64, error) {
	t, err := time.ParseInLocation(j.layout, v, j.loc)
	if err != nil {
		return 0, fmt.Errorf("parse %q with pattern %q: %w", v, j.pattern, err)
	}
	if !j.hasYear {
		t = t.AddDate(1970, 0, 0)
	}
	return t.UnixMilli(), nil
}

// jodaFields records which fields a pattern holds, to check a translation.
type jodaFields struct {
	year, month, day, hour24, hour12, ampm, minute, second, offset bool
	frac                                                           int // digits of fraction, 0 if none
}

// translateJoda turns a Joda pattern into a Go layout. Go layouts have no
// quoting, so literal text that Go would read as a layout element (digits,
// "Jan", "Mon", "MST", "PM") cannot be carried over and is an error, as is
// every letter sluice does not translate. The result is checked by
// formatting and parsing back a reference time.
func translateJoda(pattern string) (*jodaTime, error) {
	var b strings.Builder
	var f jodaFields
	literal := func(s string) error {
		if bad := goLayoutElement(s); bad != "" {
			return fmt.Errorf("the literal text %q cannot be expressed in a Go time layout because it contains %q", s, bad)
		}
		b.WriteString(s)
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
		var el string
		switch {
		case c == 'y' && n == 2:
			el, f.year = "06", true
		case c == 'y':
			el, f.year = "2006", true
		case c == 'M' && n <= 2:
			el, f.month = "1", true // "1" also reads "01"
		case c == 'M' && n == 3:
			el, f.month = "Jan", true
		case c == 'M':
			el, f.month = "January", true
		case c == 'd' && n <= 2:
			el, f.day = "2", true
		case c == 'H' && n <= 2:
			el, f.hour24 = "15", true
		case c == 'h' && n <= 2:
			el, f.hour12 = "3", true
		case c == 'a' && n == 1:
			el, f.ampm = "PM", true
		case c == 'm' && n <= 2:
			el, f.minute = "4", true
		case c == 's' && n <= 2:
			el, f.second = "5", true
		case c == 'S':
			s := b.String()
			if !strings.HasSuffix(s, ".") && !strings.HasSuffix(s, ",") {
				return nil, fmt.Errorf("the fraction of a second %s must follow a '.' or ',' to be read by Go", tok)
			}
			if n > 9 {
				return nil, fmt.Errorf("%s has more than 9 digits of fraction", tok)
			}
			el, f.frac = strings.Repeat("9", n), n // ".999" reads 1 to n digits
		case c == 'E' && n <= 3:
			el = "Mon"
		case c == 'E':
			el = "Monday"
		case c == 'Z' && n == 1:
			el, f.offset = "Z0700", true
		case c == 'Z' && n == 2:
			el, f.offset = "Z07:00", true
		case c == 'Z':
			return nil, fmt.Errorf("%s (a time zone id) is not supported; use Z (-0800) or ZZ (-08:00)", tok)
		case c == 'z':
			return nil, fmt.Errorf("%s (a time zone name) cannot be parsed, by Joda either; use Z (-0800) or ZZ (-08:00)", tok)
		default:
			return nil, fmt.Errorf("the pattern letters %s are not supported; sluice translates %s", tok, jodaLetters)
		}
		b.WriteString(el)
	}
	j := &jodaTime{pattern: pattern, layout: b.String(), hasYear: f.year, loc: time.Local}
	if err := j.check(f); err != nil {
		return nil, err
	}
	return j, nil
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

// check formats a reference time with the layout and parses it back, and
// fails when a field of the pattern does not survive: that means adjacent
// elements ran together in a way Go reads differently from Joda.
func (j *jodaTime) check(f jodaFields) error {
	ref := time.Date(2009, time.November, 23, 19, 47, 38, 123456789, time.FixedZone("", 5*3600+30*60))
	got, err := time.Parse(j.layout, ref.Format(j.layout))
	if err != nil {
		return fmt.Errorf("cannot be translated to a Go time layout (%q): %v", j.layout, err)
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
		(!(f.hour24 || f.hour12) || got.Hour() == hour) &&
		(!f.minute || got.Minute() == ref.Minute()) &&
		(!f.second || got.Second() == ref.Second()) &&
		(!f.offset || gotOff == refOff) &&
		(f.frac == 0 || got.Nanosecond() == truncFrac(ref.Nanosecond(), f.frac))
	if !ok {
		return fmt.Errorf("cannot be translated to a Go time layout: adjacent fields run together in %q; separate them", j.layout)
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
