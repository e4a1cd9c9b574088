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
// collectors spreads the agents again. All of this is the avro sink's too
// (internal/sink/rpcsink); the Thrift transport is this package's part.
package thriftsink

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/sink/rpcsink"
	"github.com/sluicehq/sluice/internal/thriftrpc"
)

// DefaultBatchSize is Flume's batch-size.
const DefaultBatchSize = rpcsink.DefaultBatchSize

// transport is Flume's Thrift RPC with the client settings cc.
func transport(cc thriftrpc.ClientConfig) rpcsink.Transport[*thriftrpc.Client] {
	return rpcsink.Transport[*thriftrpc.Client]{
		Kind: "thrift",
		Dial: func(ctx context.Context, addr string, tcfg *tls.Config) (*thriftrpc.Client, error) {
			cfg := cc
			cfg.TLS = tcfg
			return thriftrpc.Dial(ctx, addr, cfg)
		},
		AppendBatch: func(ctx context.Context, cl *thriftrpc.Client, events []event.Event) (fmt.Stringer, bool, error) {
			reply, err := cl.AppendBatch(ctx, events)
			return reply, reply == thriftrpc.OK, err
		},
	}
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
	cfg := rpcsink.ReadConfig(p, thriftrpc.DefaultConnectTimeout, thriftrpc.DefaultRequestTimeout)
	cc := thriftrpc.ClientConfig{ConnectTimeout: cfg.ConnectTimeout, RequestTimeout: cfg.RequestTimeout}
	proto, err := thriftrpc.ParseProtocol(p.String("protocol", "compact"))
	if err != nil {
		p.Errorf("protocol", "%v; Flume's thrift sink speaks compact (the default) or binary, as the source it sends to", err)
	}
	cc.Protocol = proto
	if p.Has("connection-reset-interval") {
		// Flume's user guide documents this name, its code reads the
		// other; whoever wrote it wants connections reset.
		cfg.ResetInterval = time.Duration(p.IntRange("connection-reset-interval", 0, 0, math.MaxInt32)) * time.Second
		if p.Has("reset-connection-interval") {
			p.Errorf("connection-reset-interval", "both reset-connection-interval and connection-reset-interval are set; keep one")
		}
	}
	for _, k := range []string{"client-principal", "client-keytab", "server-principal"} {
		p.String(k, "")
	}
	if p.Bool("kerberos", false) {
		p.Errorf("kerberos", "%s", thriftrpc.KerberosRefused)
	}
	return rpcsink.New(env, cfg, transport(cc)), nil
}
