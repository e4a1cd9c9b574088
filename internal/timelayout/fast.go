package timelayout

import (
	"strings"
	"sync"
	"time"
)

// The fast path reads the numeric layouts nearly every log time is written
// in (2006-01-02T15:04:05.000Z07:00 and its Joda spellings) without
// time.Parse, which walks the layout string chunk by chunk on every call
// and is most of what the midnight transform costs. A layout made only of
// numeric fields, literal bytes, a fraction and a numeric zone gets a plan
// when it is translated; Parse follows the plan and falls back to
// time.Parse for anything the plan does not accept exactly, so the fast
// path accepts a subset of what time.Parse accepts and gives the same
// time for it (TestFastMatchesTimeParse and FuzzFastParse hold it to that).

type stepKind uint8

const (
	stepLiteral stepKind = iota
	stepYear             // 2006: four digits
	stepMonth            // 01 (two digits) or 1 (one or two)
	stepDay              // 02 or 2
	stepHour             // 15 (one or two digits, as time.Parse reads it)
	stepMinute           // 04 or 4
	stepSecond           // 05 or 5
	stepFrac             // .000 (exactly n digits) or .999 (1 to 9 digits, optional)
	stepZone             // Z07:00, Z0700, -07:00, -0700
)

type step struct {
	kind  stepKind
	lit   string // stepLiteral
	fixed bool   // two digits exactly (01, 02, 04, 05)
	// stepFrac: digits > 0 for .000 (exactly), 0 for .999 (1 to 9
	// digits, or no fraction at all).
	digits int
	// stepZone: z accepts Z for UTC, colon is ±hh:mm rather than ±hhmm.
	z, colon bool
}

type plan struct {
	steps   []step
	hasZone bool
	// fracAfterSec: the step after the seconds is a fraction.
	fracAfterSec bool
	// fixed reads the layout's usual form at known offsets; nil when a
	// step has no one width (see newFixed).
	fixed *fixedPlan
}

// fixedPlan is a plan read at known offsets: its steps up to a fraction
// or zone, each read with all its digits (a 1, 15 or 4 with two), then
// those last two. A time in that usual form (every log time nearly) is
// read without walking the steps; anything else (a one-digit hour, a
// separator out of place) goes on to the steps, then to time.Parse. A
// field of one or two digits read as two here is what the steps read: they
// take a second digit whenever there is one.
type fixedPlan struct {
	width int // of the fields before the fraction or zone
	lits  []fixedLit
	at    [stepSecond + 1]int // offsets of the fields, by kind
	frac  *step
	zone  *step
	// fracAfterSec as in plan: without it, a fraction after the seconds
	// is time.Parse's to read.
	fracAfterSec bool
}

type fixedLit struct {
	off int
	b   byte
}

// newFixed returns the fixed form of p, or nil when its fraction or zone
// is followed by anything but a zone.
func newFixed(p *plan) *fixedPlan {
	f := &fixedPlan{fracAfterSec: p.fracAfterSec}
	off := 0
	for i := range p.steps {
		st := &p.steps[i]
		if f.frac != nil || f.zone != nil {
			if st.kind != stepZone || f.zone != nil {
				return nil
			}
		}
		switch st.kind {
		case stepLiteral:
			for j := 0; j < len(st.lit); j++ {
				f.lits = append(f.lits, fixedLit{off + j, st.lit[j]})
			}
			off += len(st.lit)
		case stepYear, stepMonth, stepDay, stepHour, stepMinute, stepSecond:
			f.at[st.kind] = off
			off += 2
			if st.kind == stepYear {
				off += 2
			}
		case stepFrac:
			f.frac = st
		case stepZone:
			f.zone = st
		}
	}
	f.width = off
	return f
}

