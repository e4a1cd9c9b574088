// Package timelayout reads and writes times in the layouts found in Flume
// configurations and in sluice's expressions: Go reference layouts, the
// Joda-Time and SimpleDateFormat patterns of Java (yyyy-MM-dd HH:mm:ss), the
// names of Go's predefined layouts (RFC3339, DateTime, ...) and the epoch
// numbers unix, unixMs, unixUs and unixNs.
//
// A layout is translated once, when a configuration is read, so that a
// pattern that cannot be honoured is a configuration error rather than a
// parse failure on every event.
package timelayout

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Layout is a translated time layout. It is immutable and safe for
// concurrent use.
type Layout struct {
	spec   string // as written
	parse  string // Go layout for parsing; "" for epoch layouts
	format string // Go layout for formatting
	// hasYear is false for Joda patterns without a year: Joda's default
	// year is 1970, Go's is 0.
	hasYear bool
	// unit is the epoch unit of unix, unixMs, unixUs and unixNs; 0
	// otherwise.
	unit time.Duration
	// fast reads the numeric layouts without time.Parse (fast.go); nil
	// for the others.
	fast *plan
}

// planned gives l its fast path when its layout has one.
func planned(l *Layout) *Layout {
	if l.unit == 0 && l.hasYear {
		l.fast = newPlan(l.parse)
	}
	return l
}

// named are the layouts known by name, matched without regard to case.
var named = map[string]*Layout{}

func init() {
	add := func(name, parse, format string) {
		named[strings.ToLower(name)] = planned(&Layout{spec: name, parse: parse, format: format, hasYear: true})
	}
	// RFC3339 reads fractions of a second too (Go's time.Parse accepts
	// them with the RFC3339 layout), and writes none.
	add("RFC3339", time.RFC3339, time.RFC3339)
	add("RFC3339Nano", time.RFC3339Nano, time.RFC3339Nano)
	add("RFC3339Milli", time.RFC3339, "2006-01-02T15:04:05.000Z07:00")
	// ISO8601 is what Java users call RFC 3339's profile of it.
	add("ISO8601", time.RFC3339, "2006-01-02T15:04:05.000Z07:00")
	add("RFC1123", time.RFC1123, time.RFC1123)
	add("RFC1123Z", time.RFC1123Z, time.RFC1123Z)
	add("RFC822", time.RFC822, time.RFC822)
	add("RFC822Z", time.RFC822Z, time.RFC822Z)
	add("RFC850", time.RFC850, time.RFC850)
	add("ANSIC", time.ANSIC, time.ANSIC)
	add("UnixDate", time.UnixDate, time.UnixDate)
	add("RubyDate", time.RubyDate, time.RubyDate)
	add("Kitchen", time.Kitchen, time.Kitchen)
	add("Stamp", time.Stamp, time.Stamp)
	add("StampMilli", time.StampMilli, time.StampMilli)
	add("StampMicro", time.StampMicro, time.StampMicro)
	add("StampNano", time.StampNano, time.StampNano)
	add("DateTime", time.DateTime, time.DateTime)
	add("DateOnly", time.DateOnly, time.DateOnly)
	add("TimeOnly", time.TimeOnly, time.TimeOnly)
	for name, unit := range map[string]time.Duration{"unix": time.Second, "unixMs": time.Millisecond, "unixUs": time.Microsecond, "unixNs": time.Nanosecond} {
		named[strings.ToLower(name)] = &Layout{spec: name, unit: unit, hasYear: true}
	}
}

// Names lists the named layouts, for messages.
const Names = "RFC3339, RFC3339Nano, RFC3339Milli, ISO8601, RFC1123, RFC1123Z, RFC822, RFC822Z, RFC850, ANSIC, UnixDate, RubyDate, Kitchen, " +
	"Stamp, StampMilli, StampMicro, StampNano, DateTime, DateOnly, TimeOnly, unix, unixMs, unixUs, unixNs"

// New translates spec: a layout name (see Names), else a Go reference
// layout when spec contains a digit (2006-01-02 15:04:05), else a Joda /
// SimpleDateFormat pattern (yyyy-MM-dd HH:mm:ss; Java patterns carry
// digits only inside quotes).
func New(spec string) (*Layout, error) {
	if l, ok := named[strings.ToLower(spec)]; ok {
		return l, nil
	}
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("the time layout is empty; use a Joda pattern such as yyyy-MM-dd HH:mm:ss, a Go layout or one of %s", Names)
	}
	if strings.ContainsAny(spec, "0123456789") && !strings.Contains(spec, "'") {
		return goLayout(spec)
	}
	return Joda(spec)
}

