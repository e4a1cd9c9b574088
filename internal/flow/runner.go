package flow

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/panics"
)

// Backoff after a failed Process: the runner sleeps ErrorBackoffMin after
// the first failure, doubling with each consecutive one up to
// ErrorBackoffMax. Flume sleeps a fixed 5 s after any exception, which
// stalls the pipeline for 5 s after a single broken connection; starting at
// 100 ms recovers from such blips at once, and the cap keeps Flume's pace
// against a downstream that stays down.
const (
	ErrorBackoffMin = 100 * time.Millisecond
	ErrorBackoffMax = 5 * time.Second
)

// DefaultSinkHealthGrace is how long a runner's sink may fail without a
// single delivery in between before the runner reports it unhealthy: long
// enough that a collector's restart or a blip does not flap /healthz, short
// enough that a supervisor sees a downstream that is really gone.
const DefaultSinkHealthGrace = 30 * time.Second

// SinkRunner drives one sink, or the processor of one sink group, from a
// goroutine it owns: it calls Process in a loop until stopped. After
// Backoff it calls again at once (the channel's Take already waited, so
// Flume's sleep after an empty batch would only add latency); after an error
// it sleeps with an exponential backoff. It tells the failure streak with a
// logthrottle.Streak (first failure, summaries, "delivering again"), except
// errors the sink has told in its own streak (logthrottle.Reported), which
// it logs at DEBUG only: one line per outage, from the component that
// knows most about it.
//
// The runner does not start or stop the sink itself; the agent does, before
// Start and after Stop.
type SinkRunner struct {
	name string
	sink Sink
	log  *slog.Logger

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop exits
	drain   chan []Channel
	drained chan struct{}
	streak  *logthrottle.Streak

	// HealthGrace is how long Process may keep failing before Health
	// reports it; set before Start. 0 means DefaultSinkHealthGrace.
	HealthGrace time.Duration

	hmu          sync.Mutex
	failingSince time.Time // first failure since the last success; zero when not failing
	failures     int
	lastErr      error
}

// NewSinkRunner returns a runner for sink s (a sink or a sink processor)
// named name (the sink or group name, for logs).
func NewSinkRunner(name string, s Sink, log *slog.Logger) *SinkRunner {
	if log == nil {
		log = slog.Default()
	}
	return &SinkRunner{name: name, sink: s, log: log, streak: &logthrottle.Streak{
		Log: log, Level: slog.LevelWarn,
		Failed:    "sink failed; events stay in the channel and are retried",
		Recovered: "sink delivering again",
	}}
}

// logFlusher is a sink that throttles its own logs (a sink group, whose
// members fail one after another): the runner, the only caller of its
// Process, flushes them when its loop ends, so that no timer logs for a
// group that stopped.
type logFlusher interface{ flushLogs() }

func (r *SinkRunner) flushLogs() {
	r.streak.Stop()
	if f, ok := r.sink.(logFlusher); ok {
		f.flushLogs()
	}
}

// Start starts the loop. Calling it on a running runner does nothing.
func (r *SinkRunner) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	r.drain = make(chan []Channel, 1)
	r.drained = make(chan struct{})
	go r.loop(ctx, r.done, r.drain, r.drained)
}