// layoutTokens are the Go layout elements a plan knows, longest first so
// that 2006 is not read as 2 and 006.
var layoutTokens = []struct {
	tok string
	st  step
}{
	{"Z07:00", step{kind: stepZone, z: true, colon: true}},
	{"-07:00", step{kind: stepZone, colon: true}},
	{"Z0700", step{kind: stepZone, z: true}},
	{"-0700", step{kind: stepZone}},
	{"2006", step{kind: stepYear}},
	{"01", step{kind: stepMonth, fixed: true}},
	{"02", step{kind: stepDay, fixed: true}},
	{"15", step{kind: stepHour}},
	{"04", step{kind: stepMinute, fixed: true}},
	{"05", step{kind: stepSecond, fixed: true}},
	{"1", step{kind: stepMonth}},
	{"2", step{kind: stepDay}},
	{"4", step{kind: stepMinute}},
	{"5", step{kind: stepSecond}},
}

// newPlan returns the plan of Go layout layout, or nil when the layout
// holds anything the fast path does not read (names, a 12-hour clock, a
// year of two digits, a zone abbreviation, a field without a year, or two
// fields of one kind).
func newPlan(layout string) *plan {
	p := &plan{}
	seen := map[stepKind]bool{}
	lit := []byte(nil)
	flush := func() {
		if len(lit) > 0 {
			p.steps = append(p.steps, step{kind: stepLiteral, lit: string(lit)})
			lit = nil
		}
	}
	for i := 0; i < len(layout); {
		// A fraction: . or , then 0s or 9s.
		if c := layout[i]; (c == '.' || c == ',') && i+1 < len(layout) && (layout[i+1] == '0' || layout[i+1] == '9') {
			j := i + 1
			for j < len(layout) && layout[j] == layout[i+1] {
				j++
			}
			if j < len(layout) && layout[j] >= '0' && layout[j] <= '9' {
				return nil // .0001 and the like: not a fraction
			}
			st := step{kind: stepFrac}
			if layout[i+1] == '0' {
				st.digits = j - i - 1
			}
			if seen[stepFrac] || !seen[stepSecond] || st.digits > 9 {
				return nil
			}
			flush()
			seen[stepFrac] = true
			p.steps = append(p.steps, st)
			i = j
			continue
		}
		matched := false
		for _, t := range layoutTokens {
			if len(layout)-i >= len(t.tok) && layout[i:i+len(t.tok)] == t.tok {
				if seen[t.st.kind] {
					return nil
				}
				flush()
				seen[t.st.kind] = true
				p.steps = append(p.steps, t.st)
				p.hasZone = p.hasZone || t.st.kind == stepZone
				i += len(t.tok)
				matched = true
				break
			}
		}
		if matched {
			continue
		}
		// Anything else that may start a layout element the plan does
		// not know (Jan, Mon, MST, PM, pm, _2, 002, -07, Z07, ...) has no
		// plan; other bytes are literal.
		c := layout[i]
		switch {
		case c >= '0' && c <= '9', c == '_', c == 'J', c == 'M', c == 'P', c == 'p':
			return nil
		case (c == '-' || c == 'Z') && strings.HasPrefix(layout[i+1:], "07"):
			return nil
		}
		lit = append(lit, c)
		i++
	}
	flush()
	for i := range p.steps {
		if p.steps[i].kind == stepSecond {
			p.fracAfterSec = i+1 < len(p.steps) && p.steps[i+1].kind == stepFrac
		}
	}
	for _, k := range []stepKind{stepYear, stepMonth, stepDay, stepHour, stepMinute, stepSecond} {
		if !seen[k] {
			return nil
		}
	}
	p.fixed = newFixed(p)
	return p
}

