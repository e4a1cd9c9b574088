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
	return p
}

// parse reads v by the plan; ok is false when v is not in exactly the
// form the plan reads (the caller then asks time.Parse).
func (p *plan) parse(v string, loc *time.Location) (time.Time, bool) {
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
				if len(v) >= 2 && (v[0] == '.' || v[0] == ',') && v[1] >= '0' && v[1] <= '9' && !p.fracAfterSec {
					return time.Time{}, false
				}
			}
		case stepFrac:
			// Either separator, as time.Parse reads a fraction.
			if len(v) < 2 || (v[0] != '.' && v[0] != ',') || v[1] < '0' || v[1] > '9' {
				if st.digits == 0 {
					continue // .999: the fraction is optional
				}
				return time.Time{}, false
			}
			n := 1
			for n < len(v) && v[n] >= '0' && v[n] <= '9' {
				n++
			}
			digits := n - 1
			if digits > 9 || (st.digits > 0 && digits != st.digits) {
				return time.Time{}, false
			}
			ns := 0
			for _, c := range v[1:n] {
				ns = ns*10 + int(c-'0')
			}
			nsec, v = ns*pow10[9-digits], v[n:]
		case stepZone:
			if st.z && len(v) >= 1 && v[0] == 'Z' {
				utc, v = true, v[1:]
				continue
			}
			want := 5
			if st.colon {
				want = 6
			}
			if len(v) < want || (v[0] != '+' && v[0] != '-') || (st.colon && v[3] != ':') {
				return time.Time{}, false
			}
			hh, _, ok1 := num2(v[1:3], true)
			mm, _, ok2 := num2(v[want-2:want], true)
			if !ok1 || !ok2 || hh > 23 || mm > 59 {
				return time.Time{}, false
			}
			offset = (hh*60 + mm) * 60
			if v[0] == '-' {
				offset = -offset
			}
			v = v[want:]
		}
	}
	if v != "" || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	switch {
	case utc:
		return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
	case !p.hasZone:
		return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc), true
	}
	// As time.Parse does: the instant is the wall time less the offset;
	// it is in loc when loc has that offset then, else in a zone that
	// only records the offset.
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC).Add(-time.Duration(offset) * time.Second)
	if _, o := t.In(loc).Zone(); o == offset {
		return t.In(loc), true
	}
	return t.In(fixedZone(offset)), true
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
