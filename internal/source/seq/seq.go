// Package seqsource holds Flume's two generator sources: the sequence generator
// ("seq"), which puts events whose bodies are 0, 1, 2, ... as decimal
// strings, in batches of batchSize, until totalEvents were committed; and
// the StressSource (stress.go), events of a fixed size. They are load
// generators and test aids.
package seqsource

import (
	"context"
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
	generator
	totalEvents int64
}

// New builds a seq source from its properties: batchSize (1), totalEvents
// (unbounded), backoffSleepIncrement (1000 ms) and maxBackoffSleep (5000 ms).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{totalEvents: p.Int64("totalEvents", math.MaxInt64)}
	s.readGenerator(env, p)
	s.run = s.generate
	if s.totalEvents < 0 {
		p.Errorf("totalEvents", "%d is negative; use 0 or more", s.totalEvents)
	}
	return s, nil
}

// readGenerator reads the keys both generators have: batchSize (1),
// backoffSleepIncrement (1000 ms) and maxBackoffSleep (5000 ms), and
// registers the counters.
func (g *generator) readGenerator(env flow.Env, p *config.Props) {
	g.env = env
	g.batchSize = p.IntRange("batchSize", 1, 1, math.MaxInt32)
	g.backoffStep = time.Duration(p.Int64("backoffSleepIncrement", 1000)) * time.Millisecond
	g.backoffMax = time.Duration(p.Int64("maxBackoffSleep", 5000)) * time.Millisecond
	if g.backoffStep <= 0 {
		p.Errorf("backoffSleepIncrement", "must be a positive number of milliseconds")
		g.backoffStep = time.Second
	}
	if g.backoffMax < g.backoffStep {
		p.Errorf("maxBackoffSleep", "must be at least backoffSleepIncrement (%d ms)", g.backoffStep.Milliseconds())
		g.backoffMax = g.backoffStep
	}
	g.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(g.counters.Set)
}

// generate puts 0, 1, 2, ... until totalEvents were committed; a refused
// batch is tried again with the same bodies, so the sequence has no gaps.
// The next start begins again from 0, as Flume's does.
func (s *Source) generate(ctx context.Context, p flow.Processor) {
	retry := s.newRetry()
	defer retry.Stop()
	batch := make([]event.Event, 0, s.batchSize)
	next := int64(0)
	for next < s.totalEvents {
		n := int(min(int64(s.batchSize), s.totalEvents-next))
		err := retry.Put(ctx, p, func() []event.Event {
			batch = fill(batch[:0], next, n)
			return batch
		}, func() []any { return []any{"first", next} })
		if err != nil {
			return // stopping
		}
		next += int64(n)
		s.accepted(int64(n))
	}
	s.env.Log().Info("seq source generated every event", "source", s.env.Name, "totalEvents", s.totalEvents)
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
