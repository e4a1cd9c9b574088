package seqsource

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newStress(t *testing.T, props map[string]string) *Stress {
	t.Helper()
	return sourcetest.New(t, NewStress, sourcetest.Env("r1", "stress"), props).(*Stress)
}

// The User Guide's shape: events of size bytes of 0x7F, in batches, until
// maxTotalEvents (the last batch cut to fit), then nothing more.
func TestMaxTotalEvents(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1000, 100, time.Second)
	s := newStress(t, map[string]string{"size": "10", "maxTotalEvents": "25", "batchSize": "10"})
	sourcetest.Start(t, s, pl.Processor)
	got := pl.Drain(t, 25, 5*time.Second)
	for _, e := range got {
		if string(e.Body) != strings.Repeat("\x7f", 10) || len(e.Headers) != 0 {
			t.Fatalf("event %q headers %v, want 10 bytes of 0x7F and no header", e.Body, e.Headers)
		}
	}
	if extra := pl.Take(t, 10, 100*time.Millisecond); len(extra) != 0 {
		t.Fatalf("%d events beyond maxTotalEvents", len(extra))
	}
	if n := s.counters.AppendBatchAccepted.Load(); n != 3 {
		t.Errorf("AppendBatchAcceptedCount %d, want 3 (10, 10, 5)", n)
	}
}

// maxSuccessfulEvents is checked before each batch, as in Flume: with
// batches of 3 and a limit of 7, three batches go.
func TestMaxSuccessfulEvents(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1000, 100, time.Second)
	s := newStress(t, map[string]string{"size": "1", "maxSuccessfulEvents": "7", "batchSize": "3"})
	sourcetest.Start(t, s, pl.Processor)
	pl.Drain(t, 9, 5*time.Second)
	if extra := pl.Take(t, 10, 100*time.Millisecond); len(extra) != 0 {
		t.Fatalf("%d events beyond the ninth", len(extra))
	}
}

// maxEventsPerSecond paces the source: 30 events at 100/s take about 0.3 s
// (a lower bound only: a slow machine may take longer).
func TestMaxEventsPerSecond(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1000, 100, time.Second)
	s := newStress(t, map[string]string{"size": "1", "maxTotalEvents": "30", "maxEventsPerSecond": "100"})
	start := time.Now()
	sourcetest.Start(t, s, pl.Processor)
	pl.Drain(t, 30, 10*time.Second)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("30 events at 100/s arrived in %v", d)
	}
}

type refusing struct{ calls int }

func (r *refusing) Process(context.Context, []event.Event) error {
	r.calls++
	return flow.ErrChannelFull
}

// A refused batch counts towards maxTotalEvents and is not sent again, as
// in Flume.
func TestRefusedBatchesCount(t *testing.T) {
	r := &refusing{}
	s := newStress(t, map[string]string{"maxTotalEvents": "4", "batchSize": "2", "backoffSleepIncrement": "1", "maxBackoffSleep": "2"})
	sourcetest.Start(t, s, r)
	if !testutil.Eventually(func() bool { return !s.worker.Running() || s.counters.ChannelWriteFail.Load() == 2 }, 5*time.Second) {
		t.Fatalf("ChannelWriteFailCount %d, want 2", s.counters.ChannelWriteFail.Load())
	}
	time.Sleep(50 * time.Millisecond)
	if n := s.counters.ChannelWriteFail.Load(); n != 2 {
		t.Fatalf("ChannelWriteFailCount %d, want 2 (two refused batches make the 4 events)", n)
	}
}