// String returns the layout as written.
func (l *Layout) String() string { return l.spec }

// IsEpoch reports whether l is one of the epoch layouts (unix, unixMs, ...).
func (l *Layout) IsEpoch() bool { return l.unit != 0 }

// Parse reads v in the layout. Fields the layout lacks take Joda's
// defaults (1970-01-01 00:00:00.000); a layout without a zone reads the
// time in loc.
func (l *Layout) Parse(v string, loc *time.Location) (time.Time, error) {
	if l.unit != 0 {
		return parseEpoch(v, l.unit)
	}
	if l.fast != nil {
		if t, ok := l.fast.parse(v, loc); ok {
			return t, nil
		}
	}
	t, err := time.ParseInLocation(l.parse, v, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse %q with layout %q: %w", v, l.spec, err)
	}
	if !l.hasYear {
		t = t.AddDate(1970, 0, 0)
	}
	return t, nil
}

// AppendFormat appends t written in the layout to dst. Epoch layouts write
// whole numbers of their unit.
func (l *Layout) AppendFormat(dst []byte, t time.Time) []byte {
	switch l.unit {
	case 0:
		return t.AppendFormat(dst, l.format)
	case time.Second:
		return strconv.AppendInt(dst, t.Unix(), 10)
	case time.Millisecond:
		return strconv.AppendInt(dst, t.UnixMilli(), 10)
	case time.Microsecond:
		return strconv.AppendInt(dst, t.UnixMicro(), 10)
	}
	return strconv.AppendInt(dst, t.UnixNano(), 10)
}

// Format returns t written in the layout.
func (l *Layout) Format(t time.Time) string {
	var buf [64]byte
	return string(l.AppendFormat(buf[:0], t))
}

// parseEpoch reads a decimal number of unit since the epoch; a fraction is
// kept to the nanosecond.
func parseEpoch(v string, unit time.Duration) (time.Time, error) {
	s := strings.TrimSpace(v)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		switch unit {
		case time.Second:
			return time.Unix(n, 0), nil
		case time.Millisecond:
			return time.UnixMilli(n), nil
		case time.Microsecond:
			return time.UnixMicro(n), nil
		}
		return time.Unix(0, n), nil
	}
	if whole, frac, ok := strings.Cut(s, "."); ok && len(frac) > 0 && len(frac) <= 9 && strings.Trim(frac, "0123456789") == "" {
		// A decimal fraction, read exactly (a float64 would not hold
		// the nanoseconds of a time in seconds).
		if n, err := strconv.ParseInt(whole, 10, 64); err == nil {
			f, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
			if strings.HasPrefix(whole, "-") {
				f = -f
			}
			ns := f * int64(unit) / int64(time.Second)
			if n > math.MaxInt64/int64(unit) || n < math.MinInt64/int64(unit) {
				return time.Time{}, fmt.Errorf("parse %q as a number of %s since the epoch: out of range", v, unitName(unit))
			}
			return time.Unix(0, n*int64(unit)+ns), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return time.Time{}, fmt.Errorf("parse %q as a number of %s since the epoch: not a number", v, unitName(unit))
	}
	ns := f * float64(unit)
	if ns > math.MaxInt64 || ns < math.MinInt64 {
		return time.Time{}, fmt.Errorf("parse %q as a number of %s since the epoch: out of range", v, unitName(unit))
	}
	return time.Unix(0, int64(ns)), nil
}

func unitName(u time.Duration) string {
	switch u {
	case time.Second:
		return "seconds"
	case time.Millisecond:
		return "milliseconds"
	case time.Microsecond:
		return "microseconds"
	}
	return "nanoseconds"
}

// ref is the time every translation is checked with.
var ref = time.Date(2009, time.November, 23, 19, 47, 38, 123456789, time.FixedZone("", 5*3600+30*60))

// goLayout checks a Go reference layout: it must hold at least one
// element, and a time written in it must read back.
func goLayout(spec string) (*Layout, error) {
	out := ref.Format(spec)
	if out == spec {
		return nil, fmt.Errorf("%q holds no element of Go's reference time (2006-01-02T15:04:05Z07:00); use a Joda pattern such as yyyy-MM-dd, a Go layout or one of %s", spec, Names)
	}
	if _, err := time.Parse(spec, out); err != nil {
		return nil, fmt.Errorf("%q is not a usable Go time layout: %v", spec, err)
	}
	return planned(&Layout{spec: spec, parse: spec, format: spec, hasYear: true}), nil
}
