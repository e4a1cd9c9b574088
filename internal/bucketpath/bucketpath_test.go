package bucketpath

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

func ms(loc *time.Location, y int, mo time.Month, d, h, mi, s, milli int) string {
	return strconv.FormatInt(time.Date(y, mo, d, h, mi, s, milli*1e6, loc).UnixMilli(), 10)
}

// TestExpand checks escapes against the examples of Flume's user guide and
// the cases of its TestBucketPath, with the expected text written out.
func TestExpand(t *testing.T) {
	utc := time.UTC
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	// 2012-06-12 11:54:34.000 UTC, the user guide's rounding example.
	guide := ms(utc, 2012, time.June, 12, 11, 54, 34, 0)
	// 2012-06-23 13:46:33.234, TestBucketPath's calendar.
	tbp := ms(utc, 2012, time.June, 23, 13, 46, 33, 234)
	// 2014-06-03 01:05:09 for the unpadded escapes.
	early := ms(utc, 2014, time.June, 3, 1, 5, 9, 0)
	hdr := func(ts string) event.Headers {
		return event.HeadersOf(map[string]string{"timestamp": ts, "host": "web1", "a.b-c": "x"})
	}
	for _, tc := range []struct {
		name, tmpl string
		headers    event.Headers
		opt        Options
		want       string
	}{
		{"user guide round 10 minutes", "/flume/events/%Y-%m-%d/%H%M/%S", hdr(guide),
			Options{Location: utc, Round: true, RoundValue: 10, RoundUnit: Minute}, "/flume/events/2012-06-12/1150/00"},
		{"no rounding", "/flume/events/%Y-%m-%d/%H%M/%S", hdr(guide), Options{Location: utc}, "/flume/events/2012-06-12/1154/34"},
		{"%c", "%c", hdr(tbp), Options{Location: utc}, "Sat Jun 23 13:46:33 2012"},
		{"%c rounded to 12 hours", "%c", hdr(tbp), Options{Location: utc, Round: true, RoundValue: 12, RoundUnit: Hour}, "Sat Jun 23 12:00:00 2012"},
		{"%s rounded to 5 minutes", "%s", hdr(tbp), Options{Location: utc, Round: true, RoundValue: 5, RoundUnit: Minute},
			strconv.FormatInt(time.Date(2012, 6, 23, 13, 45, 0, 0, utc).Unix(), 10)},
		{"%s rounded to 5 seconds", "%s", hdr(tbp), Options{Location: utc, Round: true, RoundValue: 5, RoundUnit: Second},
			strconv.FormatInt(time.Date(2012, 6, 23, 13, 46, 30, 0, utc).Unix(), 10)},
		{"%t is the header as written, never rounded", "%t", hdr(tbp), Options{Location: utc, Round: true, RoundValue: 1, RoundUnit: Hour}, tbp},
		{"%n-%e unpadded month and day", "%n-%e", hdr(early), Options{Location: utc}, "6-3"},
		{"%k %l unpadded hours, %I %H padded", "%k|%l|%I|%H", hdr(early), Options{Location: utc}, "1|1|01|01"},
		{"%p %y %j %D", "%p %y %j %D", hdr(early), Options{Location: utc}, "AM 14 154 06/03/14"},
		{"names", "%a %A %b %B", hdr(early), Options{Location: utc}, "Tue Tuesday Jun June"},
		{"%z in a zone", "%z %H", hdr(early), Options{Location: la}, "-0700 18"},
		{"rounding in the zone's hours", "%Y%m%d%H", hdr(early), Options{Location: la, Round: true, RoundValue: 12, RoundUnit: Hour}, "2014060212"},
		{"headers", "/logs/%{host}/%{a.b-c}/%{missing}end", hdr(early), Options{}, "/logs/web1/x/end"},
		{"%% and stray percents", "100%%/%{}x/%-/%", hdr(early), Options{}, ""},
		{"local time", "%Y", event.Headers{}, Options{Location: utc, UseLocalTime: true}, "2009"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, err := Parse(tc.tmpl)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("Parse(%q) accepted an empty escape", tc.tmpl)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2009, 11, 10, 23, 0, 0, 0, utc).UnixMilli()
			when, ok := Time(tc.headers, &tc.opt, now)
			if !ok {
				t.Fatal("no time")
			}
			if got := string(tm.Expand(nil, tc.headers, when, &tc.opt)); got != tc.want {
				t.Fatalf("%q expands to %q, want %q", tc.tmpl, got, tc.want)
			}
		})
	}
}

func TestLiteralPercents(t *testing.T) {
	tm, err := Parse("100%%/%-x/50%")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := tm.Static(); !ok || s != "100%/%-x/50%" {
		t.Fatalf("static %q %v", s, ok)
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"/x/%Q", "%[nohost]", "%{}", "%1"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		} else if !strings.Contains(err.Error(), s) {
			t.Errorf("Parse(%q): %v does not quote the template", s, err)
		}
	}
}

func TestHostEscapes(t *testing.T) {
	name, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	tm, err := Parse("/%[localhost]/%[IP]/%[fqdn]")
	if err != nil {
		t.Fatal(err)
	}
	s, ok := tm.Static()
	parts := strings.Split(s, "/")
	if !ok || len(parts) != 4 || parts[1] != name || parts[2] == "" || parts[3] == "" {
		t.Fatalf("%q", s)
	}
}

func TestTimeMissing(t *testing.T) {
	if _, ok := Time(event.Headers{{Key: "timestamp", Value: "abc"}}, &Options{}, 0); ok {
		t.Fatal("bad header accepted")
	}
	if _, ok := Time(nil, &Options{}, 0); ok {
		t.Fatal("missing header accepted")
	}
}
