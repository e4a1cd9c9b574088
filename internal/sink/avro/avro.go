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
// collectors spreads the agents again. All of this is the thrift sink's too
// (internal/sink/rpcsink); the Avro transport is this package's part.
package avrosink

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/sink/rpcsink"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// DefaultBatchSize is Flume's batch-size.
const DefaultBatchSize = rpcsink.DefaultBatchSize

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
type Writer = rpcsink.Writer[*avrorpc.Client]

// NewWriter returns a Writer; c receives the connection counters.
func NewWriter(opt Options, c *metrics.SinkCounters, log *slog.Logger) *Writer {
	cfg := rpcsink.Config{Host: opt.Host, Port: opt.Port, ResetInterval: opt.ResetInterval, TLS: opt.TLS}
	return rpcsink.NewWriter(cfg, transport(opt.Client, opt.ReceivedAtHeader), c, log)
}

// transport is Flume's Avro RPC with the client settings cc; with
// receivedAt set, each event is sent with that header (see stamped).
func transport(cc avrorpc.ClientConfig, receivedAt string) rpcsink.Transport[*avrorpc.Client] {
	var st stamped // used under the Writer's lock, one batch at a time
	return rpcsink.Transport[*avrorpc.Client]{
		Kind: "avro",
		// The handshake is done at once, so a peer that is not a Flume Avro
		// source is found before events are sent.
		Dial: func(ctx context.Context, addr string, tcfg *tls.Config) (*avrorpc.Client, error) {
			cfg := cc
			cfg.TLS = tcfg
			cl, err := avrorpc.Dial(ctx, addr, cfg)
			if err != nil {
				return nil, err
			}
			if err := cl.Ping(ctx); err != nil {
				_ = cl.Close() // the ping's failure is the one to report
				return nil, err
			}
			return cl, nil
		},
		AppendBatch: func(ctx context.Context, cl *avrorpc.Client, events []event.Event) (fmt.Stringer, bool, error) {
			if receivedAt != "" {
				events = st.with(events, receivedAt)
			}
			reply, err := cl.AppendBatch(ctx, events)
			return reply, reply == avrorpc.OK, err
		},
	}
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
	cfg := rpcsink.ReadConfig(p, avrorpc.DefaultConnectTimeout, avrorpc.DefaultRequestTimeout)
	cc := avrorpc.ClientConfig{ConnectTimeout: cfg.ConnectTimeout, RequestTimeout: cfg.RequestTimeout}
	cc.Deflate = p.Enum("compression-type", "none", "none", "deflate") == "deflate"
	cc.DeflateLevel = p.IntRange("compression-level", 6, 1, 9)
	p.Int("maxIoWorkers", 0)
	receivedAt := p.String("receivedAtHeader", "")
	return rpcsink.New(env, cfg, transport(cc, receivedAt)), nil
}
