package otlpsink

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil/otlptest"
)

// BenchmarkBridge is OTLP/gRPC -> otlp source -> memory channel -> otlp
// sink -> OTLP/gRPC in one process, 1,000 records of 256 bytes per call:
// the agent's share of `sluice bench otlp-throughput`, for profiles.
func BenchmarkBridge(b *testing.B) {
	src, pl := startSource(b)
	down := otlptest.NewGRPCReceiver(b, nil)
	env := flow.Env{Agent: "a1", Name: "k1", Type: "otlp", Channel: pl.Channel}
	p := config.FromMap("a1.sinks.k1.", map[string]string{"endpoint": down.Addr(), "compression": "none", "batchSize": "1000"})
	s, err := New(env, p)
	if err != nil || p.Err() != nil {
		b.Fatal(err, p.Err())
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	runner := flow.NewSinkRunner("k1", s, nil)
	runner.Start()
	defer func() {
		runner.Stop(context.Background())
		s.Stop(context.Background())
	}()
	cc, err := grpc.NewClient(src.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	cl := plogotlp.NewGRPCClient(cc)
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "bench")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for i := range 1000 {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(1_700_000_000_000_000_000)
		body := fmt.Sprintf("%d ", i)
		lr.Body().SetStr(body + strings.Repeat("x", 256-len(body)))
	}
	req := plogotlp.NewExportRequestFromLogs(ld)
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for {
			_, err := cl.Export(context.Background(), req)
			if err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if !down.WaitCount(1000*b.N, time.Minute) {
		b.Fatalf("%d of %d records arrived", down.Count(), 1000*b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(1000*b.N), "ns/record")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(1000*b.N), "cpu-ns/record")
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

// BenchmarkBridgeOneByOne sends one record per call and waits for it
// downstream before the next: the latency path's cost per record.
func BenchmarkBridgeOneByOne(b *testing.B) {
	src, pl := startSource(b)
	down := otlptest.NewGRPCReceiver(b, nil)
	env := flow.Env{Agent: "a1", Name: "k1", Type: "otlp", Channel: pl.Channel}
	p := config.FromMap("a1.sinks.k1.", map[string]string{"endpoint": down.Addr(), "compression": "none", "batchSize": "1000"})
	s, err := New(env, p)
	if err != nil || p.Err() != nil {
		b.Fatal(err, p.Err())
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	runner := flow.NewSinkRunner("k1", s, nil)
	runner.Start()
	defer func() {
		runner.Stop(context.Background())
		s.Stop(context.Background())
	}()
	cc, err := grpc.NewClient(src.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	cl := plogotlp.NewGRPCClient(cc)
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetTimestamp(1_700_000_000_000_000_000)
	lr.Body().SetStr(strings.Repeat("x", 256))
	req := plogotlp.NewExportRequestFromLogs(ld)
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := cl.Export(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		if !down.WaitCount(i+1, time.Minute) {
			b.Fatalf("record %d did not arrive", i)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/record")
}