// parse reads v by the plan; ok is false when v is not in exactly the
// form the plan reads (the caller then asks time.Parse).
func (p *plan) parse(v string, loc *time.Location) (time.Time, bool) {
	if p.fixed != nil {
		if t, ok := p.fixed.parse(v, loc, p.hasZone); ok {
			return t, true
		}
	}
	var year, month, day, hour, minute, sec, nsec, offset int
	utc := false
	for i := range p.steps {
		st := &p.steps[i] // not a copy: this loop is the fast path's cost
		switch st.kind {
		case stepLiteral:
			if len(st.lit) == 1 { // most separators: a byte, not a string compare
				if len(v) == 0 || v[0] != st.lit[0] {
					return time.Time{}, false
				}
				v = v[1:]
				continue
			}
			if len(v) < len(st.lit) || v[:len(st.lit)] != st.lit {
				return time.Time{}, false
			}
			v = v[len(st.lit):]
		case stepYear:
			if len(v) < 4 {
				return time.Time{}, false
			}
			n := 0
			for i := range 4 {
				d := v[i] - '0'
				if d > 9 {
					return time.Time{}, false
				}
				n = n*10 + int(d)
			}
			year, v = n, v[4:]
		case stepMonth, stepDay, stepHour, stepMinute, stepSecond:
			n, rest, ok := num2(v, st.fixed)
			if !ok {
				return time.Time{}, false
			}
			v = rest
			switch st.kind {
			case stepMonth:
				month = n
			case stepDay:
				day = n
			case stepHour:
				hour = n
			case stepMinute:
				minute = n
			case stepSecond:
				sec = n
				// time.Parse reads a fraction the layout does not have;
				// leave that to it.
				if !p.fracAfterSec && startsFraction(v) {
					return time.Time{}, false
				}
			}
		case stepFrac:
			var ok bool
			if nsec, v, ok = readFrac(st, v); !ok {
				return time.Time{}, false
			}
		case stepZone:
			var ok bool
			if offset, utc, v, ok = readZone(st, v); !ok {
				return time.Time{}, false
			}
		}
	}
	if v != "" {
		return time.Time{}, false
	}
	return build(year, month, day, hour, minute, sec, nsec, offset, utc, p.hasZone, loc)
}

// parse reads v at the plan's offsets.
func (f *fixedPlan) parse(v string, loc *time.Location, hasZone bool) (time.Time, bool) {
	if len(v) < f.width {
		return time.Time{}, false
	}
	for _, l := range f.lits {
		if v[l.off] != l.b {
			return time.Time{}, false
		}
	}
	y1, y2, ok1 := digits2(v, f.at[stepYear])
	month, day, ok2 := digits2x2(v, f.at[stepMonth], f.at[stepDay])
	hour, minute, ok3 := digits2x2(v, f.at[stepHour], f.at[stepMinute])
	sec, ok4 := digitsAt(v, f.at[stepSecond])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return time.Time{}, false
	}
	if !f.fracAfterSec && startsFraction(v[f.at[stepSecond]+2:]) {
		return time.Time{}, false
	}
	v = v[f.width:]
	nsec := 0
	if f.frac != nil {
		var ok bool
		if nsec, v, ok = readFrac(f.frac, v); !ok {
			return time.Time{}, false
		}
	}
	offset, utc := 0, false
	if f.zone != nil {
		var ok bool
		if offset, utc, v, ok = readZone(f.zone, v); !ok {
			return time.Time{}, false
		}
	}
	if v != "" {
		return time.Time{}, false
	}
	return build(y1*100+y2, month, day, hour, minute, sec, nsec, offset, utc, hasZone, loc)
}

// startsFraction reports whether v starts with a fraction as time.Parse
// reads one after the seconds: a separator and a digit.
func startsFraction(v string) bool {
	return len(v) >= 2 && (v[0] == '.' || v[0] == ',') && v[1] >= '0' && v[1] <= '9'
}

// readFrac reads the fraction step st at the start of v, in nanoseconds.
func readFrac(st *step, v string) (nsec int, rest string, ok bool) {
	// Either separator, as time.Parse reads a fraction.
	if !startsFraction(v) {
		return 0, v, st.digits == 0 // .999: the fraction is optional
	}
	n := 1
	for n < len(v) && v[n] >= '0' && v[n] <= '9' {
		n++
	}
	digits := n - 1
	if digits > 9 || (st.digits > 0 && digits != st.digits) {
		return 0, v, false
	}
	for _, c := range v[1:n] {
		nsec = nsec*10 + int(c-'0')
	}
	return nsec * pow10[9-digits], v[n:], true
}

