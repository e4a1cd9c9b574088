package logthrottle

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines is a concurrency-safe log destination.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lines) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.TrimSpace(w.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestBurstThenSummary(t *testing.T) {
	out := &lines{}
	l := slog.New(slog.NewTextHandler(out, nil))
	th := New(200*time.Millisecond, 2)
	for i := 0; i < 500; i++ {
		th.Log(l, slog.LevelWarn, "bad frame", "bad frame", "peer", "10.0.0.1:5")
	}
	got := out.get()
	if len(got) != 2 {
		t.Fatalf("right after 500 messages: %d lines, want the burst of 2:\n%s", len(got), strings.Join(got, "\n"))
	}
	// Nothing more arrives: the held-back count must still be told.
	deadline := time.Now().Add(5 * time.Second)
	for len(out.get()) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got = out.get()
	if len(got) != 3 || !strings.Contains(got[2], "suppressed=498") || !strings.Contains(got[2], "peer=10.0.0.1:5") {
		t.Fatalf("want a third line summarising 498 held back, got:\n%s", strings.Join(got, "\n"))
	}
}

func TestKeysAreIndependent(t *testing.T) {
	out := &lines{}
	l := slog.New(slog.NewTextHandler(out, nil))
	th := New(time.Hour, 1)
	th.Log(l, slog.LevelWarn, "a", "first kind")
	th.Log(l, slog.LevelWarn, "a", "first kind")
	th.Log(l, slog.LevelWarn, "b", "second kind")
	if got := out.get(); len(got) != 2 {
		t.Fatalf("want one line per key, got:\n%s", strings.Join(got, "\n"))
	}
}

func TestSteadyStreamOneLinePerInterval(t *testing.T) {
	out := &lines{}
	l := slog.New(slog.NewTextHandler(out, nil))
	th := New(100*time.Millisecond, 1)
	stop := time.Now().Add(550 * time.Millisecond)
	n := 0
	for time.Now().Before(stop) {
		th.Log(l, slog.LevelWarn, "k", "again")
		n++
		time.Sleep(time.Millisecond)
	}
	time.Sleep(250 * time.Millisecond) // let the last summary out
	got := out.get()
	// About one line per 100 ms over 550 ms, plus the final summary; far
	// fewer than the messages sent. The bound is loose for a busy machine.
	if len(got) < 3 || len(got) > 12 {
		t.Fatalf("%d messages over 550 ms gave %d lines, want about 6-7:\n%s", n, len(got), strings.Join(got, "\n"))
	}
	// A summary line ("(repeated)") stands for messages already in its
	// count; every other line is one message.
	var total, messages int64
	for _, line := range got {
		if !strings.Contains(line, "(repeated)") {
			messages++
		}
		if i := strings.Index(line, "suppressed="); i >= 0 {
			var v int64
			for _, c := range line[i+len("suppressed="):] {
				if c < '0' || c > '9' {
					break
				}
				v = v*10 + int64(c-'0')
			}
			total += v
		}
	}
	if total+messages != int64(n) {
		t.Fatalf("message lines (%d) plus suppressed counts (%d) = %d, want every message accounted for (%d)", messages, total, total+messages, n)
	}
}

func TestDisabledLevelCostsNothing(t *testing.T) {
	out := &lines{}
	l := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelError}))
	th := New(time.Millisecond, 1)
	th.Log(l, slog.LevelWarn, "k", "hidden")
	time.Sleep(20 * time.Millisecond)
	if got := out.get(); len(got) != 0 {
		t.Fatalf("a disabled level logged: %v", got)
	}
}

// A component that stops flushes its throttle: the held-back count comes out
// then, once, and no timer writes for it afterwards.
func TestFlushWritesPendingNow(t *testing.T) {
	out := &lines{}
	l := slog.New(slog.NewTextHandler(out, nil))
	th := New(100*time.Millisecond, 1)
	for i := 0; i < 10; i++ {
		th.Log(l, slog.LevelWarn, "a", "sink failed", "sink", "k1")
	}
	th.Log(l, slog.LevelWarn, "b", "other")
	th.Flush()
	got := out.get()
	if len(got) != 3 || !strings.Contains(got[2], "suppressed=9") || !strings.Contains(got[2], "(repeated)") {
		t.Fatalf("want the burst of key a, key b, then a's summary of 9 at Flush, got:\n%s", strings.Join(got, "\n"))
	}
	time.Sleep(250 * time.Millisecond) // past the interval: the stopped timer must not write again
	if again := out.get(); len(again) != 3 {
		t.Fatalf("lines after Flush:\n%s", strings.Join(again[3:], "\n"))
	}
	th.Flush() // nothing pending: writes nothing
	if again := out.get(); len(again) != 3 {
		t.Fatalf("a second Flush wrote:\n%s", strings.Join(again[3:], "\n"))
	}
}
