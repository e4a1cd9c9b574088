// Package avrosink is Flume's Avro sink ("avro"): it sends batches of events
// to a Flume (or sluice) Avro source with appendBatch and commits its take
// only after the source replied OK, so a hop between agents never loses an
// event it took (at-least-once: a batch whose reply was lost is sent again).
//
// A reply other than OK (FAILED: the receiving channel is full) or any error
// rolls the batch back into the channel. An error also closes the
// connection; the next batch connects again after a backoff (100 ms
// doubling to 5 s, reset by a delivered batch). Within that backoff a batch
// fails at once without dialing, so a failover or load_balance group hands
// it to its other sinks without delay. A connection the receiver closed
// while it was idle is not a failure: the batch is sent again at once on a
// new connection. With
// reset-connection-interval the connection is replaced that often, so a
// load balancer in front of several collectors spreads the agents again.
package avrosink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Defaults, Flume's.
const (
	DefaultBatchSize = 100
	minBackoff       = 100 * time.Millisecond
	maxBackoff       = 5 * time.Second
	logEvery         = 30 * time.Second
)

// Options configure a Writer.
type Options struct {
	Host          string
	Port          int
	Client        avrorpc.ClientConfig // TLS is filled from TLS at Start
	TLS           tlsconf.Settings
	ResetInterval time.Duration // 0: never
	// ReceivedAtHeader, when set, names a header each event is sent with,
	// holding the time the first agent received it (Unix nanoseconds), for
	// a next tier's avro source with the same receivedAtHeader.
	ReceivedAtHeader string
}

// Writer delivers batches over one avrorpc.Client, connecting on demand.
type Writer struct {
	opt  Options
	addr string
	c    *metrics.SinkCounters
	log  *slog.Logger

	mu          sync.Mutex
	cfg         avrorpc.ClientConfig // with TLS loaded
	client      *avrorpc.Client
	connectedAt time.Time
	backoff     time.Duration
	next        time.Time // no dial before this
	fails       int
	lastLog     time.Time
	suppressed  int
	stamped     stamped // events with the receivedAt header, when set
}

// NewWriter returns a Writer; c receives the connection counters.
func NewWriter(opt Options, c *metrics.SinkCounters, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	return &Writer{opt: opt, addr: net.JoinHostPort(opt.Host, strconv.Itoa(opt.Port)), c: c, log: log, cfg: opt.Client}
}

// Start loads the truststore (when ssl is on). It does not connect: the
// first Write does, so a downstream that is down does not stop the agent.
func (w *Writer) Start(context.Context) error {
	tcfg, err := w.opt.TLS.ClientConfig(w.opt.Host)
	if err != nil {
		return fmt.Errorf("avro sink: %w", err)
	}
	w.mu.Lock()
	w.cfg.TLS = tcfg
	w.mu.Unlock()
	return nil
}

// Write sends events in one appendBatch and returns nil only when the
// source replied OK.
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.client != nil && w.opt.ResetInterval > 0 && time.Since(w.connectedAt) >= w.opt.ResetInterval {
		w.log.Debug("avro sink: resetting the connection (reset-connection-interval)", "addr", w.addr)
		w.close()
	}
	reused := w.client != nil
	if w.client == nil {
		if err := w.connect(ctx); err != nil {
			return err
		}
	}
	if w.opt.ReceivedAtHeader != "" {
		events = w.stamped.with(events, w.opt.ReceivedAtHeader)
	}
	st, err := w.client.AppendBatch(ctx, events)
	if err != nil && reused && closedByPeer(err) && ctx.Err() == nil {
		// The receiver closed the connection while it sat idle (an avro
		// source's idle-timeout, a restarted collector, a load balancer).
		// Java's client sees the close before sending and reconnects; this
		// one finds out on use, so it reconnects and sends the batch once
		// more instead of failing it. A receiver that had read the batch
		// before closing gets it twice, which at-least-once allows.
		w.log.Debug("avro sink: connection closed by the receiver; reconnecting", "addr", w.addr, "err", err)
		w.close()
		if err := w.connect(ctx); err != nil {
			return err
		}
		st, err = w.client.AppendBatch(ctx, events)
	}
	if err != nil {
		err = fmt.Errorf("avro sink: appendBatch to %s: %w", w.addr, err)
		w.close()
		w.failed(err)
		return err
	}
	if st != avrorpc.OK {
		err := fmt.Errorf("avro sink: %s replied %s to a batch of %d events (its channel may be full)", w.addr, st, len(events))
		w.failed(err)
		return err
	}
	if w.fails > 0 {
		w.log.Info("avro sink: delivering again", "addr", w.addr, "failures", w.fails)
	}
	w.fails, w.suppressed, w.backoff = 0, 0, 0
	return nil
}