// digits2 reads the two two-digit numbers at v[i:i+4]; digits2x2 those at
// v[i:i+2] and v[j:j+2]; digitsAt the one at v[i:i+2].
func digits2(v string, i int) (int, int, bool) {
	return digits2x2(v, i, i+2)
}

func digitsAt(v string, i int) (int, bool) {
	a, b := v[i]-'0', v[i+1]-'0'
	return int(a)*10 + int(b), a <= 9 && b <= 9
}

func digits2x2(v string, i, j int) (int, int, bool) {
	a, b, c, d := v[i]-'0', v[i+1]-'0', v[j]-'0', v[j+1]-'0'
	return int(a)*10 + int(b), int(c)*10 + int(d), a <= 9 && b <= 9 && c <= 9 && d <= 9
}

// readZone reads the zone step st at the start of v: Z (when st allows
// it) or a numeric offset.
func readZone(st *step, v string) (offset int, utc bool, rest string, ok bool) {
	if st.z && len(v) >= 1 && v[0] == 'Z' {
		return 0, true, v[1:], true
	}
	want := 5
	if st.colon {
		want = 6
	}
	if len(v) < want || (v[0] != '+' && v[0] != '-') || (st.colon && v[3] != ':') {
		return 0, false, v, false
	}
	hh, _, ok1 := num2(v[1:3], true)
	mm, _, ok2 := num2(v[want-2:want], true)
	if !ok1 || !ok2 || hh > 23 || mm > 59 {
		return 0, false, v, false
	}
	offset = (hh*60 + mm) * 60
	if v[0] == '-' {
		offset = -offset
	}
	return offset, false, v[want:], true
}

// build checks the fields read and makes the time as time.Parse would.
func build(year, month, day, hour, minute, sec, nsec, offset int, utc, hasZone bool, loc *time.Location) (time.Time, bool) {
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	if !hasZone {
		return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc), true
	}
	// The fields are in range, so the instant is plain arithmetic (time.Date
	// normalizes, which is most of its cost).
	t := time.Unix(unixDays(year, month, day)*86400+int64(hour*3600+minute*60+sec-offset), int64(nsec))
	if utc {
		return t.UTC(), true
	}
	// As time.Parse does: the instant is the wall time less the offset;
	// it is in loc when loc has that offset then, else in a zone that
	// only records the offset.
	if _, o := t.In(loc).Zone(); o == offset {
		return t.In(loc), true
	}
	return t.In(fixedZone(offset)), true
}

// unixDays is the number of days from 1970-01-01 to the date (proleptic
// Gregorian, month 1 to 12): the days of whole 400-year eras, then of the
// years, months (counted from March, so that February is last) and days
// into the era. 400 years are added first so that no year is negative.
func unixDays(year, month, day int) int64 {
	y := int64(year) + 400
	if month <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := int64((month + 9) % 12)
	doy := (153*mp+2)/5 + int64(day) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468 - 146097
}

// num2 reads two digits (fixed), or one or two as time.Parse reads a
// field such as 15 or 4: a second digit is taken when there is one.
func num2(v string, fixed bool) (n int, rest string, ok bool) {
	if len(v) == 0 || v[0] < '0' || v[0] > '9' {
		return 0, v, false
	}
	if len(v) >= 2 && v[1] >= '0' && v[1] <= '9' {
		return int(v[0]-'0')*10 + int(v[1]-'0'), v[2:], true
	}
	if fixed {
		return 0, v, false
	}
	return int(v[0] - '0'), v[1:], true
}

var pow10 = [...]int{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000}

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

// fixedZones are the zones fixedZone made, by offset: there are at most a
// few thousand (the offsets a plan accepts), and each is made once.
var fixedZones sync.Map

// fixedZone returns a zone that records offset (seconds east of UTC) and
// has no name, as time.Parse makes for an offset no zone of loc has.
func fixedZone(offset int) *time.Location {
	if z, ok := fixedZones.Load(offset); ok {
		return z.(*time.Location)
	}
	z, _ := fixedZones.LoadOrStore(offset, time.FixedZone("", offset))
	return z.(*time.Location)
}
