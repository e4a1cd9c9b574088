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
// new connection (internal/downstream). With reset-connection-interval the
// connection is replaced that often, so a load balancer in front of several
// collectors spreads the agents again.
package avrosink

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/downstream"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// DefaultBatchSize is Flume's batch-size.
const DefaultBatchSize = 100

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

	mu      sync.Mutex
	cfg     avrorpc.ClientConfig // with TLS loaded
	conn    *downstream.Conn[*avrorpc.Client]
	stamped stamped // events with the receivedAt header, when set
}

// NewWriter returns a Writer; c receives the connection counters.
func NewWriter(opt Options, c *metrics.SinkCounters, log *slog.Logger) *Writer {
	w := &Writer{opt: opt, addr: net.JoinHostPort(opt.Host, strconv.Itoa(opt.Port)), cfg: opt.Client}
	w.conn = downstream.New(downstream.Options{Name: "avro sink", Addr: w.addr, Counters: c, Log: log, ResetInterval: opt.ResetInterval}, w.dial)
	return w
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
	if w.opt.ReceivedAtHeader != "" {
		events = w.stamped.with(events, w.opt.ReceivedAtHeader)
	}
	return w.conn.Send(ctx, func(cl *avrorpc.Client) error {
		st, err := cl.AppendBatch(ctx, events)
		if err != nil {
			return fmt.Errorf("avro sink: appendBatch to %s: %w", w.addr, err)
		}
		if st != avrorpc.OK {
			return downstream.Refused(fmt.Errorf("avro sink: %s replied %s to a batch of %d events (its channel may be full)", w.addr, st, len(events)))
		}
		return nil
	})
}

// dial connects and does the handshake, so a peer that is not a Flume Avro
// source is found before events are sent. Caller holds mu.
func (w *Writer) dial(ctx context.Context) (*avrorpc.Client, error) {
	cl, err := avrorpc.Dial(ctx, w.addr, w.cfg)
	if err != nil {
		return nil, err
	}
	if err := cl.Ping(ctx); err != nil {
		_ = cl.Close() // the ping's failure is the one to report
		return nil, err
	}
	return cl, nil
}

// Stop closes the connection.
func (w *Writer) Stop(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.Stop()
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
