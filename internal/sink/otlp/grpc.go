package otlpsink

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/grpcgzip"
)

// grpcExporter sends over one gRPC client connection, which gRPC
// reconnects by itself; requests made while it is down fail at once with
// UNAVAILABLE (no wait for ready), so the batch goes back to the channel.
type grpcExporter struct {
	opt    Options
	cc     *grpc.ClientConn
	client plogotlp.GRPCClient
	md     metadata.MD
	call   []grpc.CallOption
}

func (e *grpcExporter) start() error {
	creds := insecure.NewCredentials()
	if e.opt.TLS.Enabled {
		host := e.opt.Endpoint
		if i := strings.LastIndex(host, ":"); i > 0 {
			host = strings.Trim(host[:i], "[]")
		}
		tc, err := e.opt.TLS.ClientConfig(host)
		if err != nil {
			return err
		}
		creds = credentials.NewTLS(tc)
	}
	bo := backoff.DefaultConfig
	// Reconnect as sluice's runner retries: a downstream back after a
	// restart is found within seconds, not gRPC's two minutes.
	bo.BaseDelay, bo.MaxDelay = 100*time.Millisecond, 5*time.Second
	cc, err := grpc.NewClient(e.opt.Endpoint,
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: e.opt.ConnectTimeout}),
		// As the Collector's otlp exporter: every address the name
		// resolves to takes requests in turn.
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithUserAgent("sluice"),
	)
	if err != nil {
		return fmt.Errorf("gRPC client for %s: %w", e.opt.Endpoint, err)
	}
	e.cc, e.client = cc, plogotlp.NewGRPCClient(cc)
	e.md = metadata.New(e.opt.Headers)
	if e.opt.Gzip {
		e.call = append(e.call, grpc.UseCompressor(grpcgzip.Name))
	}
	return nil
}

func (e *grpcExporter) stop() {
	if e.cc != nil {
		_ = e.cc.Close()
	}
}

func (e *grpcExporter) export(ctx context.Context, events []event.Event) outcome {
	req := plogotlp.NewExportRequestFromLogs(e.opt.Mapping.Logs(events))
	ctx, cancel := context.WithTimeout(ctx, e.opt.RequestTimeout)
	defer cancel()
	if len(e.md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, e.md)
	}
	resp, err := e.client.Export(ctx, req, e.call...)
	if err == nil {
		ps := resp.PartialSuccess()
		return outcome{kind: kindOK, rejected: ps.RejectedLogRecords(), message: ps.ErrorMessage()}
	}
	return grpcOutcome(e.opt.Endpoint, err)
}

// grpcOutcome classifies a failed call.
func grpcOutcome(endpoint string, err error) outcome {
	st := status.Convert(err)
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	werr := fmt.Errorf("otlp sink: export to %s: %s: %s", endpoint, st.Code(), st.Message())
	switch st.Code() {
	case codes.ResourceExhausted:
		if delay == 0 && strings.Contains(st.Message(), "larger than max") {
			return outcome{kind: kindTooLarge, message: st.Message(), err: werr}
		}
		return outcome{kind: kindRetry, delay: delay, err: werr}
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled, codes.OutOfRange, codes.DataLoss:
		return outcome{kind: kindRetry, delay: delay, err: werr}
	case codes.InvalidArgument:
		return outcome{kind: kindRejected, message: st.Message(), err: werr}
	}
	return outcome{kind: kindKeepRetry, err: fmt.Errorf("%w (kept in the channel and retried: fix the downstream or this sink's config)", werr)}
}
