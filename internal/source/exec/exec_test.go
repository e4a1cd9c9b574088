package execsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newSource(t *testing.T, env flow.Env, props map[string]string) *Source {
	t.Helper()
	p := config.FromMap("a1.sources.r1.", props)
	src, err := New(env, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	return src.(*Source)
}

func start(t *testing.T, s flow.Source, p flow.Processor) {
	t.Helper()
	if err := s.Start(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, s) })
}

func stop(t *testing.T, s flow.Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

func TestLinesBecomeEvents(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  []string
	}{
		{"no shell", map[string]string{"command": "echo hello   world"}, []string{"hello world"}},
		// Java's readLine ends lines at \n, \r\n and \r; a last line without
		// an end is a line.
		{"line ends", map[string]string{"shell": "/bin/sh -c", "command": `printf 'a\nb\r\nc\rd\n\ne'`}, []string{"a", "b", "c", "d", "", "e"}},
		{"crlf split across writes", map[string]string{"shell": "/bin/sh -c", "command": `printf 'a\r'; sleep 0.05; printf '\nb\n'`}, []string{"a", "b"}},
		{"small batches", map[string]string{"shell": "/bin/sh -c", "command": "seq 1 25", "batchSize": "4"}, sourcetest.Seq("", 26)[1:]},
		{"iso-8859-1 bytes pass through", map[string]string{"shell": "/bin/sh -c", "command": `printf 'caf\351\n'`, "charset": "ISO-8859-1"}, []string{"caf\xe9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			s := newSource(t, sourcetest.Env("r1", "exec"), tt.props)
			start(t, s, pl.Processor)
			got := pl.Drain(t, len(tt.want), 5*time.Second)
			if !slices.Equal(sourcetest.Bodies(got), tt.want) {
				t.Fatalf("bodies = %q, want %q", sourcetest.Bodies(got), tt.want)
			}
			if extra := pl.Take(t, 10, 50*time.Millisecond); len(extra) != 0 {
				t.Errorf("extra events %q", sourcetest.Bodies(extra))
			}
			if !testutil.Eventually(func() bool { return s.counters.EventAccepted.Load() == int64(len(tt.want)) }, time.Second) {
				t.Errorf("EventAcceptedCount = %d, want %d", s.counters.EventAccepted.Load(), len(tt.want))
			}
		})
	}
}

func TestRestart(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, sourcetest.Env("r1", "exec"), map[string]string{
		"command": "echo run", "restart": "true", "restartThrottle": "10",
	})
	start(t, s, pl.Processor)
	got := sourcetest.Bodies(pl.Drain(t, 3, 5*time.Second))
	if !slices.Equal(got, []string{"run", "run", "run"}) {
		t.Fatalf("bodies = %q, want the command's line from three runs", got)
	}
}

func TestNoRestart(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, sourcetest.Env("r1", "exec"), map[string]string{"command": "echo once", "restartThrottle": "1"})
	start(t, s, pl.Processor)
	if got := sourcetest.Bodies(pl.Drain(t, 1, 5*time.Second)); !slices.Equal(got, []string{"once"}) {
		t.Fatalf("bodies = %q", got)
	}
	if extra := pl.Take(t, 10, 200*time.Millisecond); len(extra) != 0 {
		t.Fatalf("the command ran again without restart: %q", sourcetest.Bodies(extra))
	}
}

func TestStderr(t *testing.T) {
	for _, logIt := range []bool{true, false} {
		t.Run("logStdErr="+strconv.FormatBool(logIt), func(t *testing.T) {
			var logs testutil.LogBuffer
			env := sourcetest.Env("r1", "exec")
			env.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			s := newSource(t, env, map[string]string{
				"shell": "/bin/sh -c", "command": "echo oops-one >&2; echo out; printf oops-two >&2",
				"logStdErr": strconv.FormatBool(logIt),
			})
			start(t, s, pl.Processor)
			if got := sourcetest.Bodies(pl.Drain(t, 1, 5*time.Second)); !slices.Equal(got, []string{"out"}) {
				t.Fatalf("bodies = %q, want only stdout", got)
			}
			ok := testutil.Eventually(func() bool { return strings.Contains(logs.String(), "command exited") }, 5*time.Second)
			if !ok {
				t.Fatalf("no exit logged: %s", logs.String())
			}
			for _, w := range []string{"text=oops-one", "text=oops-two"} {
				if strings.Contains(logs.String(), w) != logIt {
					t.Errorf("log has %q: %v, want %v\n%s", w, !logIt, logIt, logs.String())
				}
			}
		})
	}
}

