// Package sinktest holds the conformance suite every sink runs, and Start,
// which builds and starts a sink for a test. It is apart
// from testutil because it builds on the memory channel, whose own tests use
// testutil.
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
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// SinkFactory builds a sink for one test of the sink suite, taking from
// env.Channel, NOT started (the suite starts and stops it). delivered
// returns the bodies the downstream has received so far, in arrival order,
// or is nil for a sink with no observable downstream (null, logger).
type SinkFactory func(t *testing.T, env flow.Env) (s flow.Sink, delivered func() []string)

// RunSinkSuite runs the sink contract of flow.Sink against the sinks
// newSink builds: every event delivered once and in order with the take
// committed, Backoff (not an error, not a hang) on an empty channel, at
// most BatchSize events per Process, Flume's drain counters, and a prompt
// Stop.
func RunSinkSuite(t *testing.T, newSink SinkFactory) {
	t.Run("DeliversInOrderAndCommits", func(t *testing.T) { sinkDelivers(t, newSink) })
	t.Run("EmptyChannelBacksOff", func(t *testing.T) { sinkEmpty(t, newSink) })
	t.Run("BatchSizeBoundsATake", func(t *testing.T) { sinkBatch(t, newSink) })
}

type sinkFixture struct {
	ch        flow.Channel
	reg       *metrics.Registry
	sink      flow.Sink
	delivered func() []string
}

func newSinkFixture(t *testing.T, newSink SinkFactory) *sinkFixture {
	t.Helper()
	reg := metrics.NewRegistry("a1")
	chEnv := flow.Env{Agent: "a1", Name: "c1", Type: "memory", Metrics: reg, Logger: slog.New(slog.DiscardHandler)}
	ch, err := memory.New(chEnv, config.FromMap("a1.channels.c1.", map[string]string{
		"capacity": "100000", "transactionCapacity": "10000", "keep-alive": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Stop(context.Background()) })
	env := flow.Env{Agent: "a1", Name: "k1", Metrics: reg, Logger: slog.New(slog.DiscardHandler), Channel: ch}
	s, delivered := newSink(t, env)
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Stop took %v", d)
		}
	})
	return &sinkFixture{ch: ch, reg: reg, sink: s, delivered: delivered}
}

// process calls Process until the channel is empty and the sink reports Backoff.
func (f *sinkFixture) processAll(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		st, err := f.sink.Process(ctx)
		cancel()
		if err != nil {
			t.Logf("Process: %v (retrying)", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if st == flow.Backoff && f.ch.Len() == 0 {
			return
		}
	}
	t.Fatalf("channel still holds %d events after 20 s", f.ch.Len())
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
	if f.delivered == nil {
		return
	}
	want := testutil.Bodies(events)
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		if got = f.delivered(); len(got) >= n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
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
