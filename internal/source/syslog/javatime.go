package syslogsource

import (
	"strings"
	"time"
)

// This file reproduces how Flume turns syslog timestamps into the
// "timestamp" header (milliseconds since the epoch): syslogtcp and syslogudp
// through java.text.SimpleDateFormat (lenient, in the JVM's default time
// zone), multiport_syslogtcp through Joda-Time (strict, UTC).

var monthNames = [12]string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}

// monthIndex returns 1..12 for an English month abbreviation in any case, or 0.
func monthIndex(s string) int {
	for i, m := range monthNames {
		if strings.EqualFold(s, m) {
			return i + 1
		}
	}
	return 0
}

// sdfNumber reads a SimpleDateFormat numeric field at s[i:]: leading spaces
// and tabs are skipped, then every ASCII digit is taken. It returns the value
// and the index after it, or ok=false when there is no digit.
func sdfNumber(s string, i int) (n, j int, ok bool) {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	j = i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		if n < 1e9 {
			n = n*10 + int(s[j]-'0')
		}
		j++
	}
	return n, j, j > i
}

// flume5424Time parses the RFC 5424 timestamp matched by Flume's regex as
// SyslogUtils does. Its quirks are Flume's: a fraction of a second is read
// as a number of milliseconds (".5" is 5 ms) and, when there is one, the
// zone offset is ignored and the time taken in loc; an offset without a
// fraction is honoured; "Z" is UTC.
func flume5424Time(stamp string, loc *time.Location) (int64, bool) {
	// stamp is yyyy-MM-ddTHH:mm:ss[.f{1,6}][(+|-)hh:mm|Z], ASCII.
	if len(stamp) < 19 {
		return 0, false
	}
	y, _, _ := sdfNumber(stamp[:4], 0)
	mo, _, _ := sdfNumber(stamp[5:7], 0)
	d, _, _ := sdfNumber(stamp[8:10], 0)
	h, _, _ := sdfNumber(stamp[11:13], 0)
	mi, _, _ := sdfNumber(stamp[14:16], 0)
	sec, _, _ := sdfNumber(stamp[17:19], 0)
	rest := stamp[19:]
	if strings.HasPrefix(rest, ".") {
		// "yyyy-MM-dd'T'HH:mm:ss.S" after Flume cut the fraction to at most
		// three digits; whatever follows is ignored.
		j := 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		digits := rest[1:j]
		if len(digits) > 3 {
			digits = digits[:3]
		}
		ms, _, _ := sdfNumber(digits, 0)
		t := time.Date(y, time.Month(mo), d, h, mi, sec, 0, loc)
		return t.UnixMilli() + int64(ms), true
	}
	if off, ok := rfc822Offset(rest); ok {
		t := time.Date(y, time.Month(mo), d, h, mi, sec, 0, time.FixedZone("", off))
		return t.UnixMilli(), true
	}
	// "yyyy-MM-dd'T'HH:mm:ss": local time, the rest ignored.
	return time.Date(y, time.Month(mo), d, h, mi, sec, 0, loc).UnixMilli(), true
}

// rfc822Offset reads the zone of Flume's third format: "Z" (which Flume
// rewrote to +0000) or ±hh:mm (rewritten to ±hhmm), hours at most 23 and
// minutes at most 59 as SimpleDateFormat requires. It returns seconds east.
func rfc822Offset(z string) (int, bool) {
	if z == "Z" {
		return 0, true
	}
	if len(z) != 6 || (z[0] != '+' && z[0] != '-') || z[3] != ':' {
		return 0, false
	}
	h := int(z[1]-'0')*10 + int(z[2]-'0')
	m := int(z[4]-'0')*10 + int(z[5]-'0')
	if h > 23 || m > 59 {
		return 0, false
	}
	off := (h*60 + m) * 60
	if z[0] == '-' {
		off = -off
	}
	return off, true
}

// flume3164Time parses the RFC 3164 timestamp matched by Flume's regex
// ("Mmm dd HH:mm:ss", separators any of Java's \s) as SyslogUtils does:
// two spaces become one, the current UTC year is put in front, the result is
// read with "yyyyMMM d HH:mm:ss" in loc, and the year is then moved so the
// time falls between eleven months before and one month after now.
func flume3164Time(stamp string, loc *time.Location, now time.Time) (int64, bool) {
	s := strings.ReplaceAll(stamp, "  ", " ")
	mo := monthIndex(s[:3])
	if mo == 0 || len(s) < 4 || s[3] != ' ' {
		return 0, false
	}
	d, i, ok := sdfNumber(s, 4)
	if !ok || i >= len(s) || s[i] != ' ' {
		return 0, false
	}
	h, i, ok := sdfNumber(s, i+1)
	if !ok || i >= len(s) || s[i] != ':' {
		return 0, false
	}
	mi, i, ok := sdfNumber(s, i+1)
	if !ok || i >= len(s) || s[i] != ':' {
		return 0, false
	}
	sec, _, ok := sdfNumber(s, i+1)
	if !ok {
		return 0, false
	}
	t := time.Date(now.UTC().Year(), time.Month(mo), d, h, mi, sec, 0, loc)
	return adjustYear(t, now).UnixMilli(), true
}

