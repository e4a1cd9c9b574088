// Package nullsink implements Flume's null sink: it takes events from its
// channel in batches and discards them. It is useful to measure a source and
// channel without a downstream system, and as a drain in tests.
package nullsink

import (
	"context"
	"math"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// DefaultBatchSize is Flume's default batchSize for the null sink.
const DefaultBatchSize = 100

// Writer discards every event it is given; the take commits at once.
type Writer struct{}

// Write discards events.
func (Writer) Write(context.Context, []event.Event) error { return nil }

// New builds a null sink from its properties: batchSize (100). Flume's
// logEveryNEvents is accepted and ignored: EventDrainSuccessCount counts
// what the sink discarded.
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	batch := p.IntRange("batchSize", DefaultBatchSize, 1, math.MaxInt32)
	p.Ignored("logEveryNEvents", "the sink's EventDrainSuccessCount counts the discarded events; sluice does not log every N")
	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, Writer{}, batch, c), nil
}
