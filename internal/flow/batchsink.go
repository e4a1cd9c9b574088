package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
)

// Writer delivers batches for a BatchSink. Write returns nil only after the
// downstream system acknowledged every event of the batch; on error the
// batch is rolled back into the channel and taken again later, so Write
// must cope with seeing events again (at-least-once). events and their
// bodies belong to the sink only until Write returns. ctx is cancelled when
// the sink is stopped.
//
// A Writer may also implement Start(ctx) error and Stop(ctx) error; the
// BatchSink calls them from its own Start and Stop. A panic in Write (a
// bug) fails the delivery as an error would (see BatchSink); one in a
// goroutine the Writer starts ends the agent (package panics).
type Writer interface {
	Write(ctx context.Context, events []event.Event) error
}

type starter interface{ Start(context.Context) error }
type stopper interface{ Stop(context.Context) error }

// undeliverer is a Writer that may commit events it did not deliver (an
// HTTP endpoint's status configured to drop them): after a successful Write
// it says how many, and they are not counted in EventDrainSuccessCount.
type undeliverer interface{ Undelivered() int }

// TakeWait is how long a BatchSink's Process waits for an event on an empty
// channel before it returns Backoff, so that a runner notices Stop and a
// sink group can turn to its other sinks.
const TakeWait = 500 * time.Millisecond

// alreadyDone is a context that is always done: a Take with it returns what
// the channel holds without waiting and without allocating a timer.
var alreadyDone = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// BatchSink is the transaction loop shared by sinks: take up to batchSize
// events, write them, commit on success and roll back on failure. It waits
// only when the channel is empty, so a lone event goes out at once and
// batches fill under load (adaptive batching).
//
// A panic in the Writer (a bug) fails the delivery like an error: the batch
// rolls back into the channel, the runner retries after its backoff, and
// Panicked reports it until a delivery succeeds. The first panic of a
// streak is logged at ERROR with its stack; each is counted (PanicCount).
type BatchSink struct {
	ch       Channel
	w        Writer
	size     int
	c        *metrics.SinkCounters
	batch    []event.Event
	channel  metrics.Histogram
	sink     metrics.Histogram
	endToEnd metrics.Histogram
	wait     time.Duration
	tap      *Tap // the channel's take

	name   string
	log    *slog.Logger
	panics *atomic.Int64 // PanicCount

	pmu        sync.Mutex
	lastPanic  *panics.Error // nil once a delivery succeeded
	panicCount int           // panics since the last delivery
}

// PanicReporter is implemented by sinks that catch a panic of their
// delivery (BatchSink): Panicked returns it, as a reason for /healthz,
// until a delivery succeeds, else nil. It takes precedence over Health.
type PanicReporter interface {
	Panicked() error
}

var (
	_ Sink       = (*BatchSink)(nil)
	_ BatchSizer = (*BatchSink)(nil)
)

// NewBatchSink returns a sink that takes batches of up to batchSize from
// env.Channel and hands them to w. c are the sink's Flume counters (the
// sink's constructor registers them); nil makes private ones.
func NewBatchSink(env Env, w Writer, batchSize int, c *metrics.SinkCounters) *BatchSink {
	if batchSize < 1 {
		batchSize = 1
	}
	if c == nil {
		c = metrics.NewSinkCounters(env.Name, env.Type)
	}
	reg := env.Registry()
	return &BatchSink{
		ch:       env.Channel,
		w:        w,
		size:     batchSize,
		c:        c,
		batch:    make([]event.Event, 0, batchSize),
		channel:  reg.Latency(metrics.StageChannel, env.Name),
		sink:     reg.Latency(metrics.StageSink, env.Name),
		endToEnd: reg.Latency(metrics.StageEndToEnd, env.Name),
		wait:     TakeWait,
		tap:      env.ChannelTap,
		name:     env.Name,
		log:      env.Log(),
		panics:   c.Counter("PanicCount"),
	}
}

// BatchSize is the most events one Process takes.
func (s *BatchSink) BatchSize() int { return s.size }

// Start resets the counters and starts the writer.
func (s *BatchSink) Start(ctx context.Context) error {
	s.c.Started()
	if st, ok := s.w.(starter); ok {
		return st.Start(ctx)
	}
	return nil
}

