package flow

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
)

// PutBackoff paces the attempts of a batch the channels refused.
type PutBackoff struct {
	// Min is the wait after the first refusal.
	Min time.Duration
	// Max bounds every wait.
	Max time.Duration
	// Linear makes the waits Min, 2×Min, 3×Min, ... (Flume's
	// backoffSleepIncrement); else they double: Min, 2×Min, 4×Min, ...
	Linear bool
}

// FullBackoff is the pacing of the network sources (netcat, netcatudp,
// syslogtcp, multiport_syslogtcp, syslogudp): the channel has already
// waited its keep-alive before refusing, so the waits are short.
var FullBackoff = PutBackoff{Min: 10 * time.Millisecond, Max: 500 * time.Millisecond}

// Wait is the wait after the attempt-th refusal of one batch (attempt ≥ 1).
func (b PutBackoff) Wait(attempt int) time.Duration {
	attempt = max(attempt, 1)
	if b.Linear {
		if b.Min > 0 && time.Duration(attempt) > b.Max/b.Min {
			return b.Max
		}
		return min(time.Duration(attempt)*b.Min, b.Max)
	}
	d := b.Min
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Retry is how a push source puts one batch until the channels take it:
// every source that reads its input itself (netcat, netcatudp, syslogtcp,
// multiport_syslogtcp, syslogudp, exec, taildir, spooldir, seq) calls Put
// and keeps only its own answer to the outcome: an acknowledgement, a reply
// to its sender, a position kept. A source whose sender makes the batch and
// retries it (avro, thrift, http, otlp) puts it once and replies instead.
//
// While the channels refuse, the source does not read further input (the
// sender is pushed back: TCP stops taking bytes, a pipe blocks its command,
// a file waits), and the batch is built again for each attempt, as a failed
// Process may have changed its events (interceptors). Each refused attempt
// is counted (ChannelWriteFail when a channel was full or closed,
// GenericProcessingFail otherwise) and told through Streak: one WARN line
// when puts start failing, a summary every 30 s while they do, one INFO
// line once they have succeeded for PutStreakHold. The agent's stop is no
// failure: neither counted nor told.
//
// Set the fields before the first Put; a Retry is safe for concurrent use
// (the connections of one source share it).
type Retry struct {
	Backoff PutBackoff
	// RetryAll retries every refusal but the agent's stop: a source whose
	// input waits for it (a file, a command's pipe, a generator) keeps
	// trying whatever the reason. Without it only a full channel is
	// retried, and any other failure is returned at once, for the source
	// to answer its sender (Flume's network sources answer FAILED, or drop
	// a datagram, and go on).
	RetryAll bool
	// Counters receive the refused attempts; nil: not counted.
	Counters *metrics.SourceCounters
	// Streak tells refused attempts (see PutStreak); nil: not told.
	Streak *logthrottle.Streak
}

// NewRetry returns the Retry of a source: its counters, backoff and policy,
// and a streak whose lines are "<kind> source could not put a batch;
// retrying" and "<kind> source puts batches again", with source=name.
func NewRetry(log *slog.Logger, kind, name string, c *metrics.SourceCounters, b PutBackoff, retryAll bool) *Retry {
	if log == nil {
		log = slog.Default()
	}
	return &Retry{Backoff: b, RetryAll: retryAll, Counters: c,
		Streak: PutStreak(log.With("source", name), kind+" source could not put a batch; retrying", kind+" source puts batches again")}
}

// Put puts the batch build makes through p, and after a refusal worth
// another attempt builds it again and puts it again, waiting Backoff in
// between, until it is committed or the source is stopping. It returns:
//
//   - nil once every required channel committed the batch: the source may
//     acknowledge it;
//   - ctx's error when ctx ended first (the source is being stopped; a put
//     waiting for space gives up): nothing may be acknowledged;
//   - an error wrapping ErrStopping when the agent is stopping or replacing
//     the source: no later put will succeed, so the source refuses its
//     sender (or keeps its position) and waits for Stop;
//   - without RetryAll, the error of a refusal that is not a full channel.
//
// attrs, when not nil, gives the streak lines' attributes that say where
// the batch came from (the file, the peer); it is called only when a line
// is written. The events of each attempt are cleared after Process: once
// handed over they belong to the pipeline.
func (r *Retry) Put(ctx context.Context, p Processor, build func() []event.Event, attrs func() []any) error {
	for attempt := 1; ; attempt++ {
		batch := build()
		n := len(batch)
		err := p.Process(ctx, batch)
		clear(batch)
		if err == nil {
			if r.Streak != nil && r.Streak.Failing() {
				r.Streak.Ok()
			}
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if errors.Is(err, ErrStopping) {
			return err // not a failure: the agent closed intake
		}
		r.count(err)
		if !r.RetryAll && !errors.Is(err, ErrChannelFull) {
			return err
		}
		wait := r.Backoff.Wait(attempt)
		if r.Streak != nil {
			var args []any
			if attrs != nil {
				args = attrs()
			}
			r.Streak.Fail(err, append(args, "events", n, "retry_in", wait.String())...)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// count counts a refused put as Flume's sources do: a channel's refusal
// (ChannelException) as ChannelWriteFail, anything else as
// GenericProcessingFail.
func (r *Retry) count(err error) {
	if r.Counters == nil {
		return
	}
	if errors.Is(err, ErrChannelFull) || errors.Is(err, ErrClosed) {
		r.Counters.ChannelWriteFail.Add(1)
	} else {
		r.Counters.GenericProcessingFail.Add(1)
	}
}

// Stop writes the summary of refusals not yet told, for a source that
// stops while its puts fail.
func (r *Retry) Stop() {
	if r.Streak != nil {
		r.Streak.Stop()
	}
}
