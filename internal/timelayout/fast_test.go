package timelayout

import (
	"testing"
	"time"
)

// fastLayouts are layouts with a plan: the fast path must take them.
var fastLayouts = []string{
	"yyyy-MM-dd'T'HH:mm:ss.SSSZ", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd HH:mm:ss,SSS",
	"yyyy/MM/dd HH:mm:ss.SSS", "RFC3339", "RFC3339Nano", "ISO8601", "DateTime",
	"2006-01-02T15:04:05.000Z07:00", "2006-01-02 15:04:05.000000", "2006-01-02T15:04:05Z", "20060102 150405",
}

// slowLayouts have no plan (names, 12-hour clocks, zone names, no year).
var slowLayouts = []string{"dd/MMM/yyyy:HH:mm:ss Z", "RFC1123", "Kitchen", "HH:mm:ss", "2006-01-02 03:04:05 PM", "2006-002"}

var fastInputs = []string{
	"2024-03-05T23:59:07.123+0000", "2024-03-05T23:59:07.123+0200", "2024-03-05T23:59:07.123-0530", "2024-03-05T23:59:07.123Z",
	"2024-03-05T23:59:07.123+02:00", "2024-03-05T23:59:07Z", "2024-03-05T23:59:07.123456789Z", "2024-03-05T23:59:07.1234567891Z",
	"2024-03-05 23:59:07", "2024-03-05 23:59:07,250", "2024-03-05 23:59:07.250", "2024/03/05 23:59:07.250",
	"2024-3-5T3:9:7.1Z", "2024-02-29 00:00:00", "2023-02-29 00:00:00", "2024-04-31 00:00:00", "2024-13-01 00:00:00",
	"2024-00-01 00:00:00", "2024-01-01 24:00:00", "2024-01-01 23:60:00", "2024-01-01 23:59:60", "2024-03-05T23:59:07.123+2400",
	"2024-03-05T23:59:07.123+0060", "2024-03-05T23:59:07.+0000", "2024-03-05T23:59:07+0000", "2024-03-05T23:59:07.123",
	"2024-03-05  23:59:07", "2024-03-05 23:59:07 ", "x2024-03-05 23:59:07", "2024-03-05 23:59:07.123456", "20240305 235907",
	"0000-01-01 00:00:00", "9999-12-31 23:59:59", "2024-03-05T23:59:07.123-00:00", "", "2024", "2024-03-05T23:59:07.123+02",
	"2024-03-05 23:59:07.1", "2024-03-05T23:59:07,5Z", "２０２４-03-05 23:59:07",
	"0000-01-01T00:00:00.000+0000", "0000-02-29T12:00:00.000Z", "0001-02-28T23:59:59.999-2359", "1969-12-31T23:59:59.999+0000",
	"1900-02-29 00:00:00", "2100-02-29 00:00:00", "2000-02-29 00:00:00", "9999-12-31T23:59:59.999-2359", "2024-03-05T3:59:07.123Z",
	"2024-03-05T23:59:07.12a+0000", "2024-03-05T23:59:07:123+0000", "2024-03-05T23:59:07.123+00:00",
}

func TestFastPlans(t *testing.T) {
	for _, spec := range fastLayouts {
		l, err := New(spec)
		if err != nil {
			t.Fatal(err)
		}
		if l.fast == nil {
			t.Errorf("%s (Go %q) has no fast plan", spec, l.parse)
		}
	}
	for _, spec := range slowLayouts {
		l, err := New(spec)
		if err != nil {
			t.Fatal(err)
		}
		if l.fast != nil {
			t.Errorf("%s (Go %q) has a fast plan, but holds what plans do not read", spec, l.parse)
		}
	}
	l, _ := New("yyyy-MM-dd'T'HH:mm:ss.SSSZ")
	if _, ok := l.fast.parse("2024-03-05T23:59:07.123+0000", time.UTC); !ok {
		t.Fatal("the midnight transform's time does not take the fast path")
	}
	if l.fast.fixed == nil {
		t.Fatal("the midnight transform's layout has no fixed offsets")
	}
	if _, ok := l.fast.fixed.parse("2024-03-05T23:59:07.123+0000", time.UTC, true); !ok {
		t.Fatal("the midnight transform's time is not read at fixed offsets")
	}
}

// TestUnixDays holds the date arithmetic to time.Date's.
func TestUnixDays(t *testing.T) {
	for _, y := range []int{0, 1, 3, 4, 99, 100, 399, 400, 401, 1600, 1900, 1969, 1970, 1971, 2000, 2024, 2100, 9999} {
		for m := 1; m <= 12; m++ {
			for _, d := range []int{1, 28, daysIn(m, y)} {
				want := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC).Unix() / 86400 // midnights: whole days
				if got := unixDays(y, m, d); got != want {
					t.Errorf("unixDays(%d, %d, %d) = %d, want %d", y, m, d, got, want)
				}
			}
		}
	}
}

// TestFastMatchesTimeParse: whatever the fast path reads, time.Parse reads
// as the same time in the same zone; whatever time.Parse refuses, the fast
// path refuses.
func TestFastMatchesTimeParse(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no zoneinfo:", err)
	}
	for _, spec := range fastLayouts {
		l, _ := New(spec)
		for _, loc := range []*time.Location{time.UTC, paris, time.FixedZone("", 2*3600)} {
			for _, v := range fastInputs {
				checkFast(t, l, v, loc)
			}
		}
	}
}

func checkFast(t *testing.T, l *Layout, v string, loc *time.Location) {
	t.Helper()
	got, ok := l.fast.parse(v, loc)
	want, err := time.ParseInLocation(l.parse, v, loc)
	if !ok {
		return // time.Parse decides
	}
	if err != nil {
		t.Fatalf("%s: fast read %q as %v, time.Parse refuses it: %v", l.spec, v, got, err)
	}
	gn, go_ := got.Zone()
	wn, wo := want.Zone()
	if !got.Equal(want) || gn != wn || go_ != wo || got.Location().String() != want.Location().String() {
		t.Fatalf("%s in %v: fast read %q as %v (%s %d), time.Parse as %v (%s %d)", l.spec, loc, v, got, gn, go_, want, wn, wo)
	}
}

func FuzzFastParse(f *testing.F) {
	for i, v := range fastInputs {
		f.Add(uint8(i), v)
	}
	f.Fuzz(func(t *testing.T, i uint8, v string) {
		l, _ := New(fastLayouts[int(i)%len(fastLayouts)])
		checkFast(t, l, v, time.UTC)
	})
}

func BenchmarkParse(b *testing.B) {
	l, _ := New("yyyy-MM-dd'T'HH:mm:ss.SSSZ")
	const v = "2024-03-05T23:59:07.123+0000"
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.Parse(v, time.UTC); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("time.Parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := time.ParseInLocation(l.parse, v, time.UTC); err != nil {
				b.Fatal(err)
			}
		}
	})
}