// A full channel holds the command back (the pipe fills and it blocks), and
// every line arrives once the channel drains; none is lost.
func TestBackpressure(t *testing.T) {
	const lines = 30000 // ~170 KB, more than a pipe buffer
	pl := sourcetest.NewPipeline(t, 20, 20, 20*time.Millisecond)
	s := newSource(t, sourcetest.Env("r1", "exec"), map[string]string{
		"shell": "/bin/sh -c", "command": "seq 1 " + strconv.Itoa(lines),
	})
	start(t, s, pl.Processor)
	if !testutil.Eventually(func() bool { return s.counters.ChannelWriteFail.Load() >= 2 }, 5*time.Second) {
		t.Fatal("the source never hit the full channel")
	}
	got := sourcetest.Bodies(pl.Drain(t, lines, 30*time.Second))
	if want := sourcetest.Seq("", lines+1)[1:]; !slices.Equal(got, want) {
		t.Fatalf("got %d lines, want 1..%d in order", len(got), lines)
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// Stop ends the command and everything in its process group.
func TestStopKillsProcessGroup(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, sourcetest.Env("r1", "exec"), map[string]string{
		"shell": "/bin/sh -c", "command": "sleep 60 & echo $!; echo $$; wait",
	})
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	got := sourcetest.Bodies(pl.Drain(t, 2, 5*time.Second))
	if len(got) != 2 {
		t.Fatalf("got %q, want two pids", got)
	}
	var pids []int
	for _, g := range got {
		pid, err := strconv.Atoi(g)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	begin := time.Now()
	stop(t, s)
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("stop took %v", d)
	}
	for _, pid := range pids {
		// Reaped or not, a killed process no longer runs: poll briefly for
		// the background sleep, whose parent (the shell) reaps it.
		if !testutil.Eventually(func() bool { return !alive(pid) || zombie(pid) }, 2*time.Second) {
			t.Errorf("process %d still runs after stop", pid)
		}
	}
}

// zombie reports whether pid has exited but is not yet reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, syscall.ENOENT)
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func TestMissingCommandKeepsRunning(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, sourcetest.Env("r1", "exec"), map[string]string{"command": "/nonexistent/command", "restart": "true", "restartThrottle": "10"})
	start(t, s, pl.Processor)
	if extra := pl.Take(t, 10, 100*time.Millisecond); len(extra) != 0 {
		t.Fatalf("events from a missing command: %q", sourcetest.Bodies(extra))
	}
}

func TestBadProperties(t *testing.T) {
	tests := []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{}, "a1.sources.r1.command: missing required property"},
		{map[string]string{"command": "x", "charset": "UTF-16"}, `charset "UTF-16" is not supported`},
		{map[string]string{"command": "x", "batchSize": "0"}, "batchSize: 0 is out of range"},
		{map[string]string{"command": "x", "restart": "maybe"}, `"maybe" is not a boolean`},
		{map[string]string{"command": "x", "restartThrottle": "-1"}, "restartThrottle: must not be negative"},
	}
	for _, tt := range tests {
		p := config.FromMap("a1.sources.r1.", tt.props)
		if _, err := New(sourcetest.Env("r1", "exec"), p); err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("props %v: err = %v, want %q", tt.props, err, tt.want)
		}
	}
}

// TestRestartKeepsBatchingRules: each run of a restarted command gets its
// own line splitter (a last line without an end is not glued to the next
// run's first), and a full channel holds the output across runs without
// losing or repeating a line.
func TestRestartKeepsBatchingRules(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 3, 3, 20*time.Millisecond)
	s := newSource(t, sourcetest.Env("r1", "exec"), map[string]string{
		"shell": "/bin/sh -c", "command": `printf 'x\ny\r\nz'`, "restart": "true", "restartThrottle": "1", "batchSize": "2",
	})
	start(t, s, pl.Processor)
	var got []string
	for len(got) < 12 {
		got = append(got, sourcetest.Bodies(pl.Take(t, 1, 5*time.Second))...)
		time.Sleep(30 * time.Millisecond) // slower than keep-alive: puts fail and are retried
	}
	for i, b := range got {
		if want := []string{"x", "y", "z"}[i%3]; b != want {
			t.Fatalf("event %d = %q, want %q (all: %q)", i, b, want, got)
		}
	}
	if s.counters.ChannelWriteFail.Load() == 0 {
		t.Error("the channel was never full; the test did not exercise backpressure")
	}
}

// sizeProc records batch sizes; the first Process waits a little, so the
// command's output piles up in the pipe. TxLimit reports the channels'
// transactionCapacity (flow.TxLimiter).
type sizeProc struct {
	mu    sync.Mutex
	sizes []int
	total int
}

func (p *sizeProc) TxLimit() int { return 1000 }

func (p *sizeProc) Process(_ context.Context, evs []event.Event) error {
	p.mu.Lock()
	first := len(p.sizes) == 0
	p.sizes = append(p.sizes, len(evs))
	p.total += len(evs)
	p.mu.Unlock()
	if first {
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// With batchSize left at its default (20) a batch grows to the channels'
// transactionCapacity while lines are already in the pipe
// (flow.Batching); a batchSize that is set stays the maximum.
func TestBatchGrowsToTransactionCapacity(t *testing.T) {
	for _, tc := range []struct {
		props    map[string]string
		min, max int // bounds of the largest batch
	}{
		{map[string]string{}, 21, 1000},
		{map[string]string{"batchSize": "20"}, 20, 20},
	} {
		props := map[string]string{"shell": "/bin/sh -c", "command": "sleep 0.05; seq 1 3000"}
		maps.Copy(props, tc.props)
		s := newSource(t, sourcetest.Env("r1", "exec"), props)
		p := &sizeProc{}
		start(t, s, p)
		if !testutil.Eventually(func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.total == 3000 }, 10*time.Second) {
			t.Fatalf("%v: the lines did not all arrive", tc.props)
		}
		stop(t, s)
		p.mu.Lock()
		m := slices.Max(p.sizes)
		p.mu.Unlock()
		if m < tc.min || m > tc.max {
			t.Errorf("%v: largest batch %d lines (batches %v), want %d to %d", tc.props, m, p.sizes, tc.min, tc.max)
		}
	}
}
