package containerlog

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseCRI(t *testing.T) {
	f := func(line, wantTime, wantStream string, partial bool, wantText string) {
		t.Helper()
		r, err := ParseCRI([]byte(line))
		if err != nil {
			t.Fatalf("ParseCRI(%q): %v", line, err)
		}
		if string(r.Time) != wantTime || r.Stream.String() != wantStream || r.Partial != partial || string(r.Text) != wantText {
			t.Fatalf("ParseCRI(%q) = %q %v %v %q; want %q %s %v %q", line, r.Time, r.Stream, r.Partial, r.Text, wantTime, wantStream, partial, wantText)
		}
		want, _ := time.Parse(time.RFC3339Nano, wantTime)
		if r.Nanos != want.UnixNano() {
			t.Fatalf("ParseCRI(%q): nanos %d, want %d", line, r.Nanos, want.UnixNano())
		}
	}
	f("2016-10-06T00:17:09.669794202Z stdout P log content 1", "2016-10-06T00:17:09.669794202Z", "stdout", true, "log content 1")
	f("2016-10-06T00:17:09.669794203Z stderr F log content 2", "2016-10-06T00:17:09.669794203Z", "stderr", false, "log content 2")
	// containerd trims trailing zeros of the fraction; CRI-O writes offsets.
	f("2021-12-22T02:36:56.9411043Z stdout F x", "2021-12-22T02:36:56.9411043Z", "stdout", false, "x")
	f("2021-11-18T14:47:34.730832241+00:00 stdout F some short log message A", "2021-11-18T14:47:34.730832241+00:00", "stdout", false, "some short log message A")
	f("2021-11-18T16:47:34+02:00 stderr F at two", "2021-11-18T16:47:34+02:00", "stderr", false, "at two")
	// An empty line, with and without the space after the tag.
	f("2021-12-22T02:36:56.94111914Z stdout F ", "2021-12-22T02:36:56.94111914Z", "stdout", false, "")
	f("2021-12-22T02:36:56.94111914Z stdout F", "2021-12-22T02:36:56.94111914Z", "stdout", false, "")
	// The text keeps its spaces and a '\r' that was the container's.
	f("2021-12-22T02:36:56Z stdout F  two  spaces \r", "2021-12-22T02:36:56Z", "stdout", false, " two  spaces \r")
	// Tags to come after ':' are ignored, as the kubelet does.
	f("2021-12-22T02:36:56Z stdout P:x:y more", "2021-12-22T02:36:56Z", "stdout", true, "more")

	for _, bad := range []string{
		"",
		"no time here",
		"2016-10-06 stdout F x",
		"2016-10-06T00:17:09Z",
		"2016-10-06T00:17:09Z stdout",
		"2016-10-06T00:17:09Z stdin F x",
		"2016-10-06T00:17:09Z stdout X x",
		"2016-10-06T00:17:09Z stdout PF x",
		"2016-10-06T00:17:09Z stdout  x",
		"2016-13-06T00:17:09Z stdout F x",
		`{"log":"x\n","stream":"stdout","time":"2016-10-06T00:17:09Z"}`,
		"2016-10-06T00:17:09Z stdout " + strings.Repeat("F", 200),
	} {
		if r, err := ParseCRI([]byte(bad)); err == nil {
			t.Errorf("ParseCRI(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestParseDocker(t *testing.T) {
	f := func(line, wantStream string, partial bool, wantText string) {
		t.Helper()
		r, err := ParseDocker([]byte(line))
		if err != nil {
			t.Fatalf("ParseDocker(%q): %v", line, err)
		}
		if r.Stream.String() != wantStream || r.Partial != partial || string(r.Text) != wantText {
			t.Fatalf("ParseDocker(%q) = %v %v %q; want %s %v %q", line, r.Stream, r.Partial, r.Text, wantStream, partial, wantText)
		}
	}
	f(`{"log":"log content 1\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}`, "stdout", false, "log content 1")
	f(`{"log":"a piece of 16 KiB","stream":"stderr","time":"2019-01-01T11:11:11.111111111Z"}`, "stderr", true, "a piece of 16 KiB")
	// dockerd's escapes, a "\r\n" line end, attrs, another key order.
	f(`{"log":"\u003ctag\u003e \u0026 \"q\" \\ \t\ufffd\r\n","stream":"stdout","attrs":{"tag":"x"},"time":"2019-01-01T11:11:11Z"}`, "stdout", false, "<tag> & \"q\" \\ \t\ufffd")
	f(`{"time":"2019-01-01T11:11:11Z","stream":"stdout","log":"\n"}`, "stdout", false, "")
	// dockerd leaves out an empty "log".
	f(`{"stream":"stdout","time":"2019-01-01T11:11:11Z"}`, "stdout", true, "")

	for _, bad := range []string{
		"",
		"{",
		`{"log":"x\n"}`,
		`{"log":"x\n","stream":"stdin","time":"2019-01-01T11:11:11Z"}`,
		`{"log":"x\n","stream":"stdout"}`,
		`{"log":"x\n","stream":"stdout","time":"yesterday"}`,
		`{"log":1,"stream":"stdout","time":"2019-01-01T11:11:11Z"}`,
		`2019-01-01T11:11:11Z stdout F x`,
	} {
		if r, err := ParseDocker([]byte(bad)); err == nil {
			t.Errorf("ParseDocker(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestDetect(t *testing.T) {
	for line, want := range map[string]Format{
		"2016-10-06T00:17:09.669794202Z stdout F x":                            CRI,
		"2016-10-06T00:17:09.669794202Z stdout F x\r":                          CRI,
		`{"log":"x\n","stream":"stdout","time":"2019-01-01T11:11:11Z"}`:        Docker,
		`{"log":"x\n","stream":"stdout","time":"2019-01-01T11:11:11Z"}` + "\r": Docker,
		`{"msg":"an application's JSON"}`:                                      Unknown,
		"Dec 14 06:41:08 Exception in thread main":                             Unknown,
		"": Unknown,
	} {
		if got := Detect([]byte(line)); got != want {
			t.Errorf("Detect(%q) = %v, want %v", line, got, want)
		}
	}
}

func TestParseTime(t *testing.T) {
	for _, s := range []string{
		"2016-10-06T00:17:09.669794202Z", "2016-10-06T00:17:09Z", "2016-10-06T00:17:09.1Z",
		"2024-02-29T23:59:59.999999999-07:30", "1970-01-01T00:00:00+00:00", "2000-12-31T00:00:00.5+14:00",
	} {
		want, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseTime([]byte(s))
		if err != nil || got != want.UnixNano() {
			t.Errorf("ParseTime(%q) = %d, %v; want %d", s, got, err, want.UnixNano())
		}
	}
	for _, s := range []string{
		"", "2016-10-06", "2016-10-06T00:17:09", "2016-10-06T00:17:09.Z", "2016-10-06T00:17:09.1234567890Z",
		"2023-02-29T00:00:00Z", "2016-10-06T24:00:00Z", "2016-10-06T00:60:00Z", "2016-10-06T00:00:60Z",
		"2016-10-06t00:17:09Z", "2016-10-06T00:17:09+0200", "2016-10-06T00:17:09+24:00", "2016-10-06T00:17:09ZZ",
		"+016-10-06T00:17:09Z", "9999-10-06T00:17:09Z",
	} {
		if got, err := ParseTime([]byte(s)); err == nil {
			t.Errorf("ParseTime(%q) = %d, want an error", s, got)
		}
	}
}

// TestParseTimeEveryDay checks ParseTime's own date arithmetic against the
// standard library on every day of the years it accepts, at a time of day
// and an offset that change from day to day.
func TestParseTimeEveryDay(t *testing.T) {
	end := time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
	for d, i := time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC), 0; d.Before(end); d, i = d.AddDate(0, 0, 1), i+1 {
		at := d.Add(time.Duration(i*7919%86400) * time.Second).Add(time.Duration(i) * 104729 % time.Second)
		zone := time.FixedZone("", (i%49-24)*1800)
		if y := at.In(zone).Year(); y < 1678 || y > 2261 {
			continue // written in a year ParseTime does not read
		}
		s := at.In(zone).Format(time.RFC3339Nano)
		got, err := ParseTime([]byte(s))
		if err != nil || got != at.UnixNano() {
			t.Fatalf("ParseTime(%q) = %d, %v; want %d", s, got, err, at.UnixNano())
		}
	}
}

// TestParseTimeUTC checks the fixed-layout reader of UTC times against
// parseTime, the general one: on the times the runtimes write (0 to 9
// fractional digits), on every field at its limits, and on times one byte
// off the layout, which it must leave to parseTime.
func TestParseTimeUTC(t *testing.T) {
	// Each time is read without a minute kept, and with the minute of the
	// time read before (so in the same minute as the last, or not).
	var m minute
	same := func(s string, wantFast bool) {
		t.Helper()
		slow, err := parseTime([]byte(s))
		for _, m := range []*minute{nil, &m} {
			fast, ok := parseTimeUTC([]byte(s), m)
			if ok != wantFast {
				t.Errorf("parseTimeUTC(%q, %v) ok = %v, want %v", s, m != nil, ok, wantFast)
			}
			if ok && (err != nil || fast != slow) {
				t.Errorf("parseTimeUTC(%q, %v) = %d; parseTime says %d, %v", s, m != nil, fast, slow, err)
			}
		}
	}
	for _, s := range []string{
		"2016-10-06T00:17:09.669794202Z", "2016-10-06T00:17:09Z", "2016-10-06T00:17:09.1Z", "2016-10-06T00:17:09.12Z",
		"2016-10-06T00:17:09.123Z", "2016-10-06T00:17:09.1234Z", "2016-10-06T00:17:09.12345Z", "2016-10-06T00:17:09.123456Z",
		"2016-10-06T00:17:09.1234567Z", "2016-10-06T00:17:09.12345678Z", "2016-10-06T00:17:09.000000000Z",
		"2016-10-06T00:17:09.999999999Z", "2016-10-06T00:17:09.900000000Z", "2016-10-06T00:17:09.000000009Z",
		"1678-01-01T00:00:00Z", "2261-12-31T23:59:59.999999999Z", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59.5Z",
		"2024-02-29T12:00:00Z", "2000-02-29T12:00:00Z", "2024-12-31T00:00:00Z", "2024-04-30T00:00:00Z",
	} {
		same(s, true)
		if want, err := time.Parse(time.RFC3339Nano, s); err != nil {
			t.Fatal(err)
		} else if got, _ := parseTimeUTC([]byte(s), nil); got != want.UnixNano() {
			t.Errorf("parseTimeUTC(%q) = %d, time.Parse says %d", s, got, want.UnixNano())
		}
	}
	for _, s := range []string{
		"", "2016-10-06T00:17:09", "2016-10-06T00:17:09.Z", "2016-10-06T00:17:09.1234567890Z", "2016-10-06T00:17:09+00:00",
		"2016-10-06T00:17:09.5+02:00", "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2024-04-31T00:00:00Z",
		"2024-00-01T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-00T00:00:00Z", "2024-01-32T00:00:00Z",
		"2016-10-06T24:00:00Z", "2016-10-06T00:60:00Z", "2016-10-06T00:00:60Z", "1677-12-31T23:59:59Z", "2262-01-01T00:00:00Z",
		"2016-10-06t00:17:09Z", "2016-10-06 00:17:09Z", "2016/10/06T00:17:09Z", "2016-10-06T00.17:09Z", "2016-10-06T00:17.09Z",
		"2016-10-06T00:17:09,5Z", "2016-10-06T00:17:09.12a4Z", "2016-10-06T00:17:09.12345678aZ", "2016-10-06T00:17:09.1234a678Z",
		"2016-10-06T00:17:09.:23456789Z", "2016-10-06T00:17:09./23456789Z", "2016-1o-06T00:17:09Z", "2O16-10-06T00:17:09Z",
		"2016-10-06T00:17:09ZZ", "2016-10-06T00:17:0\xffZ", "\xff016-10-06T00:17:09Z",
	} {
		same(s, false)
	}
	// A minute kept, then times of it that are not right from the seconds
	// on.
	for _, s := range []string{"2016-10-06T00:17:60Z", "2016-10-06T00:17:6Z", "2016-10-06T00:17.09Z", "2016-10-06T00:17:0aZ",
		"2016-10-06T00:17:/9Z", "2016-10-06T00:17:09.Z", "2016-10-06T00:17:09+00:00"} {
		same("2016-10-06T00:17:00Z", true)
		same(s, false)
	}
	for _, s := range []string{"2016-10-06T00:17:59.999999999Z", "2016-10-06T00:17:00Z", "2016-10-06T00:17:01.5Z"} {
		same("2016-10-06T00:17:00Z", true)
		same(s, true)
	}
	// Every day of the years read, and every fractional length.
	end := time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
	for d, i := time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC), 0; d.Before(end); d, i = d.AddDate(0, 0, 1), i+1 {
		at := d.Add(time.Duration(i*7919%86400) * time.Second).Add(time.Duration(i) * 104729 % time.Second / time.Duration(pow10[i%10]) * time.Duration(pow10[i%10]))
		same(at.Format(time.RFC3339Nano), true)
		same(at.Format("2006-01-02T15:04:05.000000000Z"), true)
	}
}

func TestParseTimeDoesNotAllocate(t *testing.T) {
	b := []byte("2016-10-06T00:17:09.669794202+02:00")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseTime(b) }); n != 0 {
		t.Fatalf("ParseTime allocates %v times", n)
	}
	line := []byte("2016-10-06T00:17:09.669794202Z stdout P log content 1")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseCRI(line) }); n != 0 {
		t.Fatalf("ParseCRI allocates %v times", n)
	}
}

