// Package sinktest holds the conformance suite every sink runs, the means
// to make a test downstream refuse or stall (Gate, DirGone), and Start,
// which builds and starts a sink for a test. It is apart from testutil
// because it builds on the memory channel, whose own tests use testutil.
package sinktest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// SinkFactory builds a sink for one test of the sink suite, taking from
// env.Channel, NOT started (the suite starts and stops it), and its
// downstream as the suite sees and steers it (all nil for a sink with no
// observable downstream, such as null).
type SinkFactory func(t *testing.T, env flow.Env) (s flow.Sink, d Downstream)

// RunSinkSuite runs the sink contract of flow.Sink against the sinks
// newSink builds: every event delivered once and in order with the take
// committed, Backoff (not an error, not a hang) on an empty channel, at
// most BatchSize events per Process, Flume's drain counters, a prompt
// Stop; and with a downstream that misbehaves: a refused delivery is an
// error and rolls back (the events stay in the channel and go out once the
// downstream takes them again), a ctx cancelled in the middle of a write
// makes Process return promptly and roll back, and a Stop while deliveries
// fail is prompt and keeps the events in the channel. The contract is
// at-least-once: after a failure the suite asks for every event delivered,
// in the order of first delivery, and allows repeats.
func RunSinkSuite(t *testing.T, newSink SinkFactory) {
	t.Run("DeliversInOrderAndCommits", func(t *testing.T) { sinkDelivers(t, newSink) })
	t.Run("EmptyChannelBacksOff", func(t *testing.T) { sinkEmpty(t, newSink) })
	t.Run("BatchSizeBoundsATake", func(t *testing.T) { sinkBatch(t, newSink) })
	t.Run("RefusedDeliveryRollsBack", func(t *testing.T) { sinkRefused(t, newSink) })
	t.Run("CancelledMidWriteRollsBack", func(t *testing.T) { sinkCancelled(t, newSink) })
	t.Run("StopWhileFailing", func(t *testing.T) { sinkStopFailing(t, newSink) })
}

type sinkFixture struct {
	ch   flow.Channel
	reg  *metrics.Registry
	sink flow.Sink
	ds   Downstream
	// ctx is what a SinkRunner gives Process: it ends only when the sink is
	// stopped, never in the middle of a delivery that is going well.
	ctx     context.Context
	stopped bool
}

func newSinkFixture(t *testing.T, newSink SinkFactory) *sinkFixture {
	t.Helper()
	reg := metrics.NewRegistry("a1")
	chEnv := flow.Env{Agent: "a1", Name: "c1", Type: "memory", Metrics: reg, Logger: slog.New(slog.DiscardHandler)}
	ch, err := memorychannel.New(chEnv, config.FromMap("a1.channels.c1.", map[string]string{
		"capacity": "100000", "transactionCapacity": "10000", "keep-alive": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Stop(context.Background()) })
	env := flow.Env{Agent: "a1", Name: "k1", Metrics: reg, Logger: slog.New(slog.DiscardHandler), Channel: ch}
	s, ds := newSink(t, env)
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &sinkFixture{ch: ch, reg: reg, sink: s, ds: ds, ctx: ctx}
	// Runs before the downstream's own cleanups (registered by newSink):
	// a stalled downstream lets go, then the sink stops.
	t.Cleanup(func() {
		cancel()
		if ds.Accept != nil {
			ds.Accept()
		}
		if f.stopped {
			return
		}
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		start := time.Now()
		if err := s.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Stop took %v", d)
		}
	})
	return f
}

// processAll calls Process until the channel is empty and the sink reports
// Backoff, with a ctx that ends only with the test, as a runner's does.
func (f *sinkFixture) processAll(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		st, err := f.sink.Process(ctx)
		if err != nil {
			t.Logf("Process: %v (retrying)", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if st == flow.Backoff && f.ch.Len() == 0 {
			return
		}
	}
	t.Fatalf("channel still holds %d events after 30 s", f.ch.Len())
}

// delivered waits up to 10 s for at least n bodies and returns what the
// downstream has.
func (f *sinkFixture) delivered(n int) []string {
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		if got = f.ds.Delivered(); len(got) >= n && len(firstDeliveries(got)) >= n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return got
}

// wantAtLeastOnce checks every event was delivered, in order of first
// delivery; repeats are allowed (at-least-once after a failure).
func (f *sinkFixture) wantAtLeastOnce(t *testing.T, events []event.Event) {
	t.Helper()
	if f.ds.Delivered == nil {
		return
	}
	want := testutil.Bodies(events)
	all := f.delivered(len(want))
	got := firstDeliveries(all)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d distinct bodies (first %q) of %d in all, want %d in order (first %q)",
			len(got), first(got), len(all), len(want), want[0])
	}
	if len(all) > len(want) {
		t.Logf("%d bodies delivered again after the failure (at-least-once)", len(all)-len(want))
	}
}

