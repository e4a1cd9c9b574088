package filechannel

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

// logLines is a JSON log captured for a test.
type logLines struct{ bytes.Buffer }

func (l *logLines) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// buildLogged is build with the channel's log captured.
func buildLogged(t *testing.T, d dirs, extra map[string]string, out *logLines) *Channel {
	t.Helper()
	m := map[string]string{"checkpointDir": d.ck, "dataDirs": d.data, "keep-alive": "1",
		"minimumRequiredSpace": "0", "maxFileSize": "1048576"}
	for k, v := range extra {
		m[k] = v
	}
	p := config.FromMap("a1.channels.c1.", m)
	log := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ch, err := New(flow.Env{Agent: "a1", Name: "c1", Type: "file", Metrics: metrics.NewRegistry("a1"), Logger: log}, p)
	if err != nil {
		t.Fatal(err)
	}
	return ch.(*Channel)
}

// held returns the positions of the events the channel holds, by segment.
func held(c *Channel) map[uint64][]wal.Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint64][]wal.Position{}
	c.queue.each(func(e *entry) { out[e.pos.Segment] = append(out[e.pos.Segment], e.pos) })
	return out
}

// dataSegments lists the data dir's segments that hold records (not the
// empty one a clean stop leaves last).
func dataSegments(t *testing.T, dir string) []string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	sort.Strings(segs)
	var out []string
	for _, s := range segs {
		if fi, err := os.Stat(s); err == nil && fi.Size() > wal.SegmentHeaderSize {
			out = append(out, s)
		}
	}
	return out
}

func segNum(path string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".wal"), 10, 64) // names from dataSegments
	return n
}

// lostToCut counts the held events of a segment file whose record does not
// end before cut.
func lostToCut(t *testing.T, path string, held []wal.Position, cut int64) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range held {
		if p.Offset+wal.FrameHeaderSize+int64(binary.LittleEndian.Uint32(b[p.Offset:p.Offset+4])) > cut {
			n++
		}
	}
	return n
}