func TestParsePath(t *testing.T) {
	f := func(path string, want PodFile) {
		t.Helper()
		got, ok := ParsePath(path)
		if !ok || got != want {
			t.Fatalf("ParsePath(%q) = %+v, %v; want %+v", path, got, ok, want)
		}
	}
	f("/var/log/pods/kube-system_coredns-7db6d8ff4d-x2k9p_5f3c8d2e-1b4a-4c6e-9a7b-2d8e0f1c3b5a/coredns/0.log",
		PodFile{Namespace: "kube-system", Pod: "coredns-7db6d8ff4d-x2k9p", UID: "5f3c8d2e-1b4a-4c6e-9a7b-2d8e0f1c3b5a", Container: "coredns", Restart: "0"})
	f("/data/pods/default_web-0_1234/nginx/12.log",
		PodFile{Namespace: "default", Pod: "web-0", UID: "1234", Container: "nginx", Restart: "12"})
	id := strings.Repeat("0123456789abcdef", 4)
	f("/var/log/containers/coredns-7db6d8ff4d-x2k9p_kube-system_coredns-"+id+".log",
		PodFile{Namespace: "kube-system", Pod: "coredns-7db6d8ff4d-x2k9p", Container: "coredns", ContainerID: id})
	f("/var/log/containers/web-0_default_istio-proxy-"+id+".log",
		PodFile{Namespace: "default", Pod: "web-0", Container: "istio-proxy", ContainerID: id})
	for _, bad := range []string{
		"/var/log/syslog", "/var/log/pods/default_web-0/nginx/0.log", "/var/log/pods/default_web-0_1234/nginx/0.log.20240101-000000",
		"/var/log/pods/default_web-0_1234/nginx/x.log", "/var/log/containers/web-0_default_nginx.log",
		"/var/log/containers/web-0_default_nginx-" + id[:63] + ".log", "/var/log/containers/web_0_default_nginx-" + id + ".log",
	} {
		if got, ok := ParsePath(bad); ok {
			t.Errorf("ParsePath(%q) = %+v, want no match", bad, got)
		}
	}
}

