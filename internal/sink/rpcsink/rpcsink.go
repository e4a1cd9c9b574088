// Package rpcsink is what Flume's two RPC sinks, avro and thrift, share:
// one connection to a Flume source, made on demand, made again after a
// failure with a backoff and replaced every reset-connection-interval
// (internal/downstream); a batch sent in one appendBatch call and its take
// committed only once the source replied OK (flow.BatchSink); the
// properties both read, with Flume's names and defaults. The transport (the
// RPC protocol and its own settings) is the only difference.
package rpcsink

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
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
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// DefaultBatchSize is Flume's batch-size.
const DefaultBatchSize = 100

// Transport is one RPC protocol, over connections of type C.
type Transport[C io.Closer] struct {
	// Kind names the sink in errors and logs: "avro", "thrift".
	Kind string
	// Dial connects to addr, over TLS when cfg is not nil, and makes sure
	// the peer speaks the protocol before any event is sent.
	Dial func(ctx context.Context, addr string, cfg *tls.Config) (C, error)
	// AppendBatch sends events in one call and returns the source's reply,
	// and whether it means the events were committed (OK).
	AppendBatch func(ctx context.Context, c C, events []event.Event) (reply fmt.Stringer, ok bool, err error)
}

// Config is what both RPC sinks read from their properties.
type Config struct {
	Host           string
	Port           int
	BatchSize      int
	ConnectTimeout time.Duration
	RequestTimeout time.Duration
	ResetInterval  time.Duration // 0: never
	TLS            tlsconf.Settings
}

// ReadConfig reads hostname and port (required), batch-size (100),
// connect-timeout and request-timeout (milliseconds; connectDef and
// requestDef by default), reset-connection-interval (seconds, 0 = never)
// and the client TLS keys (ssl, trust-all-certs, truststore,
// truststore-password, truststore-type, include-/exclude-protocols,
// include-/exclude-cipher-suites and sluice's verify-hostname).
func ReadConfig(p *config.Props, connectDef, requestDef time.Duration) Config {
	cfg := Config{Host: p.Required("hostname")}
	if p.Has("port") {
		cfg.Port = p.IntRange("port", 0, 1, 65535)
	} else {
		p.Required("port")
	}
	cfg.BatchSize = p.IntRange("batch-size", DefaultBatchSize, 1, math.MaxInt32)
	ms := func(key string, def time.Duration) time.Duration {
		return time.Duration(p.IntRange(key, int(def/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	}
	cfg.ConnectTimeout = ms("connect-timeout", connectDef)
	cfg.RequestTimeout = ms("request-timeout", requestDef)
	cfg.ResetInterval = time.Duration(p.IntRange("reset-connection-interval", 0, 0, math.MaxInt32)) * time.Second
	cfg.TLS = tlsconf.ReadClient(p)
	return cfg
}

// Writer delivers batches over one connection of its transport, made on
// demand: the flow.BatchWriter of an RPC sink.
type Writer[C io.Closer] struct {
	t    Transport[C]
	host string
	addr string
	tls  tlsconf.Settings

	mu   sync.Mutex // one batch at a time; guards the fields below
	tcfg *tls.Config
	conn *downstream.Conn[C]
}

// NewWriter returns a Writer to cfg's host and port; c receives the
// connection counters.
func NewWriter[C io.Closer](cfg Config, t Transport[C], c *metrics.SinkCounters, log *slog.Logger) *Writer[C] {
	w := &Writer[C]{t: t, host: cfg.Host, addr: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)), tls: cfg.TLS}
	w.conn = downstream.New(downstream.Options{Name: t.Kind + " sink", Addr: w.addr, Counters: c, Log: log, ResetInterval: cfg.ResetInterval},
		func(ctx context.Context) (C, error) { return t.Dial(ctx, w.addr, w.tcfg) }) // called under mu
	return w
}

// Start loads the truststore (when ssl is on). It does not connect: the
// first Write does, so a downstream that is down does not stop the agent.
func (w *Writer[C]) Start(context.Context) error {
	tcfg, err := w.tls.ClientConfig(w.host)
	if err != nil {
		return fmt.Errorf("%s sink: %w", w.t.Kind, err)
	}
	w.mu.Lock()
	w.tcfg = tcfg
	w.mu.Unlock()
	return nil
}

// Write sends events in one appendBatch and returns nil only when the
// source replied OK; another reply is a refusal (downstream.Refused): the
// connection stays, the batch goes back to the channel.
func (w *Writer[C]) Write(ctx context.Context, events []event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.Send(ctx, func(cl C) error {
		reply, ok, err := w.t.AppendBatch(ctx, cl, events)
		if err != nil {
			return fmt.Errorf("%s sink: appendBatch to %s: %w", w.t.Kind, w.addr, err)
		}
		if !ok {
			return downstream.Refused(fmt.Errorf("%s sink: %s replied %s to a batch of %d events (its channel may be full)", w.t.Kind, w.addr, reply, len(events)))
		}
		return nil
	})
}

// Stop closes the connection.
func (w *Writer[C]) Stop(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.Stop()
}

// New returns the sink of env: batches of at most cfg.BatchSize through
// a Writer over t, counted in Flume's sink counters.
func New[C io.Closer](env flow.Env, cfg Config, t Transport[C]) flow.Sink {
	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, NewWriter(cfg, t, c, env.Log()), cfg.BatchSize, c)
}
