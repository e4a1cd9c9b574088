// Package flow is the core of the agent: the contracts between sources,
// channels and sinks, and the machinery that moves events between them with
// transactions (the ChannelProcessor on the way in, the SinkRunner and sink
// processors on the way out). It names no concrete component; the agent
// package wires them.
//
// Delivery rule: a source acknowledges its sender only after every required
// channel committed the events; a sink commits its take only after the
// downstream system acknowledged them. So an acknowledged event is always
// either delivered or still held in a channel.
//
// Batching rule: a source puts a batch as soon as it holds one event, and
// the batch takes every further event the source already holds, up to a
// limit: batchSize when the user set it (a maximum, as in Flume), else the
// smallest transactionCapacity of the source's channels (Batching.Limit),
// so that under load one batch is one transaction and, with the file
// channel, one share of an fdatasync, while a lone event still goes at once.
// batch.go states the rule; every source that cuts its own batches takes its
// limit from there.
//
// Stopping is two-phase. First intake stops at once: the agent closes every
// source's ChannelProcessor (Close waits for the Process calls already
// committing; every later one fails with ErrStopping, which sources treat as
// a refused put, so nothing is acknowledged after the signal), then stops
// the sources (listeners and connections close). Then the sinks drain the
// channels (SinkRunner.Drain) until a deadline, and are stopped: a Process
// cut short by its context rolls its batch back, so a durable channel keeps
// it. What a channel still holds then is kept by a durable channel (file,
// Kafka; it implements Durable) and lost with a memory channel; the agent
// reports either with the count.
//
// Panics: every goroutine a component starts is started by panics.Go or
// begins with defer panics.Guard, so that a panic (a bug) is logged with
// its stack and ends the agent with exit status 70; only a panic in a
// BatchSink's Writer is recovered, as a failed delivery (package panics).
package flow

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
)

// ErrChannelFull is returned (wrapped, test with errors.Is) when a channel
// could not take a put within its keep-alive, or a transaction would exceed
// its transactionCapacity. The source must push back to its sender (Avro
// FAILED, HTTP 503, stop reading TCP) and keep the data retryable.
var ErrChannelFull = errors.New("channel full")

// ErrClosed is returned by a channel that was stopped.
var ErrClosed = errors.New("channel closed")

// Channel buffers events between sources and sinks. Every operation happens
// inside a Transaction. Order is FIFO for committed puts.
type Channel interface {
	// Start makes the channel ready (opening files, connecting). It is called
	// once, before any source or sink that uses the channel starts.
	Start(ctx context.Context) error
	// Stop releases the channel after every source and sink using it stopped.
	// A durable channel keeps its events; the memory channel loses them
	// (as Flume's does) unless the agent keeps the channel across a reload
	// or hands its events to its replacement.
	Stop(ctx context.Context) error
	// Begin opens a transaction. A transaction belongs to one goroutine and
	// ends with exactly one Commit or Rollback.
	Begin() Transaction
	// Len reports how many committed events the channel holds, or -1 when it
	// cannot tell cheaply (the agent uses it to know when draining is done).
	Len() int
}

// Transaction is one unit of work on a channel.
type Transaction interface {
	// Put stages events; they become visible to takers only at Commit. The
	// channel copies the Event values; the caller may reuse the slice, not the
	// events' headers or bodies. It fails with ErrChannelFull when the
	// transaction would hold more than transactionCapacity events.
	Put(events []event.Event) error
	// Take removes up to max committed events from the head of the channel and
	// appends them to dst. When the channel is empty it waits until an event
	// is committed or ctx is done, then returns what it has (possibly none);
	// the end of ctx is not an error. It never waits once it has one event,
	// so a sink's batch is whatever is there, up to max. A ctx that is
	// already done still gets the events the channel can hand over without
	// waiting (BatchSink takes that way first, to spare a timer per batch; a
	// channel that cannot returns none, and BatchSink then waits normally).
	Take(ctx context.Context, dst []event.Event, max int) ([]event.Event, error)
	// Commit makes puts visible and takes permanent. A put may have to wait
	// for space (the memory and file channels, up to keep-alive; the Kafka
	// channel, for room in its producer's buffer, up to max.block.ms). ctx
	// ends that wait: Commit then fails with an error wrapping ErrChannelFull
	// and ctx's error, and the caller treats the put as refused. ctx bounds
	// only that wait: a put that fits a local channel commits even with a
	// done ctx, ctx never cuts off a write under way (a file channel's
	// fdatasync, records already sent to Kafka), and a take commit ignores
	// it, so a sink whose downstream acknowledged a batch records the take
	// even after its ctx ended. After any Commit error the caller calls
	// Rollback.
	Commit(ctx context.Context) error
	// Rollback drops the puts and returns the takes to the head of the
	// channel in their original order.
	Rollback() error
}

// Processor is what a source hands its events to: the ChannelProcessor of
// that source.
type Processor interface {
	// Process runs the events through the source's interceptors, then its
	// selector, then puts them into each required channel in one transaction
	// per channel and commits; optional channels follow, and their failures
	// are counted and logged, never returned. It returns nil only when every
	// required channel committed; then, and only then, the source may
	// acknowledge its sender. An error wrapping ErrChannelFull means push back
	// and retry later; ErrStopping (which matches ErrChannelFull too) means
	// the agent is stopping or replacing the source: nothing was put, and no
	// later call will put anything, so the source refuses the sender (Avro
	// FAILED, HTTP 503, netcat FAILED or close, a stream stops being read)
	// and waits for its Stop. ctx bounds how long a put waits for space in a
	// full channel (Transaction.Commit): a source passes a ctx that ends when
	// it is stopped, so a put blocked on a full channel returns then, with
	// an error wrapping ErrChannelFull and ctx's error, and the source
	// acknowledges nothing. A required channel that had already committed
	// keeps its events (the sender's retry puts them again, at-least-once,
	// as after any failure part-way). ctx does not stop a put that needs no
	// wait. Events may be modified (interceptors) and the slice reordered;
	// the caller may reuse the slice after Process returns.
	Process(ctx context.Context, events []event.Event) error
}

