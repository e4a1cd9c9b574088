package timelayout

import (
	"strings"
	"testing"
	"time"
)

func TestJodaTranslation(t *testing.T) {
	utc := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	good := []struct {
		pattern, value string
		want           int64
	}{
		{"yyyy-MM-dd'T'HH:mm:ss.SSSZ", "2021-07-04T09:08:07.123+0200", utc("2021-07-04T07:08:07.123Z")},
		{"yyyy-MM-dd'T'HH:mm:ssZZ", "2021-07-04T09:08:07Z", utc("2021-07-04T09:08:07Z")},
		{"yyyy-MM-dd'T'HH:mm:ssZZ", "2021-07-04T09:08:07-05:00", utc("2021-07-04T14:08:07Z")},
		{"yyyyMMddHHmmssZ", "20210704090807+0000", utc("2021-07-04T09:08:07Z")},
		{"EEE, dd MMM yyyy HH:mm:ss Z", "Sun, 04 Jul 2021 09:08:07 +0000", utc("2021-07-04T09:08:07Z")},
		{"MMMM d, yyyy h:mm a Z", "July 4, 2021 9:08 PM +0000", utc("2021-07-04T21:08:00Z")},
		{"yy-M-d H:m:s,S Z", "21-7-4 9:8:7,5 +0000", utc("2021-07-04T09:08:07.5Z")},
		{"'at' yyyy 'o''clock' HH Z", "at 2021 o'clock 09 +0000", utc("2021-01-01T09:00:00Z")},
		{"HH:mm Z", "09:30 +0000", utc("1970-01-01T09:30:00Z")}, // Joda's default year
	}
	for _, tt := range good {
		j, err := Joda(tt.pattern)
		if err != nil {
			t.Errorf("%q: %v", tt.pattern, err)
			continue
		}
		tm, err := j.Parse(tt.value, time.Local)
		got := tm.UnixMilli()
		if err != nil || got != tt.want {
			t.Errorf("%q (layout %q) parse %q = %d, %v; want %d", tt.pattern, j.parse, tt.value, got, err, tt.want)
		}
	}
	bad := []struct{ pattern, want string }{
		{"yyyy-MM-dd G", "letters G are not supported"},
		{"yyyy-MM-dd HH:mm zzz", "time zone name"},
		{"yyyy-MM-dd HH:mm ZZZ", "time zone id"},
		{"yyyy-MM-dd'T'HH'h' 'Monday'", `contains "Mon"`},
		{"yyyy 'v2'", `contains "2"`},
		{"ssSSS", "must follow a '.' or ','"},
		{"yyyy-MM-dd 'open", "not closed"},
		{"Mss", "adjacent fields run together"},
		{"kk:mm", "letters kk are not supported"},
	}
	for _, tt := range bad {
		_, err := Joda(tt.pattern)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.pattern, err, tt.want)
		}
	}
}
