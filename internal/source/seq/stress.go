package seqsource

import (
	"bytes"
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// stressFill is the byte Flume's StressSource fills bodies with
// (Byte.MAX_VALUE).
const stressFill = 0x7F

// Stress is Flume's StressSource (org.apache.flume.source.StressSource), a
// load generator: events of size bytes (each 0x7F, as Flume fills them) with
// no headers, batchSize at a time, until maxTotalEvents were tried or
// maxSuccessfulEvents were put, at most maxEventsPerSecond. As in Flume, a
// batch the channel refuses counts towards maxTotalEvents (it is not sent
// again: this source measures, it does not deliver), and the source waits
// before the next one (backoffSleepIncrement, maxBackoffSleep).
type Stress struct {
	generator
	size          int
	maxTotal      int64 // < 0: no limit
	maxSuccessful int64 // < 0: no limit
	rate          int   // events per second; 0: no limit
}

// NewStress builds a stress source from Flume's properties: size (500),
// maxTotalEvents (-1), maxSuccessfulEvents (-1), batchSize (1),
// maxEventsPerSecond (0), backoffSleepIncrement (1000 ms) and
// maxBackoffSleep (5000 ms).
func NewStress(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Stress{
		size:          p.IntRange("size", 500, 0, 64<<20),
		maxTotal:      p.Int64("maxTotalEvents", -1),
		maxSuccessful: p.Int64("maxSuccessfulEvents", -1),
		rate:          p.IntRange("maxEventsPerSecond", 0, 0, math.MaxInt32),
	}
	s.readGenerator(env, p)
	s.run = s.generate
	return s, nil
}

func (s *Stress) generate(ctx context.Context, p flow.Processor) {
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
		if s.rate > 0 && !sleep(ctx, time.Until(start.Add(time.Duration(float64(total)*float64(time.Second)/float64(s.rate))))) {
			return
		}
		// A fresh slab per batch: once handed to Process the bodies belong
		// to the pipeline.
		slab := bytes.Repeat([]byte{stressFill}, int(n)*s.size)
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
			s.accepted(n)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		backoff = s.refused(err, backoff)
		if !sleep(ctx, backoff) {
			return
		}
	}
}