// Source brings events into the agent.
type Source interface {
	// Start begins intake in goroutines the source owns (listeners, pollers)
	// and returns without waiting for input. Startup errors (a port in use)
	// are returned here. ctx is only for the start itself.
	Start(ctx context.Context, p Processor) error
	// Stop stops intake and returns once every goroutine of the source has
	// exited and every batch it had read was committed or refused to its
	// sender. ctx bounds how long it may wait. The agent closes the source's
	// Processor before Stop, so Process already fails with ErrStopping: Stop
	// need not wait for connected senders to leave; it closes them.
	Stop(ctx context.Context) error
}

// Status is what a sink's Process tells its runner.
type Status int

const (
	// Ready means call Process again at once.
	Ready Status = iota
	// Backoff means there was nothing to do (the channel was empty for the
	// whole wait); the runner may pause before the next call.
	Backoff
)

func (s Status) String() string {
	if s == Backoff {
		return "BACKOFF"
	}
	return "READY"
}

// Sink moves events from its channel to a downstream system.
type Sink interface {
	// Start prepares the sink. It should not fail because the downstream
	// system is down: Process connects and reconnects as needed.
	Start(ctx context.Context) error
	// Process takes at most one batch from the sink's channel in a
	// transaction and delivers it, committing only after the downstream
	// acknowledged it and rolling back otherwise. It returns Backoff when the
	// channel stayed empty until ctx was done, and an error when delivery
	// failed (the events are back in the channel). When ctx ends (the sink is
	// being stopped) Process returns promptly and rolls back a batch the
	// downstream has not acknowledged, so a durable channel keeps it.
	// Process is called from one goroutine at a time. A panic in Process
	// ends the agent (package panics), except one in a BatchSink's Writer,
	// which fails that delivery like an error.
	Process(ctx context.Context) (Status, error)
	// Stop closes connections and files; it is called after the last Process.
	Stop(ctx context.Context) error
}

// Interceptor changes or drops events before the selector sees them.
type Interceptor interface {
	// Intercept changes events in place and returns the ones to keep, which
	// may share events' backing array. Dropped events are counted by the
	// interceptor.
	Intercept(events []event.Event) []event.Event
}

// HealthReporter is implemented by components that can be running yet
// unable to do their work: a file channel refusing puts for lack of disk, a
// sink that has not reached its downstream for longer than a grace period, a
// client that cannot reach its brokers. The agent asks every component that
// implements it when /healthz is read. Health returns nil when the component
// can work, else the reason it cannot, as a sentence an operator can act on
// ("no space left on /data: puts refused until space returns"). It must be
// cheap, must not block, and is called concurrently with everything else.
// Once the cause is gone it must return nil again: health is the state now,
// never a latched past error.
type HealthReporter interface {
	Health() error
}

// Durable is implemented by channels whose events outlive the process: they
// are still there after a stop or a crash and a restart (the file channel's
// disk, the Kafka channel's topic). The agent reports what such a channel
// holds at a stop as kept (INFO) and what any other channel holds as lost
// (ERROR, and a non-zero exit status), so a channel that does not implement
// Durable is reported as losing its events: the loud side.
type Durable interface {
	Durable() bool
}

// BatchSizer is implemented by sources and sinks that move events in
// batches, so the agent can check batch size against each channel's
// transactionCapacity, as Flume does.
type BatchSizer interface {
	BatchSize() int
}

// TxCapacity is implemented by channels with a transactionCapacity.
type TxCapacity interface {
	TransactionCapacity() int
}

// Env is what a component's constructor receives from the agent besides
// its properties.
type Env struct {
	Agent  string // agent name (-n)
	Name   string // component name, such as "r1"
	Type   string // canonical component type, such as "netcat"
	Logger *slog.Logger
	// Metrics is where the component registers its counter set and finds
	// its latency histograms. Never nil when built by the agent.
	Metrics *metrics.Registry
	// Channel is the channel a sink takes from; nil for other components.
	Channel Channel
	// ChannelTap is the tap point of a sink's channel (its take); nil when
	// nobody can tap.
	ChannelTap *Tap
	// Sys holds the system properties given with -D: the JVM-wide settings
	// Flume's components read there (java.security.krb5.conf,
	// java.security.auth.login.config) are read there too. Read-only.
	Sys map[string]string
}

// Log returns the component's logger, never nil.
func (e Env) Log() *slog.Logger {
	if e.Logger == nil {
		return slog.Default()
	}
	return e.Logger
}

// Constructors build a component from its properties without starting it,
// so `sluice validate` can run them all. They read every property through p
// (bad values are recorded in p's problems) and return an error only for
// problems p cannot hold.
type (
	SourceFactory      func(env Env, p *config.Props) (Source, error)
	ChannelFactory     func(env Env, p *config.Props) (Channel, error)
	SinkFactory        func(env Env, p *config.Props) (Sink, error)
	InterceptorFactory func(env Env, p *config.Props) (Interceptor, error)
)

// Registry returns env.Metrics, or a private registry when the component is
// built outside an agent (in tests).
func (e Env) Registry() *metrics.Registry {
	if e.Metrics == nil {
		return metrics.NewRegistry(e.Agent)
	}
	return e.Metrics
}
