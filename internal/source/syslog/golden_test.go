package syslogsource

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the golden file was made in Asia/Kolkata

	"github.com/sluicehq/sluice/internal/event"
)

// goldenNow is the clock the golden file was generated with.
var goldenNow = time.UnixMilli(1781524800000) // 2026-06-15T12:00:00Z

type goldenCase struct {
	line       int
	kind, keep string
	size       int
	data       []byte
	want       []string // Flume's output lines for this case
}

func readGolden(t *testing.T) []goldenCase {
	t.Helper()
	f, err := os.Open("testdata/flume_cases.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []goldenCase
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.SplitN(l, " ", 4)
		q, err := strconv.Unquote(f[3])
		if err != nil {
			t.Fatalf("flume_cases.txt:%d: %v", n, err)
		}
		size, _ := strconv.Atoi(f[2])
		cases = append(cases, goldenCase{line: n, kind: f[0], keep: f[1], size: size, data: []byte(q)})
	}
	g, err := os.ReadFile("testdata/flume_golden.txt")
	if err != nil {
		t.Fatal(err)
	}
	i := -1
	for _, l := range strings.Split(strings.TrimRight(string(g), "\n"), "\n") {
		if strings.HasPrefix(l, "case ") {
			i++
			p := strings.Split(l, " ")
			if i >= len(cases) || p[1] != cases[i].kind || (len(p) > 4 && p[4] != hex.EncodeToString(cases[i].data)) {
				t.Fatalf("flume_golden.txt does not follow flume_cases.txt at case %d (%q); regenerate it", i, l)
			}
			continue
		}
		cases[i].want = append(cases[i].want, l)
	}
	if i != len(cases)-1 {
		t.Fatalf("flume_golden.txt has %d cases, flume_cases.txt %d", i+1, len(cases))
	}
	return cases
}

func formatEvent(e event.Event) string {
	keys := make([]string, 0, len(e.Headers))
	for k := range e.Headers.All() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("event")
	for _, k := range keys {
		v := e.Headers.Value(k)
		if k == "timestamp" && v == strconv.FormatInt(goldenNow.UnixMilli(), 10) {
			v = "NOW"
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	b.WriteString(" body=" + hex.EncodeToString(e.Body))
	return b.String()
}

// TestFlumeGolden runs sluice's parsers over inputs whose results Flume's own
// SyslogUtils and SyslogParser classes recorded, and expects the same events.
// Known, deliberate differences (each documented in docs/components.md):
//   - multiport: where Flume's parser throws an exception it does not catch
//     ("crash" in the golden file) sluice makes an Invalid event;
//   - multiport: RFC 3164 years outside a month of now, which Flume sets to
//     1999 or 2001 (a bug), follow syslogtcp's 11-months-back rule.
func TestFlumeGolden(t *testing.T) {
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return goldenNow }
	for _, c := range readGolden(t) {
		keep, _ := ParseKeepFields(c.keep)
		var got []string
		switch c.kind {
		case "tcp":
			p := &FlumeParser{Keep: keep, Loc: kolkata, Now: now}
			data := c.data
			for {
				m, n, ok := ScanStream(data, max(c.size, 10))
				data = data[n:]
				if !ok {
					break
				}
				e, _ := p.Event(m, nil)
				got = append(got, formatEvent(e))
			}
		case "udp":
			p := &FlumeParser{Keep: keep, Loc: kolkata, Now: now}
			m, ok := ScanDatagram(c.data, true)
			if !ok {
				got = append(got, "readfail")
				break
			}
			e, _ := p.Event(m, nil)
			got = append(got, formatEvent(e))
		case "multi":
			p := &MultiportParser{Keep: keep, Now: now}
			e, _, readFail := p.Event(c.data, UTF8, c.size == 1, nil)
			s := formatEvent(e)
			if readFail {
				s = "readfail " + s
			}
			got = append(got, s)
		}
		want := c.want
		if c.kind == "multi" {
			want = []string{multiExpect(t, c, want[0])}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("flume_cases.txt:%d %s %s %q\n got: %s\nwant: %s", c.line, c.kind, c.keep, c.data,
				strings.Join(got, "\n      "), strings.Join(want, "\n      "))
		}
	}
}

// multiExpect turns Flume's multiport outcome into what sluice must produce.
func multiExpect(t *testing.T, c goldenCase, flume string) string {
	invalid := "readfail event flume.syslog.status=Invalid body=" + hex.EncodeToString(c.data)
	switch {
	case flume == "invalid", flume == "invalid-charset", strings.HasPrefix(flume, "crash "):
		return invalid
	}
	// RFC 3164 years: Flume's 1999/2001 becomes the windowed year.
	f := strings.Fields(flume)
	for i, kv := range f {
		v, ok := strings.CutPrefix(kv, "timestamp=")
		if !ok || v == "NOW" {
			continue
		}
		ms, _ := strconv.ParseInt(v, 10, 64)
		ts := time.UnixMilli(ms).UTC()
		if y := ts.Year(); y == 1999 || y == 2001 {
			fixed := adjustYear(time.Date(goldenNow.Year(), ts.Month(), ts.Day(), ts.Hour(), ts.Minute(), ts.Second(), 0, time.UTC), goldenNow)
			f[i] = "timestamp=" + strconv.FormatInt(fixed.UnixMilli(), 10)
		}
	}
	return strings.Join(f, " ")
}
