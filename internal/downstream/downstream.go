// Package downstream is the connection a sink keeps to its downstream (the
// avro, thrift and tcp sinks): it connects on demand, backs off after a
// failure, counts connections in the sink's metrics, logs failures
// throttled, and sends a batch again on a new connection when the receiver
// closed the old one while it sat idle.
//
// Backoff: after a failure no dial happens for 100 ms, doubling with each
// further failure up to 5 s; a delivered batch resets it. Within the
// backoff a batch either fails at once without dialing (the default, as
// Flume's RPC sinks fail at once when they cannot connect, so a failover or
// load_balance group hands the batch to its other sinks now) or waits the
// backoff out (Options.WaitBackoff).
//
// Logs: a failure streak is told by a logthrottle.Streak: the first
// failure at WARN at once, a summary at most once per 30 s while it lasts,
// and at the first delivery after it the summary of what was held back,
// then "delivering again" at INFO with how long it lasted and how many
// attempts failed. Every error Send returns is marked as told
// (logthrottle.Reported), so the sink runner does not log it again.
package downstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
)

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	logEvery   = 30 * time.Second
)

// ErrBackingOff is returned, without dialing, while the backoff after a
// failure lasts (unless Options.WaitBackoff is set).
var ErrBackingOff = errors.New("not reconnecting yet after a failure")

// Options describe a sink's downstream.
type Options struct {
	Name     string // the sink's kind, such as "avro sink": starts every error and log message
	Addr     string // host:port, for messages
	Counters *metrics.SinkCounters
	Log      *slog.Logger // nil: slog.Default()
	// ResetInterval replaces the connection once it is this old, at the
	// next batch (reset-connection-interval); 0: never.
	ResetInterval time.Duration
	// WaitBackoff makes a batch within the backoff wait it out (as long as
	// its context allows) and then dial, instead of failing at once.
	WaitBackoff bool
}

// Conn is a sink's connection of type C to its downstream, opened by a dial
// function. It is not safe for concurrent use: a sink's Writer calls it
// under its own lock.
type Conn[C io.Closer] struct {
	opt  Options
	dial func(context.Context) (C, error)
	log  *slog.Logger

	cur         C
	open        bool
	connectedAt time.Time
	backoff     time.Duration
	next        time.Time // no dial before this
	fails       int       // consecutive failures
	streak      *logthrottle.Streak
}

// New returns a Conn that dials with dial. dial's error is wrapped as
// "NAME: connect to ADDR: ...".
func New[C io.Closer](opt Options, dial func(context.Context) (C, error)) *Conn[C] {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	return &Conn[C]{opt: opt, dial: dial, log: log, streak: &logthrottle.Streak{
		Log: log, Level: slog.LevelWarn, Every: logEvery,
		Failed:    opt.Name + ": delivery failed; the events stay in the channel and will be sent again",
		Recovered: opt.Name + ": delivering again",
	}}
}

// refused marks a batch the downstream answered but did not take.
type refused struct{ err error }

func (r *refused) Error() string { return r.err.Error() }
func (r *refused) Unwrap() error { return r.err }

// Refused wraps err, the reply of a downstream that received a batch and
// did not take it (an RPC status FAILED): Send counts the failure but keeps
// the connection, which still works.
func Refused(err error) error { return &refused{err} }