// adjustYear moves t a year back when it is more than a month ahead of now,
// or a year forward when it is more than eleven months behind, with
// java.util.Calendar's month arithmetic (the day clamped to the month's end).
func adjustYear(t, now time.Time) time.Time {
	switch {
	case t.After(now) && addMonths(t, -1).After(now):
		return addMonths(t, -12)
	case t.Before(now) && addMonths(t, 11).Before(now):
		return addMonths(t, 12)
	}
	return t
}

// addMonths adds n months to t keeping the wall clock, clamping the day to
// the last day of the target month as Calendar.add(MONTH, n) does.
func addMonths(t time.Time, n int) time.Time {
	y, m, d := t.Date()
	first := time.Date(y, m+time.Month(n), 1, 0, 0, 0, 0, time.UTC)
	last := first.AddDate(0, 1, -1).Day()
	return time.Date(first.Year(), first.Month(), min(d, last), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
}

// jodaField reads a Joda-Time numeric field: one to max ASCII digits.
func jodaField(s string, i, max int) (n, j int, ok bool) {
	j = i
	for j < len(s) && j-i < max && s[j] >= '0' && s[j] <= '9' {
		n = n*10 + int(s[j]-'0')
		j++
	}
	return n, j, j > i
}

// jodaLiteral matches one literal character as Joda does (ignoring case).
func jodaLiteral(s string, i int, c byte) bool {
	return i < len(s) && (s[i] == c || (c >= 'A' && c <= 'Z' && s[i] == c+'a'-'A'))
}

// validDate reports whether the fields name a real instant, as Joda's strict
// field checks require.
func validDate(y, mo, d, h, mi, s int) bool {
	if mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59 {
		return false
	}
	return d <= time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// jodaPrefix5424 parses the first 19 characters of an RFC 5424 timestamp
// with Joda's "yyyy-MM-dd'T'HH:mm:ss" in UTC, as multiport_syslogtcp does.
func jodaPrefix5424(p string) (int64, bool) {
	i := 0
	neg := false
	if i < len(p) && (p[i] == '-' || p[i] == '+') {
		neg = p[i] == '-'
		i++
	}
	y, i, ok := jodaField(p, i, 9)
	if !ok {
		return 0, false
	}
	if neg {
		y = -y
	}
	var f [5]int
	for k, sep := range []byte{'-', '-', 'T', ':', ':'} {
		if !jodaLiteral(p, i, sep) {
			return 0, false
		}
		if f[k], i, ok = jodaField(p, i+1, 2); !ok {
			return 0, false
		}
	}
	if i != len(p) || !validDate(y, f[0], f[1], f[2], f[3], f[4]) {
		return 0, false
	}
	return time.Date(y, time.Month(f[0]), f[1], f[2], f[3], f[4], 0, time.UTC).UnixMilli(), true
}

// joda3164 parses an RFC 3164 timestamp as multiport_syslogtcp does: the
// first two spaces become one, then Joda's strict "MMM d HH:mm:ss" in UTC
// must take the whole string. Flume's multiport source then sets the year
// with a rule that yields 1999 or 2001 for most dates (Joda's default year
// is 2000); sluice applies the window its comment describes and SyslogUtils
// implements: from eleven months before now to one month after.
func joda3164(ts string, now time.Time) (int64, bool) {
	s := strings.Replace(ts, "  ", " ", 1)
	if len(s) < 4 {
		return 0, false
	}
	mo := monthIndex(s[:3])
	if mo == 0 || s[3] != ' ' {
		return 0, false
	}
	d, i, ok := jodaField(s, 4, 2)
	if !ok || !jodaLiteral(s, i, ' ') {
		return 0, false
	}
	h, i, ok := jodaField(s, i+1, 2)
	if !ok || !jodaLiteral(s, i, ':') {
		return 0, false
	}
	mi, i, ok := jodaField(s, i+1, 2)
	if !ok || !jodaLiteral(s, i, ':') {
		return 0, false
	}
	sec, i, ok := jodaField(s, i+1, 2)
	if !ok || i != len(s) || !validDate(2000, mo, d, h, mi, sec) {
		return 0, false
	}
	year := now.UTC().Year()
	if mo == 2 && d == 29 && !validDate(year, 2, 29, 0, 0, 0) {
		d = 28 // Joda's withYear
	}
	t := time.Date(year, time.Month(mo), d, h, mi, sec, 0, time.UTC)
	return adjustYear(t, now).UnixMilli(), true
}
