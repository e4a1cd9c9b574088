// Package seq is Flume's sequence generator source ("seq"): it puts events
// whose bodies are 0, 1, 2, ... as decimal strings, in batches of batchSize,
// until totalEvents were committed. It is a load generator and a test aid.
package seq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Source is the seq source. Build it with New.
type Source struct {
	env         flow.Env
	batchSize   int
	totalEvents int64
	backoffStep time.Duration // Flume's backoffSleepIncrement
	backoffMax  time.Duration // Flume's maxBackoffSleep
	counters    *metrics.SourceCounters

	worker flow.Worker // the reading goroutine
}

// New builds a seq source from its properties: batchSize (1), totalEvents
// (unbounded), backoffSleepIncrement (1000 ms) and maxBackoffSleep (5000 ms).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{
		env:         env,
		batchSize:   p.IntRange("batchSize", 1, 1, math.MaxInt32),
		totalEvents: p.Int64("totalEvents", math.MaxInt64),
		backoffStep: time.Duration(p.Int64("backoffSleepIncrement", 1000)) * time.Millisecond,
		backoffMax:  time.Duration(p.Int64("maxBackoffSleep", 5000)) * time.Millisecond,
	}
	if s.totalEvents < 0 {
		p.Errorf("totalEvents", "%d is negative; use 0 or more", s.totalEvents)
	}
	if s.backoffStep <= 0 {
		p.Errorf("backoffSleepIncrement", "must be a positive number of milliseconds")
		s.backoffStep = time.Second
	}
	if s.backoffMax < s.backoffStep {
		p.Errorf("maxBackoffSleep", "must be at least backoffSleepIncrement (%d ms)", s.backoffStep.Milliseconds())
		s.backoffMax = s.backoffStep
	}
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// BatchSize reports batchSize, so the agent can check it against the
// channels' transactionCapacity.
func (s *Source) BatchSize() int { return s.batchSize }

// Start begins generating events in a goroutine that Stop ends.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.worker.Running() {
		return fmt.Errorf("seq %s: already started", s.env.Name)
	}
	s.counters.Started()
	s.worker.Go(func(ctx context.Context) { s.run(ctx, p) })
	return nil
}

// Stop ends generation and waits for the generator to exit. A batch whose
// Process call is under way when Stop is called is either committed or not;
// the next start begins again from 0, as Flume's does.
func (s *Source) Stop(ctx context.Context) error {
	if !s.worker.Running() {
		return nil
	}
	defer s.counters.Stopped()
	if err := s.worker.Stop(ctx); err != nil {
		return fmt.Errorf("seq %s: stop: %w", s.env.Name, err)
	}
	return nil
}

func (s *Source) run(ctx context.Context, p flow.Processor) {
	log := s.env.Log()
	batch := make([]event.Event, 0, s.batchSize)
	backoff := time.Duration(0)
	next := int64(0)
	for next < s.totalEvents {
		n := int(min(int64(s.batchSize), s.totalEvents-next))
		batch = fill(batch[:0], next, n)
		err := p.Process(ctx, batch)
		if err == nil {
			backoff = 0
			next += int64(n)
			if s.batchSize > 1 {
				s.counters.AppendBatchAccepted.Add(1)
			}
			s.counters.EventAccepted.Add(int64(n))
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// Flume counts a ChannelException as ChannelWriteFail; anything else
		// escapes to its runner. Either way the same bodies are tried again,
		// so the sequence has no gaps.
		if errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed) {
			s.counters.ChannelWriteFail.Add(1)
		} else {
			s.counters.GenericProcessingFail.Add(1)
		}
		backoff = min(max(backoff*2, s.backoffStep), s.backoffMax)
		if backoff == s.backoffStep || backoff == s.backoffMax {
			log.Warn("seq source could not put a batch; retrying the same events",
				"source", s.env.Name, "first", next, "events", n, "retry_in", backoff, "err", err)
		}
		if !s.sleep(ctx, backoff) {
			return
		}
	}
	log.Info("seq source generated every event", "source", s.env.Name, "totalEvents", s.totalEvents)
}

func (s *Source) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fill appends n events with the bodies first, first+1, ... to batch. The
// bodies share one freshly allocated slab: once handed to Process they
// belong to the pipeline, so a retry builds a new one.
func fill(batch []event.Event, first int64, n int) []event.Event {
	slab := make([]byte, 0, n*(len(strconv.FormatInt(first+int64(n)-1, 10))))
	now := event.Now()
	for i := range n {
		start := len(slab)
		slab = strconv.AppendInt(slab, first+int64(i), 10)
		batch = append(batch, event.Event{Body: slab[start:len(slab):len(slab)], ReceivedAt: now})
	}
	return batch
}