// TestDamageReport damages a stopped channel's files in each way the
// issue lists and checks that recovery gives back every intact event,
// counts exactly the acknowledged events it cannot give back (in
// RecoveryLostEventCount), says all of it in exactly one summary line at
// the right level, and never logs per event, also while the rest is taken.
// "Unacknowledged" is said only of a transaction torn by a crash.
func TestDamageReport(t *testing.T) {
	type outcome struct {
		lost      int64  // RecoveryLostEventCount
		back      int    // events given back
		level     string // of the summary line
		msg       string // part of it
		uncounted bool   // the line says some loss cannot be counted
		unacked   int    // events said to be unacknowledged
	}
	const total = 3600 // 36 transactions of 100 events, about 4 segments of 1 MiB
	cases := []struct {
		name   string
		ckOff  bool // no checkpoint at stop (as after a crash)
		damage func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome
	}{
		{"checkpoint deleted and last segment cut by 5 bytes", false, func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome {
			os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
			segs := dataSegments(t, d.data)
			last := segs[len(segs)-1]
			fi, _ := os.Stat(last)
			if err := os.Truncate(last, fi.Size()-5); err != nil {
				t.Fatal(err)
			}
			// The cut took the last transaction's commit record: its puts
			// are intact and were acknowledged, so they come back.
			return outcome{lost: 0, back: total, level: "WARN", msg: "no acknowledged event was lost"}
		}},
		{"segment deleted", false, func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome {
			seg := dataSegments(t, d.data)[1]
			os.Remove(seg)
			n := len(h[segNum(seg)])
			return outcome{lost: int64(n), back: total - n, level: "ERROR", msg: "recovery lost acknowledged events"}
		}},
		{"half a segment cut", false, func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome {
			seg := dataSegments(t, d.data)[1]
			fi, _ := os.Stat(seg)
			cut := fi.Size() / 2
			n := lostToCut(t, seg, h[segNum(seg)], cut)
			if err := os.Truncate(seg, cut); err != nil {
				t.Fatal(err)
			}
			return outcome{lost: int64(n), back: total - n, level: "ERROR", msg: "recovery lost acknowledged events"}
		}},
		{"checkpoint deleted and a segment deleted", false, func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome {
			os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
			seg := dataSegments(t, d.data)[1]
			os.Remove(seg)
			n := len(h[segNum(seg)])
			// Without a checkpoint nothing says which events that segment
			// held: the line says so, with its size, rather than a number;
			// every other event comes back.
			return outcome{lost: 0, back: total - n, level: "ERROR", msg: "cannot be counted", uncounted: true}
		}},
		{"checkpoint deleted and half a segment cut", false, func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome {
			os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
			seg := dataSegments(t, d.data)[1]
			fi, _ := os.Stat(seg)
			cut := fi.Size() / 2
			n := lostToCut(t, seg, h[segNum(seg)], cut)
			if err := os.Truncate(seg, cut); err != nil {
				t.Fatal(err)
			}
			// Every event before the cut comes back, those of the
			// transaction it tore too; how many were after it cannot be
			// told.
			return outcome{lost: 0, back: total - n, level: "ERROR", msg: "cannot be counted", uncounted: true}
		}},
		{"flipped bit in a put record and checkpoint deleted", false, func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome {
			os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
			seg := dataSegments(t, d.data)[0]
			p := h[segNum(seg)][7]
			flipByte(t, seg, p.Offset+40)
			return outcome{lost: 1, back: total - 1, level: "ERROR", msg: "recovery lost acknowledged events"}
		}},
		{"crash tore the last transaction", true, func(t *testing.T, d dirs, h map[uint64][]wal.Position) outcome {
			// A crash leaves no empty last segment and no checkpoint at
			// stop, and its write of the last transaction is torn.
			segs, _ := filepath.Glob(filepath.Join(d.data, "*.wal"))
			sort.Strings(segs)
			os.Remove(segs[len(segs)-1])
			last := dataSegments(t, d.data)
			seg := last[len(last)-1]
			fi, _ := os.Stat(seg)
			if err := os.Truncate(seg, fi.Size()-5); err != nil { // into the commit record
				t.Fatal(err)
			}
			return outcome{lost: 0, back: total - 100, level: "INFO", msg: "recovered after a crash", unacked: 100}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirs(t)
			var first logLines
			extra := map[string]string{"capacity": "10000", "transactionCapacity": "100"}
			if tc.ckOff {
				extra["checkpointOnClose"] = "false"
			}
			c := buildLogged(t, d, extra, &first)
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			body := strings.Repeat("b", 1100)
			for tx := range total / 100 {
				evs := testutil.Events("e", 100)
				for i := range evs {
					evs[i].Body = fmt.Appendf(nil, "e%04d-%s", tx*100+i, body)
				}
				if err := testutil.PutCommit(c, evs); err != nil {
					t.Fatal(err)
				}
			}
			h := held(c)
			stop(t, c)
			if n := len(dataSegments(t, d.data)); n < 4 {
				t.Fatalf("only %d segments", n)
			}
			want := tc.damage(t, d, h)

			var logs logLines
			c = buildLogged(t, d, extra, &logs)
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer stop(t, c)
			got := testutil.TakeAll(t, c, total+1, 100, 100*time.Millisecond)
			seen := map[string]bool{}
			prev := ""
			for _, e := range got {
				k := string(e.Body[:5])
				if seen[k] || k <= prev {
					t.Fatalf("event %s given back twice or out of order", k)
				}
				seen[k], prev = true, k
			}
			if len(got) != want.back {
				t.Errorf("%d events given back, want %d", len(got), want.back)
			}
			if n := c.lostEvents.Load(); n != want.lost {
				t.Errorf("RecoveryLostEventCount = %d, want %d", n, want.lost)
			}

			var summaries []map[string]any
			for _, r := range logs.records(t) {
				msg, _ := r["msg"].(string)
				if strings.HasPrefix(msg, "file channel: recover") {
					summaries = append(summaries, r)
				} else if r["level"] != "INFO" {
					t.Errorf("a line besides the summary: %v", r)
				}
			}
			if len(summaries) != 1 {
				t.Fatalf("%d summary lines, want exactly 1:\n%s", len(summaries), logs.String())
			}
			s := summaries[0]
			line, _ := json.Marshal(s)
			t.Logf("%s", line)
			if s["level"] != want.level || !strings.Contains(s["msg"].(string), want.msg) {
				t.Errorf("summary %s %q, want %s %q", s["level"], s["msg"], want.level, want.msg)
			}
			if s["events_lost"] != float64(want.lost) {
				t.Errorf("summary events_lost = %v, want %d", s["events_lost"], want.lost)
			}
			if _, ok := s["uncounted_damaged_bytes"]; ok != want.uncounted {
				t.Errorf("summary uncounted_damaged_bytes present = %v, want %v", ok, want.uncounted)
			}
			if n, _ := s["unacknowledged_events_dropped"].(float64); int(n) != want.unacked {
				t.Errorf("summary unacknowledged_events_dropped = %v, want %d", n, want.unacked)
			}
			if strings.Contains(string(line), "unacknowledged") != (want.unacked > 0) {
				t.Errorf("the summary speaks of unacknowledged events: %s", line)
			}
			if f, _ := s["found"].(string); !strings.Contains(f, d.data) {
				t.Errorf("the summary does not say where: %v", s["found"])
			}
		})
	}
}

// A record damaged after the checkpoint that holds it is found only when
// taken: its event is counted lost, in one line for the take (throttled),
// never one per event.
func TestDamageFoundWhenTaken(t *testing.T) {
	d := newDirs(t)
	var logs logLines
	extra := map[string]string{"cacheBytes": "0"}
	c := buildLogged(t, d, extra, &logs)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	putN(t, c, "z", 100, 10)
	h := held(c)
	stop(t, c)
	seg := dataSegments(t, d.data)[0]
	ps := h[segNum(seg)]
	for _, i := range []int{10, 11, 12, 50} {
		flipByte(t, seg, ps[i].Offset+30)
	}
	logs.Reset()
	c = buildLogged(t, d, extra, &logs)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	got := testutil.TakeAll(t, c, 101, 100, 100*time.Millisecond)
	if len(got) != 96 || c.lostEvents.Load() != 4 {
		t.Fatalf("took %d events, RecoveryLostEventCount %d; want 96 and 4", len(got), c.lostEvents.Load())
	}
	var lines int
	for _, r := range logs.records(t) {
		if r["level"] != "INFO" {
			lines++
			if r["events"] != float64(4) {
				t.Errorf("the line does not count the events: %v", r)
			}
		}
	}
	if lines != 1 {
		t.Fatalf("%d lines about the damage, want 1:\n%s", lines, logs.String())
	}
}
