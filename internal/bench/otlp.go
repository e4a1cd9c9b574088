package bench

import (
	"context"
	"fmt"
	"net"
	"time"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// SendOTLP sends OTLP/gRPC logs Export calls (the otlp source), one record
// per event; ReceiveOTLP is an OTLP/gRPC logs receiver (downstream of an
// otlp sink). Both are pdata's own client and server.
const (
	SendOTLP    = "otlp"
	ReceiveOTLP = "otlp"
)

// otlpClient sends each batch in one Export call over one connection.
type otlpClient struct {
	cc   *grpc.ClientConn
	cl   plogotlp.GRPCClient
	size int
	line []byte
}

func dialOTLP(addr string, size int) (client, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("bench: otlp client for %s: %w", addr, err)
	}
	return &otlpClient{cc: cc, cl: plogotlp.NewGRPCClient(cc), size: size}, nil
}

func (c *otlpClient) send(ctx context.Context, first uint64, n int, sent time.Time) (bool, error) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "sluice-bench")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	lrs.EnsureCapacity(n)
	ts := sent.UnixNano()
	for i := range n {
		c.line = AppendLine(c.line[:0], first+uint64(i), sent, c.size)
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(pcommon.Timestamp(ts))
		lr.Body().SetStr(string(c.line[:len(c.line)-1]))
	}
	_, err := c.cl.Export(ctx, plogotlp.NewExportRequestFromLogs(ld))
	switch status.Code(err) {
	case codes.OK:
		return true, nil
	case codes.Unavailable:
		return false, nil // refused (a full channel): sent again
	}
	return false, fmt.Errorf("bench: otlp export: %w", err)
}

func (c *otlpClient) close() { _ = c.cc.Close() }

// ListenOTLP starts a receiver of OTLP/gRPC logs on addr: every record's
// body is recorded, and each call answered success.
func ListenOTLP(addr string) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench otlp receiver: %w", err)
	}
	r := NewReceiver()
	r.ln = ln
	srv := grpc.NewServer()
	plogotlp.RegisterGRPCServer(srv, &otlpReceiver{r: r})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = srv.Serve(ln)
	}()
	r.onClose = srv.Stop
	return r, nil
}

type otlpReceiver struct {
	plogotlp.UnimplementedGRPCServer
	r *Receiver
}

func (o *otlpReceiver) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	now := time.Now().UnixNano()
	for _, rl := range req.Logs().ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				body := lr.Body().Str()
				// Read in place: RecordAt only parses it.
				o.r.RecordAt(unsafe.Slice(unsafe.StringData(body), len(body)), now)
			}
		}
	}
	return plogotlp.NewExportResponse(), nil
}

// The OTLP presets: the bridge beside the netcat pipeline, each agent a
// process of its own, so that their CPU per event compare.
func init() {
	Presets = append(Presets,
		Preset{
			Name: "otlp-throughput",
			Title: "throughput, 4 connections as fast as they go, 256-byte bodies: otlp (1,000 records per Export call) -> memory -> otlp, " +
				"beside netcat (1,000 lines per write) -> memory -> tcp; each agent a process of its own, interleaved rounds",
			Short: "otlp -> memory -> otlp, netcat -> memory -> tcp",
			Runs: []PresetRun{
				{Label: "netcat", Config: "bench-throughput-memory.properties",
					Load: Load{Transport: SendNetcat, Size: 256, Conns: 4, Count: 1_000_000, Batch: 1000}, Receive: Receive{Kind: ReceiveTCP}},
				{Label: "otlp", Config: "bench-otlp.properties", Base: "netcat",
					Load: Load{Transport: SendOTLP, Size: 256, Conns: 4, Count: 1_000_000, Batch: 1000}, Receive: Receive{Kind: ReceiveOTLP}},
			},
			Process: true,
			Rounds:  3,
			Needs:   []string{"source:otlp"},
		},
		Preset{
			Name: "otlp-latency",
			Title: "1,000 records/s of 256 bytes for 30 s, one connection, one record per call: otlp -> memory -> otlp, " +
				"beside netcat -> memory -> tcp at the same rate; each agent a process of its own",
			Short: "otlp -> memory -> otlp, netcat -> memory -> tcp, paced",
			Runs: []PresetRun{
				{Label: "netcat", Config: "bench-latency.properties",
					Load: Load{Transport: SendNetcat, Rate: 1000, Size: 256, Duration: 30 * time.Second, Batch: 1}, Receive: Receive{Kind: ReceiveTCP}},
				{Label: "otlp", Config: "bench-otlp.properties", Base: "netcat",
					Load: Load{Transport: SendOTLP, Rate: 1000, Size: 256, Duration: 30 * time.Second, Batch: 1}, Receive: Receive{Kind: ReceiveOTLP}},
			},
			Process: true,
			Rounds:  2,
			Needs:   []string{"source:otlp"},
		},
	)
}
