// Package stress is Flume's StressSource (org.apache.flume.source.StressSource),
// a load generator: events of size bytes (each byte 0x7F, as Flume fills
// them) with no headers, batchSize at a time, until maxTotalEvents were
// tried or maxSuccessfulEvents were put, at most maxEventsPerSecond.
//
// As in Flume, a batch the channel refuses counts towards maxTotalEvents
// (it is not sent again: this source measures, it does not deliver), and
// the source waits before the next one (backoffSleepIncrement,
// maxBackoffSleep, as Flume's pollable sources).
package stress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// fill is the byte Flume's StressSource fills bodies with (Byte.MAX_VALUE).
const fill = 0x7F

// Source is the stress source. Build it with New.
type Source struct {
	env           flow.Env
	size          int
	maxTotal      int64 // < 0: no limit
	maxSuccessful int64 // < 0: no limit
	batchSize     int
	rate          int // events per second; 0: no limit
	backoffStep   time.Duration
	backoffMax    time.Duration
	counters      *metrics.SourceCounters

	worker flow.Worker
}

// New builds a stress source from Flume's properties: size (500),
// maxTotalEvents (-1), maxSuccessfulEvents (-1), batchSize (1),
// maxEventsPerSecond (0), backoffSleepIncrement (1000 ms) and
// maxBackoffSleep (5000 ms).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{
		env:           env,
		size:          p.IntRange("size", 500, 0, 64<<20),
		maxTotal:      p.Int64("maxTotalEvents", -1),
		maxSuccessful: p.Int64("maxSuccessfulEvents", -1),
		batchSize:     p.IntRange("batchSize", 1, 1, math.MaxInt32),
		rate:          p.IntRange("maxEventsPerSecond", 0, 0, math.MaxInt32),
		backoffStep:   time.Duration(p.IntRange("backoffSleepIncrement", 1000, 1, math.MaxInt32)) * time.Millisecond,
		backoffMax:    time.Duration(p.IntRange("maxBackoffSleep", 5000, 1, math.MaxInt32)) * time.Millisecond,
	}
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// BatchSize reports batchSize, for the agent's transactionCapacity check.
func (s *Source) BatchSize() int { return s.batchSize }

// Start begins generating in a goroutine that Stop ends.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.worker.Running() {
		return fmt.Errorf("stress %s: already started", s.env.Name)
	}
	s.counters.Started()
	s.worker.Go(func(ctx context.Context) { s.run(ctx, p) })
	return nil
}

// Stop ends generation and waits for the generator.
func (s *Source) Stop(ctx context.Context) error {
	if !s.worker.Running() {
		return nil
	}
	defer s.counters.Stopped()
	if err := s.worker.Stop(ctx); err != nil {
		return fmt.Errorf("stress %s: stop: %w", s.env.Name, err)
	}
	return nil
}

func (s *Source) run(ctx context.Context, p flow.Processor) {
	var total, successful int64
	var backoff time.Duration
	start := time.Now()
	batch := make([]event.Event, 0, s.batchSize)
	for ctx.Err() == nil {
		if (s.maxTotal >= 0 && total >= s.maxTotal) || (s.maxSuccessful >= 0 && successful >= s.maxSuccessful) {
			s.env.Log().Info("stress source reached its limit", "source", s.env.Name,
				"events_tried", total, "events_put", successful)
			return
		}
		n := int64(s.batchSize)
		if s.maxTotal >= 0 {
			n = min(n, s.maxTotal-total)
		}
		if s.rate > 0 && !sleepUntil(ctx, start.Add(time.Duration(float64(total+n-1)*float64(time.Second)/float64(s.rate)))) {
			return
		}
		// A fresh slab per batch: once handed to Process the bodies belong
		// to the pipeline.
		slab := bytes.Repeat([]byte{fill}, int(n)*s.size)
		now := event.Now()
		batch = batch[:0]
		for i := range int(n) {
			batch = append(batch, event.Event{Body: slab[i*s.size : (i+1)*s.size : (i+1)*s.size], ReceivedAt: now})
		}
		err := p.Process(ctx, batch)
		total += n
		if err == nil {
			successful += n
			backoff = 0
			if s.batchSize > 1 {
				s.counters.AppendBatchAccepted.Add(1)
			}
			s.counters.EventAccepted.Add(n)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed) {
			s.counters.ChannelWriteFail.Add(1)
		} else {
			s.counters.GenericProcessingFail.Add(1)
		}
		backoff = min(max(2*backoff, s.backoffStep), s.backoffMax)
		if !sleepUntil(ctx, time.Now().Add(backoff)) {
			return
		}
	}
}

// sleepUntil waits until t, or returns false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
