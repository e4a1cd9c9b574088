package seqsource

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newSource(t *testing.T, props map[string]string) *Source {
	t.Helper()
	return sourcetest.New(t, New, sourcetest.Env("r1", "seq"), props).(*Source)
}

func start(t *testing.T, s flow.Source, p flow.Processor) {
	t.Helper()
	sourcetest.Start(t, s, p)
}

func TestCountsToTotalEvents(t *testing.T) {
	for _, bs := range []int{1, 7, 100} {
		t.Run("batchSize="+strconv.Itoa(bs), func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 1000, 100, time.Second)
			s := newSource(t, map[string]string{"batchSize": strconv.Itoa(bs), "totalEvents": "250"})
			start(t, s, pl.Processor)
			got := sourcetest.Bodies(pl.Drain(t, 250, 5*time.Second))
			if want := sourcetest.Seq("", 250); !slices.Equal(got, want) {
				t.Fatalf("bodies = %v, want 0..249", got)
			}
			// Nothing beyond totalEvents.
			if extra := pl.Take(t, 10, 50*time.Millisecond); len(extra) != 0 {
				t.Fatalf("got %d events beyond totalEvents", len(extra))
			}
			if !testutil.Eventually(func() bool { return s.counters.EventAccepted.Load() == 250 }, time.Second) {
				t.Errorf("EventAcceptedCount = %d, want 250", s.counters.EventAccepted.Load())
			}
			wantBatches := int64(0)
			if bs > 1 {
				wantBatches = int64((250 + bs - 1) / bs)
			}
			if n := s.counters.AppendBatchAccepted.Load(); n != wantBatches {
				t.Errorf("AppendBatchAcceptedCount = %d, want %d", n, wantBatches)
			}
		})
	}
}

// A full channel makes puts fail; the source retries the same bodies, so the
// sequence the sink sees has neither gaps nor duplicates.
func TestRetryKeepsSequence(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 10, 10, 0) // keep-alive 0: a commit that does not fit fails at once
	s := newSource(t, map[string]string{
		"batchSize": "4", "totalEvents": "60",
		"backoffSleepIncrement": "1", "maxBackoffSleep": "4",
	})
	start(t, s, pl.Processor)
	// Let the channel fill before draining, so puts fail.
	if !testutil.Eventually(func() bool { return s.counters.ChannelWriteFail.Load() > 0 }, 5*time.Second) {
		t.Fatal("the source never hit a full channel")
	}
	var got []string
	for len(got) < 60 {
		got = append(got, sourcetest.Bodies(pl.Take(t, 3, 5*time.Second))...)
	}
	if want := sourcetest.Seq("", 60); !slices.Equal(got, want) {
		t.Fatalf("bodies = %v, want 0..59 in order", got)
	}
	if !testutil.Eventually(func() bool { return s.counters.EventAccepted.Load() == 60 }, time.Second) {
		t.Errorf("EventAcceptedCount = %d, want 60", s.counters.EventAccepted.Load())
	}
}

func TestStopWhileRetrying(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 2, 2, 0)
	s := newSource(t, map[string]string{"batchSize": "2", "backoffSleepIncrement": "10000", "maxBackoffSleep": "10000"})
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(func() bool { return s.counters.ChannelWriteFail.Load() > 0 }, 5*time.Second) {
		t.Fatal("the source never hit a full channel")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop during a 10 s backoff: %v", err)
	}
}

func TestBadProperties(t *testing.T) {
	tests := []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{"batchSize": "0"}, "batchSize: 0 is out of range"},
		{map[string]string{"totalEvents": "x"}, `totalEvents: "x" is not a whole number`},
		{map[string]string{"totalEvents": "-1"}, "totalEvents: -1 is negative"},
		{map[string]string{"backoffSleepIncrement": "0"}, "backoffSleepIncrement: must be a positive"},
	}
	for _, tt := range tests {
		p := config.FromMap("a1.sources.r1.", tt.props)
		if _, err := New(sourcetest.Env("r1", "seq"), p); err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("props %v: err = %v, want %q", tt.props, err, tt.want)
		}
	}
}