// loop calls Process until stopped. A panic in a sink's delivery is caught
// by its BatchSink and comes back as an error (the batch rolled back); one
// anywhere else (a channel's Take or Commit, a sink processor) ends the
// process (package panics).
func (r *SinkRunner) loop(ctx context.Context, done chan struct{}, drain <-chan []Channel, drained chan struct{}) {
	defer panics.Guard("sink runner " + r.name)
	defer close(done)
	defer r.flushLogs() // the summaries held back come out before Stop returns
	failures := 0
	var draining []Channel
	isDraining, lastBackoff := false, false
	for ctx.Err() == nil {
		select {
		case chans := <-drain:
			draining, isDraining = chans, true
		default:
		}
		// The last call found nothing and nothing arrived since (the sources
		// are stopped when a drain is asked): done, without another wait.
		if isDraining && lastBackoff && empty(draining) {
			close(drained)
			return
		}
		st, err := r.sink.Process(ctx)
		lastBackoff = err == nil && st == Backoff
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			r.noteFailure(err, failures)
			wait := backoff(failures)
			if logthrottle.Reported(err) {
				r.log.Debug("sink failed; events stay in the channel and are retried", "sink", r.name,
					"consecutive_failures", failures, "retry_in", wait.String(), "err", err)
			} else {
				r.streak.Fail(err, "sink", r.name, "retry_in", wait.String())
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if failures > 0 {
			r.noteFailure(nil, 0)
			r.streak.Ok("sink", r.name)
		}
		failures = 0
		if isDraining && st == Backoff && empty(draining) {
			close(drained)
			return
		}
	}
}

// noteFailure records the outcome Health reports: err after the
// failures-th consecutive failure, or nil after a success.
func (r *SinkRunner) noteFailure(err error, failures int) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	if err == nil {
		r.failingSince, r.failures, r.lastErr = time.Time{}, 0, nil
		return
	}
	if r.failingSince.IsZero() {
		r.failingSince = time.Now()
	}
	r.failures, r.lastErr = failures, err
}

// Health reports a sink that has failed every call for longer than
// HealthGrace, with its last error; nil as soon as a call succeeds (an empty
// channel counts: nothing failed).
func (r *SinkRunner) Health() error {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	grace := r.HealthGrace
	if grace <= 0 {
		grace = DefaultSinkHealthGrace
	}
	if r.failingSince.IsZero() {
		return nil
	}
	if d := time.Since(r.failingSince); d >= grace {
		return fmt.Errorf("cannot deliver: every attempt failed for %s (%d in a row); the events stay in the channel; last error: %v",
			d.Round(time.Second), r.failures, r.lastErr)
	}
	return nil
}

func backoff(failures int) time.Duration {
	d := ErrorBackoffMin
	for i := 1; i < failures && d < ErrorBackoffMax; i++ {
		d *= 2
	}
	return min(d, ErrorBackoffMax)
}

// empty reports whether every channel is known to be empty; a channel that
// cannot tell (Len -1) counts as empty once Process returned Backoff.
func empty(chans []Channel) bool {
	for _, c := range chans {
		if c.Len() > 0 {
			return false
		}
	}
	return true
}

// Drain keeps the loop processing until the sink finds its channels empty
// (Process returns Backoff and every channel in chans has Len 0), then stops
// the loop. If ctx ends first, it stops the loop anyway and returns ctx's
// error; what was not delivered stays in the channels, and a channel that
// has MarkInFlight is told first, so it counts the batch being delivered
// apart from what no delivery had. Call it after the sources stopped.
func (r *SinkRunner) Drain(ctx context.Context, chans ...Channel) error {
	r.mu.Lock()
	done, drain, drained := r.done, r.drain, r.drained
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case drain <- chans:
	default: // a drain is already under way
	}
	select {
	case <-drained:
		return nil
	case <-done:
		return nil
	case <-ctx.Done():
		// The deliveries under way are cut off now: a channel that can
		// tell them apart from the events no delivery had counts what they
		// give back as in flight, outcome unknown (the downstream may have
		// them), not as lost.
		for _, c := range chans {
			if m, ok := c.(inFlightMarker); ok {
				m.MarkInFlight()
			}
		}
		r.mu.Lock()
		r.cancel() // Stop waits for the loop to exit
		r.mu.Unlock()
		return ctx.Err()
	}
}

// inFlightMarker is a channel that counts the events of deliveries cut off
// at the shutdown deadline apart (the memory channel).
type inFlightMarker interface{ MarkInFlight() }

// Stop stops the loop: it cancels the context of the Process in progress
// and waits, at most until ctx ends, for it to return.
func (r *SinkRunner) Stop(ctx context.Context) error {
	return r.halt(ctx)
}

func (r *SinkRunner) halt(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
