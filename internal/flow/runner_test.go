package flow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
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