// FuzzParseCRI checks ParseCRI on any bytes: it never panics, and what it
// accepts is a record it can write back: the time, stream, tag and text
// put together again give a line that parses to the same record.
func FuzzParseCRI(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout P log content 1"))
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stderr F"))
	f.Add([]byte("2021-11-18T14:47:34.730832241+00:00 stdout F:x some"))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseCRI(line)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(line, r.Time) || !bytes.HasSuffix(line, r.Text) || len(r.Text) >= len(line) {
			t.Fatalf("ParseCRI(%q): time %q or text %q is not where it was", line, r.Time, r.Text)
		}
		tag := "F"
		if r.Partial {
			tag = "P"
		}
		again := string(r.Time) + " " + r.Stream.String() + " " + tag + " " + string(r.Text)
		r2, err := ParseCRI([]byte(again))
		if err != nil || r2.Nanos != r.Nanos || r2.Stream != r.Stream || r2.Partial != r.Partial || !bytes.Equal(r2.Text, r.Text) {
			t.Fatalf("ParseCRI(%q) = %+v, but its rewrite %q gives %+v, %v", line, r, again, r2, err)
		}
	})
}

// FuzzParseDocker checks ParseDocker on any bytes: it never panics, and
// what it accepts is a record it can write back as dockerd would.
func FuzzParseDocker(f *testing.F) {
	f.Add([]byte(`{"log":"log content 1\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}`))
	f.Add([]byte(`{"log":"\u003c\ufffd","stream":"stderr","attrs":{"a":"b"},"time":"2019-01-01T11:11:11Z"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseDocker(line)
		if err != nil {
			return
		}
		log := string(r.Text)
		if !r.Partial {
			log += "\n"
		}
		again, _ := json.Marshal(map[string]string{"log": log, "stream": r.Stream.String(), "time": string(r.Time)})
		r2, err := ParseDocker(again)
		if err != nil || r2.Nanos != r.Nanos || r2.Stream != r.Stream || r2.Partial != r.Partial {
			t.Fatalf("ParseDocker(%q) = %+v, but its rewrite %s gives %+v, %v", line, r, again, r2, err)
		}
		// Invalid UTF-8 comes back as U+FFFD from the JSON decoder.
		if utf8.Valid(r.Text) && !bytes.Equal(r2.Text, r.Text) && !bytes.HasSuffix(r.Text, []byte("\r")) {
			t.Fatalf("ParseDocker(%q) text %q, rewrite gives %q", line, r.Text, r2.Text)
		}
	})
}

// FuzzParseTime checks ParseTime against the standard library: a time it
// accepts, time.Parse accepts as the same instant.
func FuzzParseTime(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09.669794202Z"))
	f.Add([]byte("2024-02-29T23:59:59.9-07:30"))
	f.Add([]byte("2016-10-06T00:17:09+00:00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ns, err := ParseTime(b)
		if err != nil {
			return
		}
		want, err := time.Parse(time.RFC3339Nano, string(b))
		if err != nil || want.UnixNano() != ns {
			t.Fatalf("ParseTime(%q) = %d; time.Parse says %d, %v", b, ns, want.UnixNano(), err)
		}
	})
}

// FuzzParseTimeUTC checks the fixed-layout reader against parseTime: what
// it accepts, parseTime reads as the same instant, and every time parseTime
// reads in UTC ('Z') it accepts too (else the runtimes' times would miss
// the fast path unnoticed).
//
// Two times are read one after the other, each without a minute kept and
// with the minute of the one before: the same.
func FuzzParseTimeUTC(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09.669794202Z"), []byte("2016-10-06T00:17:10.669794202Z"))
	f.Add([]byte("2016-10-06T00:17:09Z"), []byte("2016-10-06T00:17:6aZ"))
	f.Add([]byte("2024-02-29T23:59:59.9Z"), []byte("2024-02-29T23:59:59.9+01:00"))
	f.Add([]byte("2016-10-06T00:17:09.12345678aZ"), []byte("2016-10-06T00:17:09.123456789Z"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var m minute
		for _, b := range [][]byte{a, b} {
			slow, err := parseTime(b)
			fast, ok := parseTimeUTC(b, nil)
			kept, okKept := parseTimeUTC(b, &m)
			if ok != okKept || fast != kept {
				t.Fatalf("parseTimeUTC(%q) = %d, %v; with the minute of the time before, %d, %v", b, fast, ok, kept, okKept)
			}
			if ok && (err != nil || fast != slow) {
				t.Fatalf("parseTimeUTC(%q) = %d; parseTime says %d, %v", b, fast, slow, err)
			}
			if !ok && err == nil && b[len(b)-1] == 'Z' {
				t.Fatalf("parseTimeUTC(%q) leaves a UTC time parseTime reads (%d) to it", b, slow)
			}
		}
	})
}

// FuzzParser checks a Parser, which keeps the minute of the last time,
// against ParseCRI and ParseDocker, which keep nothing: the records of a
// file read one after the other come out the same.
func FuzzParser(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F a"), []byte("2016-10-06T00:17:10.000000001Z stderr P b"), false)
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F a"), []byte("2016-10-06T00:17:60.669794202Z stdout F a"), false)
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F a"), []byte("2016-10-06T00:17:09.66979420aZ stdout F a"), false)
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F a"), []byte("2016-10-06T00:17:09.669794202Z stdout F:x a"), false)
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F a"), []byte("2016-10-06T00:17:09.669794202Z stdout F "), false)
	f.Add([]byte(`{"log":"a\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}`),
		[]byte(`{"log":"b","stream":"stderr","time":"2019-01-01T11:11:12.5Z"}`), true)
	f.Fuzz(func(t *testing.T, a, b []byte, docker bool) {
		p := Parser{Format: CRI}
		parse := ParseCRI
		if docker {
			p.Format, parse = Docker, ParseDocker
		}
		for _, line := range [][]byte{a, b} {
			var got Record
			err := p.Parse(line, &got)
			want, wantErr := parse(line)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("Parser.Parse(%q): %v; alone: %v", line, err, wantErr)
			}
			if err == nil && (!bytes.Equal(got.Time, want.Time) || got.Nanos != want.Nanos || got.Stream != want.Stream ||
				got.Partial != want.Partial || !bytes.Equal(got.Text, want.Text)) {
				t.Fatalf("Parser.Parse(%q) = %+v; alone: %+v", line, got, want)
			}
		}
	})
}

func BenchmarkParseTime(b *testing.B) {
	for _, s := range []string{"2016-10-06T00:17:09.669794202Z", "2016-10-06T00:17:09.66979Z", "2016-10-06T00:17:09.669794202+02:00"} {
		tm := []byte(s)
		b.Run(strconv.Itoa(len(s)), func(b *testing.B) {
			for b.Loop() {
				if _, err := ParseTime(tm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseCRI(b *testing.B) {
	line := []byte("2016-10-06T00:17:09.669794202Z stdout F " + strings.Repeat("x", 200))
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := ParseCRI(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseDocker reads a record of ASCII text and one of Chinese
// (as dockerd writes it: raw UTF-8), of about 200 bytes each.
func BenchmarkParseDocker(b *testing.B) {
	for _, tc := range []struct{ name, text string }{
		{"ascii", strings.Repeat("x", 201)},
		{"chinese", strings.Repeat("日志", 33) + "xxx"},
	} {
		line := []byte(`{"log":"` + tc.text + `\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}`)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if _, err := ParseDocker(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzScanDocker checks the fast reader of dockerd's lines against
// encoding/json: whatever it accepts, the standard decoder reads to the
// same values.
func FuzzScanDocker(f *testing.F) {
	f.Add([]byte(`{"log":"log content 1\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}`))
	f.Add([]byte(`{"log":"\ud83d\ude00 \ud83d x \u00e9\\\"\/\b\f\r\t","stream":"stderr","time":"t"}`))
	f.Add([]byte("{\"log\":\"\xff\xfe\xc3\",\"time\":\"\"}"))
	f.Fuzz(func(t *testing.T, line []byte) {
		log, stream, tm, ok := scanDocker(line)
		if !ok {
			return
		}
		var d dockerRecord
		if err := json.Unmarshal(line, &d); err != nil {
			t.Fatalf("scanDocker accepts %q, encoding/json does not: %v", line, err)
		}
		var want []byte
		if d.Log != nil {
			want = []byte(*d.Log)
		}
		if !bytes.Equal(log, want) || string(stream) != d.Stream || string(tm) != d.Time {
			t.Fatalf("scanDocker(%q) = %q %q %q; encoding/json: %q %q %q", line, log, stream, tm, want, d.Stream, d.Time)
		}
	})
}

// FuzzPlainDocker checks the reader of dockerd's plainest lines against
// scanDocker (itself checked against encoding/json): whatever it accepts,
// scanDocker reads to the same values.
func FuzzPlainDocker(f *testing.F) {
	f.Add([]byte(`{"log":"log content 1\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}`))
	f.Add([]byte(`{"log":"a piece of 16 KiB","stream":"stderr","time":"2019-01-01T11:11:11Z"}`))
	f.Add([]byte(`{"log":"crlf\r\n","stream":"stdout","time":"t"}`))
	f.Add([]byte(`{"log":"q\"\n","stream":"stdout","time":"t"}`))
	f.Add([]byte(`{"log":"tab\tx\n","stream":"st\"","time":"t"}`))
	f.Add([]byte("{\"log\":\"ctl\x01 and \xc3\xa9 \x7f\\n\",\"stream\":\"stdout\",\"time\":\"t\"}"))
	f.Add([]byte(`{"log":"日志 é 😀 \u003c\n","stream":"stdout","time":"t"}`))
	f.Add([]byte(`{"log":"日志 é 😀\r\n","stream":"stdout","time":"t"}`))
	f.Add([]byte("{\"log\":\"cut \xe6\x97\\n\",\"stream\":\"stdout\",\"time\":\"t\"}"))
	f.Fuzz(func(t *testing.T, line []byte) {
		text, nl, stream, tm, ok := plainDocker(line)
		if !ok {
			return
		}
		log, stream2, tm2, ok := scanDocker(line)
		if !ok {
			t.Fatalf("plainDocker accepts %q, scanDocker does not", line)
		}
		want, cut := bytes.CutSuffix(log, []byte("\n"))
		if cut {
			want = bytes.TrimSuffix(want, []byte("\r"))
		}
		if nl != cut || !bytes.Equal(text, want) || !bytes.Equal(stream, stream2) || !bytes.Equal(tm, tm2) {
			t.Fatalf("plainDocker(%q) = %q %v %q %q; scanDocker: %q %q %q", line, text, nl, stream, tm, log, stream2, tm2)
		}
	})
}

func TestPlainText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"", true}, {"ascii only", true}, {"日志 é 😀 \x7f", true}, {"\u2028 raw", true},
		{"tab\tin", false}, {"日志\x01", false}, {"cut \xe6\x97", false}, {"\xff", false}, {"\xed\xa0\x80 surrogate", false},
	} {
		if got := plainText([]byte(tc.in)); got != tc.want {
			t.Errorf("plainText(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPlainASCII(t *testing.T) {
	for i := range 256 {
		for _, at := range []int{0, 3, 7, 8, 12, 16} {
			b := []byte(strings.Repeat("a", 17))
			b[at] = byte(i)
			if got, want := plainASCII(b), i >= 0x20 && i < 0x80; got != want {
				t.Fatalf("plainASCII with byte %#x at %d = %v, want %v", i, at, got, want)
			}
		}
	}
}