// closedByPeer reports whether err says the other end closed or reset the
// connection, as opposed to a timeout or bad data.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// errBackingOff is returned, without dialing, while a failed connection's
// backoff lasts.
var errBackingOff = errors.New("not reconnecting yet after a failure")

// connect dials and does the handshake, so a peer that is not a Flume Avro
// source is found before events are sent. Within the backoff after a
// failure it fails at once without dialing, as Flume's sink fails at once
// when it cannot connect: waiting here would stall a sink group, whose
// other sinks should take the batch now. Caller holds mu.
func (w *Writer) connect(ctx context.Context) error {
	if d := time.Until(w.next); d > 0 {
		return fmt.Errorf("avro sink: %s: %w (retry in %v)", w.addr, errBackingOff, d.Round(time.Millisecond))
	}
	cl, err := avrorpc.Dial(ctx, w.addr, w.cfg)
	if err == nil {
		if err = cl.Ping(ctx); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		w.c.ConnectionFailed.Add(1)
		err = fmt.Errorf("avro sink: connect to %s: %w", w.addr, err)
		w.failed(err)
		return err
	}
	w.client, w.connectedAt = cl, time.Now()
	w.c.ConnectionCreated.Add(1)
	w.log.Debug("avro sink: connected", "addr", w.addr)
	return nil
}

// close drops the connection. Caller holds mu.
func (w *Writer) close() {
	if w.client == nil {
		return
	}
	_ = w.client.Close()
	w.client = nil
	w.c.ConnectionClosed.Add(1)
}

// failed schedules the next dial and logs err, throttled. Caller holds mu.
func (w *Writer) failed(err error) {
	w.backoff = min(max(2*w.backoff, minBackoff), maxBackoff)
	w.next = time.Now().Add(w.backoff)
	w.fails++
	now := time.Now()
	if w.fails == 1 || now.Sub(w.lastLog) >= logEvery {
		w.log.Warn("avro sink: delivery failed; the events stay in the channel and will be sent again",
			"addr", w.addr, "err", err, "failures", w.fails, "suppressed", w.suppressed, "retry_in", w.backoff)
		w.lastLog, w.suppressed = now, 0
		return
	}
	w.suppressed++
}

// Stop closes the connection.
func (w *Writer) Stop(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.close()
	return nil
}

// New builds an Avro sink from its properties: hostname and port
// (required), batch-size (100), connect-timeout (20000 ms),
// request-timeout (20000 ms), reset-connection-interval (seconds, 0 =
// never), compression-type (none | deflate), compression-level (6), ssl,
// trust-all-certs, truststore, truststore-password, truststore-type
// (PKCS12 | PEM), include-/exclude-protocols, include-/exclude-cipher-suites,
// maxIoWorkers (accepted, unused), and sluice's verify-hostname (true) and
// receivedAtHeader (unset:
// the header that carries each event's first receive time to the next tier).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	opt := Options{Host: p.Required("hostname")}
	if p.Has("port") {
		opt.Port = p.IntRange("port", 0, 1, 65535)
	} else {
		p.Required("port")
	}
	batch := p.IntRange("batch-size", DefaultBatchSize, 1, math.MaxInt32)
	ms := func(key string, def time.Duration) time.Duration {
		return time.Duration(p.IntRange(key, int(def/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	}
	opt.Client.ConnectTimeout = ms("connect-timeout", avrorpc.DefaultConnectTimeout)
	opt.Client.RequestTimeout = ms("request-timeout", avrorpc.DefaultRequestTimeout)
	opt.ResetInterval = time.Duration(p.IntRange("reset-connection-interval", 0, 0, math.MaxInt32)) * time.Second
	opt.Client.Deflate = p.Enum("compression-type", "none", "none", "deflate") == "deflate"
	opt.Client.DeflateLevel = p.IntRange("compression-level", 6, 1, 9)
	opt.TLS = tlsconf.ReadClient(p)
	p.Int("maxIoWorkers", 0)
	opt.ReceivedAtHeader = p.String("receivedAtHeader", "")

	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, NewWriter(opt, c, env.Log()), batch, c), nil
}
