package otlpsink

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
)

// The benchmarks below run OTLP/gRPC -> otlp source -> memory channel ->
// otlp sink -> OTLP/gRPC in one process. Their sender sends bytes marshalled
// once and their receiver only counts the records of what it gets
// (protowire), as `sluice bench`'s otlp sender and receiver do, so that the
// process's CPU and allocations are mostly the agent's: the source, the
// channel, the sink and gRPC's share on each side.

// BenchmarkBridge sends 1,000 records of 256 bytes per call, 4 calls in
// flight: the agent's share of `sluice bench otlp-throughput`, for profiles;
// with the sink's compression off (as the bench's config has it on
// loopback) and on (the sink's default).
func BenchmarkBridge(b *testing.B) {
	for _, compression := range []string{"none", "gzip"} {
		b.Run("compression="+compression, func(b *testing.B) { benchmarkBridge(b, compression) })
	}
}

func benchmarkBridge(b *testing.B, compression string) {
	send, down := startBridge(b, benchRequest(1000, 256), compression)
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for range next {
				send(b)
			}
		})
	}
	for i := 0; i < b.N; i++ {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	if !down.wait(1000*b.N, time.Minute) {
		b.Fatalf("%d of %d records arrived", down.count(), 1000*b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(1000*b.N), "ns/record")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(1000*b.N), "cpu-ns/record")
}

// BenchmarkBridgeOneByOne sends one record per call and waits for it
// downstream before the next: the latency path's cost per record.
func BenchmarkBridgeOneByOne(b *testing.B) {
	send, down := startBridge(b, benchRequest(1, 256), "none")
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		send(b)
		if !down.wait(i+1, time.Minute) {
			b.Fatalf("record %d did not arrive", i)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/record")
}

// benchRequest is an ExportLogsServiceRequest of n records under one
// resource (service.name), each with a time and a string body of size
// bytes.
func benchRequest(n, size int) []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "bench")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for i := range n {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(1_700_000_000_000_000_000)
		body := fmt.Sprintf("%d ", i)
		lr.Body().SetStr(body + strings.Repeat("x", size-len(body)))
	}
	req, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		panic(err)
	}
	return req
}

// startBridge starts the source, channel, sink (with compression, gzip or
// none) and a counting receiver, and returns a function that sends req to
// the source until it is taken.
func startBridge(b *testing.B, req []byte, compression string) (func(*testing.B), *countingReceiver) {
	src, pl := startSource(b)
	down := newCountingReceiver(b)
	env := flow.Env{Agent: "a1", Name: "k1", Type: "otlp", Channel: pl.Channel}
	p := config.FromMap("a1.sinks.k1.", map[string]string{"endpoint": down.addr, "compression": compression, "batchSize": "1000"})
	s, err := New(env, p)
	if err != nil || p.Err() != nil {
		b.Fatal(err, p.Err())
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	runner := flow.NewSinkRunner("k1", s, nil)
	runner.Start()
	b.Cleanup(func() {
		runner.Stop(context.Background())
		s.Stop(context.Background())
	})
	cc, err := grpc.NewClient(src.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	send := func(b *testing.B) {
		for {
			var resp []byte
			err := cc.Invoke(context.Background(), exportMethod, &req, &resp, grpc.ForceCodecV2(rawCodec{}))
			if err == nil {
				return
			}
			time.Sleep(time.Millisecond) // the channel is full: as an exporter, send again
		}
	}
	return send, down
}

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

// countingReceiver is an OTLP/gRPC logs server that counts the records of
// the requests it gets and answers each with an empty response.
type countingReceiver struct {
	addr    string
	mu      sync.Mutex
	n       int
	arrived chan struct{}
}

func newCountingReceiver(b *testing.B) *countingReceiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r := &countingReceiver{addr: ln.Addr().String(), arrived: make(chan struct{}, 1)}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "opentelemetry.proto.collector.logs.v1.LogsService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Export", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			n := countRecords(req, 0)
			r.mu.Lock()
			r.n += n
			r.mu.Unlock()
			select {
			case r.arrived <- struct{}{}:
			default:
			}
			empty := []byte{}
			return &empty, nil
		}}},
	}, nil)
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	return r
}

// countRecords counts the log records of an ExportLogsServiceRequest:
// resource_logs(1) > scope_logs(2) > log_records(2).
func countRecords(b []byte, depth int) int {
	path := [...]protowire.Number{1, 2, 2}
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return n
		}
		if typ == protowire.BytesType && num == path[depth] {
			if depth == len(path)-1 {
				n++
			} else {
				v, _ := protowire.ConsumeBytes(b)
				n += countRecords(v, depth+1)
			}
		}
		b = b[l:]
	}
	return n
}

func (r *countingReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// wait waits up to d for n records in all.
func (r *countingReceiver) wait(n int, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for r.count() < n {
		select {
		case <-r.arrived:
		case <-t.C:
			return r.count() >= n
		}
	}
	return true
}

// processCPU is the CPU time this process used so far, in nanoseconds
// (steadier than the wall clock on a busy machine).
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
