// Package thriftsink is Flume's Thrift sink ("thrift",
// org.apache.flume.sink.ThriftSink): it sends batches of events to a Flume
// (or sluice) Thrift source, or any server of Flume's ThriftSourceProtocol,
// with appendBatch, and commits its take only after the server replied OK,
// so a hop between agents never loses an event it took (at-least-once: a
// batch whose reply was lost is sent again).
//
// A reply other than OK (FAILED: the receiving channel is full; ERROR) or
// any error rolls the batch back into the channel. An error also closes the
// connection; the next batch connects again after a backoff (100 ms doubling
// to 5 s, reset by a delivered batch). Within that backoff a batch fails at
// once without dialing, so a failover or load_balance group hands it to its
// other sinks without delay. A connection the receiver closed while it was
// idle is not a failure: the batch is sent again at once on a new
// connection (internal/downstream). With reset-connection-interval the
// connection is replaced that often, so a load balancer in front of several
// collectors spreads the agents again.
package thriftsink

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/downstream"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/thriftrpc"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// DefaultBatchSize is Flume's batch-size.
const DefaultBatchSize = 100

// Options configure a Writer.
type Options struct {
	Host          string
	Port          int
	Client        thriftrpc.ClientConfig // TLS is filled from TLS at Start
	TLS           tlsconf.Settings
	ResetInterval time.Duration // 0: never
}

// Writer delivers batches over one thriftrpc.Client, connecting on demand.
type Writer struct {
	opt  Options
	addr string

	mu   sync.Mutex
	cfg  thriftrpc.ClientConfig // with TLS loaded
	conn *downstream.Conn[*thriftrpc.Client]
}

// NewWriter returns a Writer; c receives the connection counters.
func NewWriter(opt Options, c *metrics.SinkCounters, log *slog.Logger) *Writer {
	w := &Writer{opt: opt, addr: net.JoinHostPort(opt.Host, strconv.Itoa(opt.Port)), cfg: opt.Client}
	w.conn = downstream.New(downstream.Options{Name: "thrift sink", Addr: w.addr, Counters: c, Log: log, ResetInterval: opt.ResetInterval},
		func(ctx context.Context) (*thriftrpc.Client, error) { return thriftrpc.Dial(ctx, w.addr, w.cfg) })
	return w
}

// Start loads the truststore (when ssl is on). It does not connect: the
// first Write does, so a downstream that is down does not stop the agent.
func (w *Writer) Start(context.Context) error {
	tcfg, err := w.opt.TLS.ClientConfig(w.opt.Host)
	if err != nil {
		return fmt.Errorf("thrift sink: %w", err)
	}
	w.mu.Lock()
	w.cfg.TLS = tcfg
	w.mu.Unlock()
	return nil
}

// Write sends events in one appendBatch and returns nil only when the
// server replied OK.
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.Send(ctx, func(cl *thriftrpc.Client) error {
		st, err := cl.AppendBatch(ctx, events)
		if err != nil {
			return fmt.Errorf("thrift sink: appendBatch to %s: %w", w.addr, err)
		}
		if st != thriftrpc.OK {
			return downstream.Refused(fmt.Errorf("thrift sink: %s replied %s to a batch of %d events (its channel may be full)", w.addr, st, len(events)))
		}
		return nil
	})
}

// Stop closes the connection.
func (w *Writer) Stop(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.Stop()
}

// New builds a Thrift sink from its properties: hostname and port
// (required), protocol (compact | binary, Flume's default compact),
// batch-size (100), connect-timeout (20000 ms), request-timeout (20000 ms),
// reset-connection-interval (seconds, 0 = never; the user guide's spelling
// connection-reset-interval is read too), ssl, trust-all-certs, truststore,
// truststore-password, truststore-type (PKCS12 | PEM),
// include-/exclude-protocols, include-/exclude-cipher-suites; kerberos
// (only false: SASL/GSSAPI is not provided), client-principal,
// client-keytab and server-principal (read, unused without kerberos); and
// sluice's verify-hostname (true).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	opt := Options{Host: p.Required("hostname")}
	if p.Has("port") {
		opt.Port = p.IntRange("port", 0, 1, 65535)
	} else {
		p.Required("port")
	}
	proto, err := thriftrpc.ParseProtocol(p.String("protocol", "compact"))
	if err != nil {
		p.Errorf("protocol", "%v; Flume's thrift sink speaks compact (the default) or binary, as the source it sends to", err)
	}
	opt.Client.Protocol = proto
	batch := p.IntRange("batch-size", DefaultBatchSize, 1, math.MaxInt32)
	ms := func(key string, def time.Duration) time.Duration {
		return time.Duration(p.IntRange(key, int(def/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	}
	opt.Client.ConnectTimeout = ms("connect-timeout", thriftrpc.DefaultConnectTimeout)
	opt.Client.RequestTimeout = ms("request-timeout", thriftrpc.DefaultRequestTimeout)
	reset := p.IntRange("reset-connection-interval", 0, 0, math.MaxInt32)
	if p.Has("connection-reset-interval") {
		// Flume's user guide documents this name, its code reads the
		// other; whoever wrote it wants connections reset.
		reset = p.IntRange("connection-reset-interval", 0, 0, math.MaxInt32)
		if p.Has("reset-connection-interval") {
			p.Errorf("connection-reset-interval", "both reset-connection-interval and connection-reset-interval are set; keep one")
		}
	}
	opt.ResetInterval = time.Duration(reset) * time.Second
	opt.TLS = tlsconf.ReadClient(p)
	for _, k := range []string{"client-principal", "client-keytab", "server-principal"} {
		p.String(k, "")
	}
	if p.Bool("kerberos", false) {
		p.Errorf("kerberos", "%s", thriftrpc.KerberosRefused)
	}

	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, NewWriter(opt, c, env.Log()), batch, c), nil
}
