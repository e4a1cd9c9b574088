package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestRunnerDeliversAndDrains(t *testing.T) {
	ch := newMem(t, "c1", 10000, 100, "0.1")
	w := &recorder{}
	s, _, _ := newSink(t, ch, w, 100)
	r := flow.NewSinkRunner("k1", s, quietLog)
	r.Start()
	r.Start() // no second loop
	for range 20 {
		if err := testutil.PutCommit(ch, events("e", 50)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx, ch); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if n := len(w.all()); n != 1000 || ch.Len() != 0 {
		t.Fatalf("delivered %d, channel holds %d", n, ch.Len())
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRunnerRetriesAfterErrors(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	w := &recorder{failNext: 2}
	s, _, _ := newSink(t, ch, w, 100)
	r := flow.NewSinkRunner("k1", s, quietLog)
	if err := testutil.PutCommit(ch, events("e", 10)); err != nil {
		t.Fatal(err)
	}
	r.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx, ch); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if got := w.all(); len(got) != 10 || got[0] != "e0" {
		t.Fatalf("delivered %q", got)
	}
	_ = r.Stop(ctx)
}

func TestRunnerDrainGivesUpAtDeadline(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	w := &recorder{failNext: 1 << 30}
	s, _, _ := newSink(t, ch, w, 100)
	r := flow.NewSinkRunner("k1", s, quietLog)
	if err := testutil.PutCommit(ch, events("e", 10)); err != nil {
		t.Fatal(err)
	}
	r.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := r.Drain(ctx, ch); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a failing sink: %v", err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ch.Len() != 10 {
		t.Fatalf("undelivered events left the channel: %d remain", ch.Len())
	}
}

// blockingSink waits in Process until its ctx is cancelled, like a sink
// waiting on an empty channel or a slow downstream.
type blockingSink struct{ calls atomic.Int32 }

func (b *blockingSink) Start(context.Context) error { return nil }
func (b *blockingSink) Stop(context.Context) error  { return nil }
func (b *blockingSink) Process(ctx context.Context) (flow.Status, error) {
	b.calls.Add(1)
	<-ctx.Done()
	return flow.Backoff, nil
}

func TestRunnerStopCancelsProcess(t *testing.T) {
	b := &blockingSink{}
	r := flow.NewSinkRunner("k1", b, quietLog)
	r.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestRunnerNeverStarted(t *testing.T) {
	r := flow.NewSinkRunner("k1", &blockingSink{}, nil)
	if err := r.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestRunnerHealth: a sink whose every delivery fails is reported after the
// grace period, with its error, and healthy again after one delivery.
func TestRunnerHealth(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	w := &recorder{failNext: 1 << 30}
	s, _, _ := newSink(t, ch, w, 100)
	r := flow.NewSinkRunner("k1", s, quietLog)
	r.HealthGrace = 300 * time.Millisecond
	if err := testutil.PutCommit(ch, events("e", 10)); err != nil {
		t.Fatal(err)
	}
	r.Start()
	defer r.Stop(context.Background())
	time.Sleep(100 * time.Millisecond)
	if err := r.Health(); err != nil {
		t.Fatalf("unhealthy within the grace period: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Health() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	err := r.Health()
	if err == nil || !errors.Is(err, errDown) && !strings.Contains(err.Error(), errDown.Error()) {
		t.Fatalf("after the grace period: %v, want the sink's error", err)
	}
	w.mu.Lock()
	w.failNext = 0
	w.mu.Unlock()
	for r.Health() != nil && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.Health(); err != nil {
		t.Fatalf("still unhealthy after deliveries resumed: %v", err)
	}
	if got := w.all(); len(got) != 10 {
		t.Fatalf("delivered %d of 10", len(got))
	}
}

// scriptSink fails its Process calls with the errors queued in errs, then
// finds the channel empty.
type scriptSink struct {
	mu    sync.Mutex
	errs  []error
	calls int
}

func (s *scriptSink) Start(context.Context) error { return nil }
func (s *scriptSink) Stop(context.Context) error  { return nil }
func (s *scriptSink) Process(ctx context.Context) (flow.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(s.errs) == 0 {
		return flow.Backoff, nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return flow.Ready, err
}

func (s *scriptSink) called() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// The runner tells a sink's failure streak once: its first failure, the
// summary of the rest, then "sink delivering again" with how long it
// lasted, and nothing after it. A failure the sink told in its own streak
// (logthrottle.Reported) is not told again at WARN.
func TestRunnerTellsAStreakOnce(t *testing.T) {
	for _, reported := range []bool{false, true} {
		t.Run(fmt.Sprintf("reported=%v", reported), func(t *testing.T) {
			logs := &testutil.LogBuffer{}
			log := slog.New(slog.NewTextHandler(logs, nil))
			s := &scriptSink{}
			var own logthrottle.Streak // the sink's own streak
			own.Log = slog.New(slog.DiscardHandler)
			for i := range 3 {
				err := fmt.Errorf("connect: refused %d", i)
				if reported {
					err = own.Fail(err)
				}
				s.errs = append(s.errs, err)
			}
			r := flow.NewSinkRunner("k1", s, log)
			r.Start()
			testutil.WaitFor(t, 10*time.Second, "the sink called past its last failure", func() bool { return s.called() > 3 }) // past the last failure
			if err := r.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if l != "" {
					_, l, _ = strings.Cut(l, " level=")
					got = append(got, regexp.MustCompile(`(failing_for|recovered_after)=\S+`).ReplaceAllString(l, "$1=D"))
				}
			}
			want := []string{
				`WARN msg="sink failed; events stay in the channel and are retried" sink=k1 retry_in=100ms err="connect: refused 0"`,
				`WARN msg="sink failed; events stay in the channel and are retried (repeated)" sink=k1 retry_in=400ms err="connect: refused 2" failures=3 failing_for=D`,
				`INFO msg="sink delivering again" sink=k1 recovered_after=D failures=3`,
			}
			if reported {
				want = nil
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// slowWriter's deliveries never finish: each waits until its context ends.
type slowWriter struct{}

func (slowWriter) Write(ctx context.Context, _ []event.Event) error {
	<-ctx.Done()
	return ctx.Err()
}

// A drain cut off by its deadline tells the channel first: the batch the
// sink was delivering is counted in flight (the downstream may have it),
// the rest as lost.
func TestRunnerDrainDeadlineMarksInFlight(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	s, _, _ := newSink(t, ch, slowWriter{}, 100)
	r := flow.NewSinkRunner("k1", s, quietLog)
	if err := testutil.PutCommit(ch, events("a", 100)); err != nil {
		t.Fatal(err)
	}
	if err := testutil.PutCommit(ch, events("b", 50)); err != nil {
		t.Fatal(err)
	}
	r.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := r.Drain(ctx, ch); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a sink that never finishes: %v", err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	lost, inFlight := ch.(interface{ Loss() (int, int) }).Loss()
	if lost != 50 || inFlight != 100 {
		t.Fatalf("Loss() = %d lost, %d in flight; want 50 (never taken) and 100 (the batch being delivered)", lost, inFlight)
	}
}
