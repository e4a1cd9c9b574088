package seqsource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// generator is what the seq and stress sources share: the goroutine that
// Start begins and Stop ends, Flume's source counters, and how a refused
// batch is counted and waited after.
type generator struct {
	env         flow.Env
	batchSize   int
	backoffStep time.Duration // Flume's backoffSleepIncrement
	backoffMax  time.Duration // Flume's maxBackoffSleep
	counters    *metrics.SourceCounters
	run         func(ctx context.Context, p flow.Processor)

	worker flow.Worker // the generating goroutine
}

// BatchSize reports batchSize, so the agent can check it against the
// channels' transactionCapacity.
func (g *generator) BatchSize() int { return g.batchSize }

// GeneratesEvents reports that the source makes its events itself: nothing
// comes in, so the status page shows only what it puts out.
func (g *generator) GeneratesEvents() bool { return true }

// Start begins generating events in a goroutine that Stop ends.
func (g *generator) Start(_ context.Context, p flow.Processor) error {
	if g.worker.Running() {
		return fmt.Errorf("%s %s: already started", g.env.Type, g.env.Name)
	}
	g.counters.Started()
	g.worker.Go(g.env.Type+" source "+g.env.Name, func(ctx context.Context) { g.run(ctx, p) })
	return nil
}

// Stop ends generation and waits for the generator to exit. A batch whose
// Process call is under way when Stop is called is either committed or not.
func (g *generator) Stop(ctx context.Context) error {
	if !g.worker.Running() {
		return nil
	}
	defer g.counters.Stopped()
	if err := g.worker.Stop(ctx); err != nil {
		return fmt.Errorf("%s %s: stop: %w", g.env.Type, g.env.Name, err)
	}
	return nil
}

// accepted counts a batch of n events the channels took.
func (g *generator) accepted(n int64) {
	if g.batchSize > 1 {
		g.counters.AppendBatchAccepted.Add(1)
	}
	g.counters.EventAccepted.Add(n)
}

// newRetry returns how the generator puts a batch until the channels take
// it: every refusal retried, the waits backoffSleepIncrement doubling up to
// maxBackoffSleep.
func (g *generator) newRetry() *flow.Retry {
	return flow.NewRetry(g.env.Log(), g.env.Type, g.env.Name, g.counters, flow.PutBackoff{Min: g.backoffStep, Max: g.backoffMax}, true)
}

// refused counts a batch the channels refused (Flume counts a
// ChannelException as ChannelWriteFail; anything else escapes to its
// runner) and returns the next wait, from the last one.
func (g *generator) refused(err error, last time.Duration) time.Duration {
	if errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed) {
		g.counters.ChannelWriteFail.Add(1)
	} else {
		g.counters.GenericProcessingFail.Add(1)
	}
	return min(max(last*2, g.backoffStep), g.backoffMax)
}

// sleep waits d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