// Stop stops the writer.
func (s *BatchSink) Stop(ctx context.Context) error {
	defer s.c.Stopped()
	if st, ok := s.w.(stopper); ok {
		return st.Stop(ctx)
	}
	return nil
}

// Process takes one batch and delivers it.
func (s *BatchSink) Process(ctx context.Context) (Status, error) {
	if s.ch == nil {
		return Backoff, fmt.Errorf("sink has no channel")
	}
	tx := s.ch.Begin()
	batch, err := tx.Take(alreadyDone, s.batch[:0], s.size)
	if err == nil && len(batch) == 0 && ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, s.wait)
		batch, err = tx.Take(wctx, batch, s.size)
		cancel()
	}
	s.batch = batch[:0]
	if err != nil {
		s.c.ChannelReadFail.Add(1)
		return Ready, fmt.Errorf("take from channel: %w", joinRollback(err, tx))
	}
	n := len(batch)
	if n == 0 {
		if err := tx.Commit(ctx); err != nil {
			s.c.ChannelReadFail.Add(1)
			return Backoff, fmt.Errorf("commit empty take: %w", joinRollback(err, tx))
		}
		s.c.BatchEmpty.Add(1)
		return Backoff, nil
	}
	took := event.Now()
	s.tap.Offer(batch)
	if n < s.size {
		s.c.BatchUnderflow.Add(1)
	} else {
		s.c.BatchComplete.Add(1)
	}
	s.c.EventDrainAttempt.Add(int64(n))
	if err := s.write(ctx, batch); err != nil {
		s.c.EventWriteFail.Add(1)
		clear(batch)
		return Ready, fmt.Errorf("write %d events: %w", n, joinRollback(err, tx))
	}
	acked := event.Now()
	if err := tx.Commit(ctx); err != nil {
		s.c.ChannelReadFail.Add(1)
		clear(batch)
		return Ready, fmt.Errorf("commit take of %d delivered events (they will be delivered again): %w", n, joinRollback(err, tx))
	}
	delivered := n
	if u, ok := s.w.(undeliverer); ok {
		delivered -= u.Undelivered()
	}
	s.c.EventDrainSuccess.Add(int64(delivered))
	if s.panicCount > 0 {
		s.delivered()
	}
	for i := range batch {
		s.channel.Since(batch[i].CommittedAt, took)
		s.sink.Since(took, acked)
		s.endToEnd.Since(batch[i].ReceivedAt, acked)
	}
	clear(batch) // do not keep bodies alive until the next batch
	return Ready, nil
}

// write hands the batch to the writer; a panic in it comes back as an
// error wrapping a *panics.Error, and the caller rolls the batch back.
func (s *BatchSink) write(ctx context.Context, batch []event.Event) error {
	err := panics.Catch(func() error { return s.w.Write(ctx, batch) })
	if err == nil {
		return nil // before errors.As: its target escapes, an allocation per batch
	}
	var pe *panics.Error
	if errors.As(err, &pe) {
		s.panics.Add(1)
		s.pmu.Lock()
		s.lastPanic = pe
		s.panicCount++
		first := s.panicCount == 1
		s.pmu.Unlock()
		if first {
			s.log.Error("sink panicked delivering a batch; the batch went back to the channel and is retried (a bug in sluice: please report this line)",
				"sink", s.name, "events", len(batch), "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		}
	}
	return err
}

// delivered ends a streak of panics (panicCount is only written by
// Process's goroutine, so Process reads it without the lock).
func (s *BatchSink) delivered() {
	s.pmu.Lock()
	n := s.panicCount
	s.lastPanic, s.panicCount = nil, 0
	s.pmu.Unlock()
	s.log.Info("sink delivered again after panicking", "sink", s.name, "panics", n)
}

// Panicked reports the panic of the last delivery attempts while no
// delivery has succeeded since; nil otherwise.
func (s *BatchSink) Panicked() error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.lastPanic == nil {
		return nil
	}
	return fmt.Errorf("panicked delivering a batch (%d times since its last delivery; a bug in sluice, the stack is in the log): %v; the batch is back in the channel and is retried",
		s.panicCount, s.lastPanic.Value)
}

// joinRollback rolls tx back and returns err with any rollback failure.
func joinRollback(err error, tx Transaction) error {
	if rerr := tx.Rollback(); rerr != nil {
		return fmt.Errorf("%w (and rollback failed: %v)", err, rerr)
	}
	return err
}
