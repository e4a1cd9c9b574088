package timelayout

import (
	"strings"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	at := time.Date(2024, 3, 5, 23, 59, 59, 950e6, time.UTC)
	tests := []struct {
		spec, in string
		loc      *time.Location
		want     time.Time // zero: parse error expected
		out      string    // Format(at) in UTC
	}{
		{"RFC3339", "2024-03-05T23:59:59Z", time.UTC, at.Truncate(time.Second), "2024-03-05T23:59:59Z"},
		{"rfc3339", "2024-03-05T23:59:59.95Z", time.UTC, at, "2024-03-05T23:59:59Z"},
		{"RFC3339Milli", "2024-03-06T00:59:59.950+01:00", time.UTC, at, "2024-03-05T23:59:59.950Z"},
		{"ISO8601", "2024-03-05T23:59:59.950Z", time.UTC, at, "2024-03-05T23:59:59.950Z"},
		{"DateTime", "2024-03-06 00:59:59", paris, at.Truncate(time.Second), "2024-03-05 23:59:59"},
		{"DateOnly", "2024-03-05", time.UTC, time.Date(2024, 3, 5, 0, 0, 0, 0, time.UTC), "2024-03-05"},
		{"unix", "1709683199.95", time.UTC, at, "1709683199"},
		{"unixMs", "1709683199950", time.UTC, at, "1709683199950"},
		{"unixUs", "1709683199950000", time.UTC, at, "1709683199950000"},
		{"unixNs", "1709683199950000000", time.UTC, at, "1709683199950000000"},
		{"unixMs", "soon", time.UTC, time.Time{}, "1709683199950"},
		{"2006-01-02 15:04:05.000", "2024-03-05 23:59:59.950", time.UTC, at, "2024-03-05 23:59:59.950"},
		{"yyyy-MM-dd HH:mm:ss.SSS", "2024-03-05 23:59:59.950", time.UTC, at, "2024-03-05 23:59:59.950"},
		{"dd/MMM/yyyy:HH:mm:ss Z", "05/Mar/2024:23:59:59 +0000", time.UTC, at.Truncate(time.Second), "05/Mar/2024:23:59:59 +0000"},
		{"yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "2024-03-05T23:59:59.950Z", time.UTC, at, "2024-03-05T23:59:59.950Z"},
		{"M/d/yy h:mm a", "3/5/24 11:59 PM", time.UTC, time.Date(2024, 3, 5, 23, 59, 0, 0, time.UTC), "3/5/24 11:59 PM"},
		{"HH:mm", "23:59", time.UTC, time.Date(1970, 1, 1, 23, 59, 0, 0, time.UTC), "23:59"},
	}
	for _, tc := range tests {
		l, err := New(tc.spec)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		got, err := l.Parse(tc.in, tc.loc)
		switch {
		case tc.want.IsZero() && err == nil:
			t.Errorf("%q parse %q = %v, want an error", tc.spec, tc.in, got)
		case !tc.want.IsZero() && (err != nil || !got.Equal(tc.want)):
			t.Errorf("%q parse %q = %v, %v; want %v", tc.spec, tc.in, got, err, tc.want)
		}
		if out := l.Format(at); out != tc.out {
			t.Errorf("%q format = %q, want %q", tc.spec, out, tc.out)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"":                  "the time layout is empty",
		"99":                "holds no element",
		"yyyy-MM-dd kk":     "letters kk are not supported",
		"yyyy-MM-dd 'open":  "not closed",
		"yyyy-MM-dd G":      "letters G are not supported",
		"dy":                "adjacent fields run together",
		"yyyy-MM-dd HH zzz": "time zone name",
	} {
		_, err := New(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", spec, err, want)
		}
	}
}