// Send runs send over the connection, connecting first when there is none
// (or when it is older than ResetInterval), and returns its error. An error
// of send closes the connection, except one wrapped with Refused; either
// counts as a failure and starts or extends the backoff. When send fails on
// a connection that had already served a batch because the receiver closed
// or reset it (an idle timeout, a restarted collector, a load balancer),
// Send connects again and runs send once more at once, without counting a
// failure: the receiver's client in Java sees such a close before sending,
// this one finds out on use. A receiver that had read the batch before
// closing gets it twice, which at-least-once allows.
func (c *Conn[C]) Send(ctx context.Context, send func(C) error) error {
	if c.open && c.opt.ResetInterval > 0 && time.Since(c.connectedAt) >= c.opt.ResetInterval {
		c.log.Debug(c.opt.Name+": resetting the connection (reset-connection-interval)", "addr", c.opt.Addr)
		_ = c.Close() // what was sent on it was acknowledged
	}
	reused := c.open
	if !c.open {
		if err := c.connect(ctx); err != nil {
			return err
		}
	}
	err := send(c.cur)
	var r *refused
	if err != nil && reused && !errors.As(err, &r) && closedByPeer(err) && ctx.Err() == nil {
		c.log.Debug(c.opt.Name+": connection closed by the receiver; reconnecting", "addr", c.opt.Addr, "err", err)
		_ = c.Close() // the receiver closed it already
		if err := c.connect(ctx); err != nil {
			return err
		}
		err = send(c.cur)
	}
	switch {
	case err == nil:
		if c.fails > 0 {
			c.streak.Ok("addr", c.opt.Addr)
		}
		c.fails, c.backoff = 0, 0
		return nil
	case errors.As(err, &r):
		return c.failed(r.err)
	default:
		_ = c.Close() // err is the failure to report
		return c.failed(err)
	}
}

// closedByPeer reports whether err says the other end closed or reset the
// connection, as opposed to a timeout or bad data.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// connect dials once the backoff allows it.
func (c *Conn[C]) connect(ctx context.Context) error {
	if d := time.Until(c.next); d > 0 {
		if !c.opt.WaitBackoff {
			// Part of the streak the failure before it started, and told there.
			return logthrottle.AsReported(fmt.Errorf("%s: %s: %w (retry in %v)", c.opt.Name, c.opt.Addr, ErrBackingOff, d.Round(time.Millisecond)))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: waiting to reconnect to %s: %w", c.opt.Name, c.opt.Addr, ctx.Err())
		case <-t.C:
		}
	}
	cur, err := c.dial(ctx)
	if err != nil {
		err = fmt.Errorf("%s: connect to %s: %w", c.opt.Name, c.opt.Addr, err)
		if ctx.Err() != nil {
			return err // stopping: not the downstream's failure
		}
		c.opt.Counters.ConnectionFailed.Add(1)
		return c.failed(err)
	}
	c.cur, c.open, c.connectedAt = cur, true, time.Now()
	c.opt.Counters.ConnectionCreated.Add(1)
	c.log.Debug(c.opt.Name+": connected", "addr", c.opt.Addr)
	return nil
}

// failed schedules the next dial, tells err in the failure streak and
// returns it marked as told.
func (c *Conn[C]) failed(err error) error {
	c.backoff = min(max(2*c.backoff, minBackoff), maxBackoff)
	c.next = time.Now().Add(c.backoff)
	c.fails++
	return c.streak.Fail(err, "addr", c.opt.Addr, "retry_in", c.backoff.String())
}

// Current returns the open connection, if there is one, so a sink can check
// it before Send.
func (c *Conn[C]) Current() (C, bool) { return c.cur, c.open }

// Close closes the open connection, if any, and returns what its Close
// returned.
func (c *Conn[C]) Close() error {
	if !c.open {
		return nil
	}
	err := c.cur.Close()
	var zero C
	c.cur, c.open = zero, false
	c.opt.Counters.ConnectionClosed.Add(1)
	return err
}

// Stop closes the open connection, if any, and writes the failure summary
// still held back, for a sink that stops while its downstream fails.
func (c *Conn[C]) Stop() error {
	err := c.Close()
	c.streak.Stop()
	return err
}

// Backoff is how long the next dial waits after the last failure (0 after
// a delivery).
func (c *Conn[C]) Backoff() time.Duration { return c.backoff }

// Failures is the number of consecutive failures (0 after a delivery).
func (c *Conn[C]) Failures() int { return c.fails }
