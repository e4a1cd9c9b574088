package bench

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// SendOTLP sends OTLP/gRPC logs Export calls (the otlp source), one record
// per event; ReceiveOTLP is an OTLP/gRPC logs receiver (downstream of an
// otlp sink). Both write and read the protobuf themselves (protowire), so
// that the load generator costs little beside the agent it measures.
const (
	SendOTLP    = "otlp"
	ReceiveOTLP = "otlp"
)

const exportMethod = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"

// rawCodec sends and receives messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// otlpClient sends each batch in one Export call over one connection.
type otlpClient struct {
	cc         *grpc.ClientConn
	size       int
	line       []byte
	rec, recs  []byte // one LogRecord; the LogRecords of the batch
	scope, req []byte
}

func dialOTLP(addr string, size int) (client, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("bench: otlp client for %s: %w", addr, err)
	}
	return &otlpClient{cc: cc, size: size}, nil
}

// resource is the ResourceLogs.resource of every request: service.name.
var resource = func() []byte {
	var v, kv, r []byte
	v = protowire.AppendTag(v, 1, protowire.BytesType) // AnyValue.string_value
	v = protowire.AppendString(v, "sluice-bench")
	kv = protowire.AppendTag(kv, 1, protowire.BytesType) // KeyValue.key
	kv = protowire.AppendString(kv, "service.name")
	kv = protowire.AppendTag(kv, 2, protowire.BytesType) // KeyValue.value
	kv = protowire.AppendBytes(kv, v)
	r = protowire.AppendTag(r, 1, protowire.BytesType) // Resource.attributes
	r = protowire.AppendBytes(r, kv)
	return r
}()

func (c *otlpClient) send(ctx context.Context, first uint64, n int, sent time.Time) (bool, error) {
	c.recs = c.recs[:0]
	ts := uint64(sent.UnixNano())
	for i := range n {
		c.line = AppendLine(c.line[:0], first+uint64(i), sent, c.size)
		body := c.line[:len(c.line)-1]
		r := protowire.AppendTag(c.rec[:0], 1, protowire.Fixed64Type) // LogRecord.time_unix_nano
		r = protowire.AppendFixed64(r, ts)
		r = protowire.AppendTag(r, 5, protowire.BytesType) // LogRecord.body
		r = protowire.AppendVarint(r, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(body))))
		r = protowire.AppendTag(r, 1, protowire.BytesType) // AnyValue.string_value
		r = protowire.AppendBytes(r, body)
		c.rec = r
		c.recs = protowire.AppendTag(c.recs, 2, protowire.BytesType) // ScopeLogs.log_records
		c.recs = protowire.AppendBytes(c.recs, r)
	}
	// ResourceLogs{resource, scope_logs: ScopeLogs{log_records...}} in
	// ExportLogsServiceRequest.resource_logs.
	c.scope = protowire.AppendTag(c.scope[:0], 1, protowire.BytesType)
	c.scope = protowire.AppendBytes(c.scope, resource)
	c.scope = protowire.AppendTag(c.scope, 2, protowire.BytesType)
	c.scope = protowire.AppendBytes(c.scope, c.recs)
	c.req = protowire.AppendTag(c.req[:0], 1, protowire.BytesType)
	c.req = protowire.AppendBytes(c.req, c.scope)
	var resp []byte
	err := c.cc.Invoke(ctx, exportMethod, &c.req, &resp, grpc.ForceCodecV2(rawCodec{}))
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
// body (a string) is recorded, and each call answered success.
func ListenOTLP(addr string) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench otlp receiver: %w", err)
	}
	r := NewReceiver()
	r.ln = ln
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "opentelemetry.proto.collector.logs.v1.LogsService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Export", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			recordBodies(r, req, time.Now().UnixNano())
			empty := []byte{} // an ExportLogsServiceResponse with nothing in it
			return &empty, nil
		}}},
	}, nil)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = srv.Serve(ln)
	}()
	r.onClose = srv.Stop
	return r, nil
}

// recordBodies records the string body of every record of an
// ExportLogsServiceRequest; what does not parse counts as malformed.
func recordBodies(r *Receiver, req []byte, now int64) {
	// resource_logs(1) > scope_logs(2) > log_records(2) > body(5) > string_value(1)
	path := []protowire.Number{1, 2, 2, 5, 1}
	var walk func(b []byte, depth int)
	walk = func(b []byte, depth int) {
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				r.rec.malformed()
				return
			}
			b = b[n:]
			if typ != protowire.BytesType || num != path[depth] {
				if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
					r.rec.malformed()
					return
				}
				b = b[n:]
				continue
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				r.rec.malformed()
				return
			}
			b = b[n:]
			if depth == len(path)-1 {
				r.RecordAt(v, now)
			} else {
				walk(v, depth+1)
			}
		}
	}
	walk(req, 0)
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
