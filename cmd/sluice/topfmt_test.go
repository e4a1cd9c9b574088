package main

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/status"
)

func f(v float64) *float64 { return &v }

func TestTopRowsAndSorting(t *testing.T) {
	s := status.Snapshot{Agent: "a1", State: "running", Healthy: false, Problems: []string{"sink k2: down"},
		Time: time.Now().UnixMilli(), Nodes: []status.Node{
			{ID: "source/r1", Kind: "source", Name: "r1", Type: "netcat", State: "running", In: f(1500), Out: f(1500),
				Latency: []status.Latency{{Stage: "source", Count: 9, P50: 52000, P99: 310000}}},
			{ID: "selector/r1", Kind: "selector", Name: "r1", Type: "replicating"},
			{ID: "channel/c1", Kind: "channel", Name: "c1", Type: "memory", State: "running", In: f(1500), Out: f(20),
				Fill: &status.Fill{Events: 700, Capacity: 1000, Percent: 70}},
			{ID: "sink/k2", Kind: "sink", Name: "k2", Type: "avro", State: "running", In: f(20), Out: f(0),
				Errors: 12, ErrorRate: 2, Reason: "down\nhard",
				Latency: []status.Latency{{Stage: "sink", Count: 3, P50: 2e6, P99: 9e6}, {Stage: "end_to_end", Count: 3, P99: 1.5e9}}},
		}}
	rows := topRows(s)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3 (selectors have no numbers)", len(rows))
	}
	got := func() string {
		var names []string
		for _, r := range rows {
			names = append(names, r.name)
		}
		return strings.Join(names, " ")
	}
	for _, tc := range []struct {
		by      string
		reverse bool
		want    string
	}{
		{"", false, "r1 c1 k2"},
		{"", true, "k2 c1 r1"},
		{"NAME", false, "c1 k2 r1"},
		{"OUT/s", false, "r1 c1 k2"},
		{"FILL", false, "c1 r1 k2"},
		{"ERRORS", false, "k2 r1 c1"},
		{"P99", false, "k2 r1 c1"},
	} {
		sortRows(rows, tc.by, tc.reverse)
		if g := got(); g != tc.want {
			t.Errorf("sort by %q reverse %v: %s, want %s", tc.by, tc.reverse, g, tc.want)
		}
	}
	var buf bytes.Buffer
	printTop(&buf, s)
	out := buf.String()
	for _, want := range []string{"UNHEALTHY (1 problems)", "70.0% (700)", "52µs", "310µs", "1.5s", "12 (+2/s)", "down hard", "problem: sink k2: down"} {
		if !strings.Contains(out, want) {
			t.Errorf("top --once output lacks %q:\n%s", want, out)
		}
	}
}

// A generator source shows only OUT/s; a draining component its state
// and note, after its reason when it has one.
func TestTopGeneratorAndDrain(t *testing.T) {
	left := int64(42)
	s := status.Snapshot{Agent: "a1", State: "stopping", Time: time.Now().UnixMilli(), Nodes: []status.Node{
		{ID: "source/gen", Kind: "source", Name: "gen", Type: "stress", State: "stopping", Generator: true, Out: f(499)},
		{ID: "sink/k1", Kind: "sink", Name: "k1", Type: "http", State: "draining", In: f(900), Out: f(900),
			Note: "draining channel c1: 42 events left; deadline in 3s", Left: &left},
		{ID: "sink/k2", Kind: "sink", Name: "k2", Type: "http", State: "draining", In: f(0), Out: f(0),
			Reason: "cannot deliver", Note: "draining channel c2: 7 events left; deadline in 3s"},
	}}
	rows := topRows(s)
	for i, want := range [][]string{
		{"source", "gen", "stress", "stopping", "-", "499"},
		{"sink", "k1", "http", "draining", "900", "900"},
	} {
		if got := rows[i].cells[:6]; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("row %d: %q, want %q", i, got, want)
		}
	}
	if r := rows[1].cells[11]; r != "draining channel c1: 42 events left; deadline in 3s" {
		t.Errorf("k1's reason column %q", r)
	}
	if r := rows[2].cells[11]; r != "cannot deliver; draining channel c2: 7 events left; deadline in 3s" {
		t.Errorf("k2's reason column %q", r)
	}
	if _, ok := rows[0].keys["IN/s"]; ok {
		t.Error("the generator sorts by an input rate it does not have")
	}
}

func TestTapTextLine(t *testing.T) {
	body := "GET /a b=c"
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	writeTapText(w, status.TapLine{Time: 1_700_000_000_123, Kind: "source", Component: "r1",
		Headers: map[string]string{"b": "x y", "a": "k=v", "c": "line\nbreak"}, Body: &body})
	writeTapText(w, status.TapLine{Time: 1_700_000_000_123, Kind: "channel", Component: "c1", BodyBase64: "/wA="})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "2023-11-14T22:13:20.123Z source/r1 {a=\"k=v\", b=x y, c=\"line\\nbreak\"} \"GET /a b=c\"\n" +
		"2023-11-14T22:13:20.123Z channel/c1 {} base64:/wA=\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