// firstDeliveries is s without repeats, each body where it first appeared.
func firstDeliveries(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := make([]string, 0, len(s))
	for _, b := range s {
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

// skipUnless skips the test when the downstream lacks what it needs.
func (f *sinkFixture) skipUnless(t *testing.T, have bool, what string) {
	t.Helper()
	if !have {
		msg := "the downstream of this sink cannot " + what
		if f.ds.Note != "" {
			msg += ": " + f.ds.Note
		}
		t.Skip(msg)
	}
}

func (f *sinkFixture) counter(name string) string {
	var v string
	for _, s := range f.reg.Sets() {
		if s.Kind == metrics.KindSink && s.Name == "k1" {
			v = testutil.Metric(s, name)
		}
	}
	return v
}

func sinkDelivers(t *testing.T, newSink SinkFactory) {
	f := newSinkFixture(t, newSink)
	const n = 1234
	events := testutil.Events("sink-suite-", n)
	if err := testutil.PutCommit(f.ch, events); err != nil {
		t.Fatal(err)
	}
	f.processAll(t)
	if got := f.counter("EventDrainSuccessCount"); got != fmt.Sprint(n) {
		t.Errorf("EventDrainSuccessCount = %s, want %d", got, n)
	}
	if f.ds.Delivered == nil {
		return
	}
	// Nothing failed, so nothing may be delivered twice.
	want := testutil.Bodies(events)
	if got := f.delivered(n); !slices.Equal(got, want) {
		t.Fatalf("delivered %d bodies (first %q), want %d in order (first %q)", len(got), first(got), n, want[0])
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func sinkEmpty(t *testing.T, newSink SinkFactory) {
	f := newSinkFixture(t, newSink)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	st, err := f.sink.Process(ctx)
	if err != nil || st != flow.Backoff {
		t.Fatalf("Process on an empty channel = %v, %v; want BACKOFF, nil", st, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Process on an empty channel took %v with a 100 ms context", d)
	}
}

func sinkBatch(t *testing.T, newSink SinkFactory) {
	f := newSinkFixture(t, newSink)
	bs, ok := f.sink.(flow.BatchSizer)
	if !ok {
		t.Skip("sink does not report a batch size")
	}
	size := bs.BatchSize()
	if err := testutil.PutCommit(f.ch, testutil.Events("batch-", 3*size)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.sink.Process(ctx); err != nil {
		t.Fatal(err)
	}
	if left := f.ch.Len(); left != 2*size {
		t.Fatalf("one Process left %d events of %d, want %d (batch size %d)", left, 3*size, 2*size, size)
	}
}

// sinkRefused: a downstream that refuses makes Process fail and roll back:
// the events stay in the channel, none counts as drained, and once the
// downstream takes deliveries again every one arrives.
func sinkRefused(t *testing.T, newSink SinkFactory) {
	f := newSinkFixture(t, newSink)
	f.skipUnless(t, f.ds.Refuse != nil, "refuse")
	f.ds.Refuse()
	const n = 250
	events := testutil.Events("refused-", n)
	if err := testutil.PutCommit(f.ch, events); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
		st, err := f.sink.Process(ctx)
		cancel()
		if err == nil {
			t.Fatalf("Process with the downstream refusing = %v, nil; want an error", st)
		}
		if left := f.ch.Len(); left != n {
			t.Fatalf("after a refused delivery the channel holds %d events, want all %d back (err %v)", left, n, err)
		}
	}
	if got := f.counter("EventDrainSuccessCount"); got != "0" {
		t.Errorf("EventDrainSuccessCount = %s after refused deliveries, want 0", got)
	}
	f.ds.Accept()
	f.processAll(t)
	f.wantAtLeastOnce(t, events)
}

// sinkCancelled: a ctx cancelled while the downstream holds a delivery
// unanswered makes Process return promptly and roll the batch back.
func sinkCancelled(t *testing.T, newSink SinkFactory) {
	f := newSinkFixture(t, newSink)
	f.skipUnless(t, f.ds.Stall != nil, "hold a delivery unanswered")
	f.ds.Stall()
	const n = 50
	events := testutil.Events("cancelled-", n)
	if err := testutil.PutCommit(f.ch, events); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := f.sink.Process(ctx)
		res <- err
	}()
	time.Sleep(300 * time.Millisecond) // the write is under way, held by the downstream
	cancel()
	select {
	case err := <-res:
		t.Logf("Process cut by its ctx: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Process did not return within 5 s of its ctx being cancelled in the middle of a write")
	}
	if left := f.ch.Len(); left != n {
		t.Fatalf("a write cut by its ctx left %d events in the channel, want the whole batch (%d) back", left, n)
	}
	if got := f.counter("EventDrainSuccessCount"); got != "0" {
		t.Errorf("EventDrainSuccessCount = %s after a cut write, want 0", got)
	}
	f.ds.Accept()
	f.processAll(t)
	f.wantAtLeastOnce(t, events)
}

// sinkStopFailing: while every delivery fails, the runner's last Process
// ends by its ctx and Stop follows; both are prompt, and the events stay in
// the channel.
func sinkStopFailing(t *testing.T, newSink SinkFactory) {
	f := newSinkFixture(t, newSink)
	f.skipUnless(t, f.ds.Refuse != nil, "refuse")
	f.ds.Refuse()
	const n = 100
	if err := testutil.PutCommit(f.ch, testutil.Events("stop-", n)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	_, err := f.sink.Process(ctx)
	cancel()
	if err == nil {
		t.Fatal("Process with the downstream refusing succeeded")
	}
	ctx, cancel = context.WithCancel(f.ctx)
	res := make(chan error, 1)
	go func() {
		_, err := f.sink.Process(ctx)
		res <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-res:
		t.Logf("failing Process cut by its ctx: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("a failing Process did not return within 5 s of its ctx being cancelled")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	start := time.Now()
	f.stopped = true
	if err := f.sink.Stop(sctx); err != nil {
		t.Logf("Stop while failing: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop while failing took %v with a 2 s ctx", d)
	}
	if left := f.ch.Len(); left != n {
		t.Fatalf("after a Stop while failing the channel holds %d events, want all %d", left, n)
	}
}
