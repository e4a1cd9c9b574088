package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// The performance runs are opt-in (they take tens of seconds and want a
// quiet machine): SLUICE_PERF=1 go test -run Perf -v ./internal/bench/

// pipelineConfig is the one config both measurements use: netcat in,
// memory channel, and the sink given (no retuning between them).
func pipelineConfig(netcatPort int, sink string) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.max-line-length = 2048
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 100000
a1.channels.c1.transactionCapacity = 1000
a1.sinks.k1.channel = c1
%s
`, netcatPort, sink)
}

// TestPerfLatency200 sends 200 events/s of 1 KiB through netcat -> memory
// -> tcp and, beside it in the same run, straight from a sender to a
// receiver (the floor the machine allows), and reports both.
func TestPerfLatency200(t *testing.T) {
	testutil.RequirePerf(t)
	seconds := testutil.EnvInt("SLUICE_PERF_SECONDS", 20)
	const rate, size = 200, 1024
	count := rate * seconds

	stalls := startStallMonitors(t)
	floorRecv, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer floorRecv.Close()
	recv, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	host, port, _ := net.SplitHostPort(recv.Addr())
	ncPort := testutil.FreePort(t)
	a := agenttest.StartConf(t, pipelineConfig(ncPort, fmt.Sprintf("a1.sinks.k1.type = tcp\na1.sinks.k1.hostname = %s\na1.sinks.k1.port = %s\n", host, port)))

	viaAgent, err := Dial(fmt.Sprintf("127.0.0.1:%d", ncPort))
	if err != nil {
		t.Fatal(err)
	}
	direct, err := Dial(floorRecv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+30)*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { _, err := direct.Paced(ctx, 0, count, size, time.Second/rate); errs <- err }()
	go func() { _, err := viaAgent.Paced(ctx, 0, count, size, time.Second/rate); errs <- err }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := recv.WaitFor(ctx, count); err != nil {
		t.Fatal(err)
	}
	if err := floorRecv.WaitFor(ctx, count); err != nil {
		t.Fatal(err)
	}
	_ = viaAgent.Close()
	_ = direct.Close()
	floorUnexplained := logSlow(t, "floor", floorRecv, stalls)
	unexplained := logSlow(t, "agent", recv, stalls)
	floor, got := floorRecv.Report(count), recv.Report(count)
	t.Logf("direct (floor):          %v", floor)
	t.Logf("netcat->memory->tcp:     %v", got)
	t.Logf("sluice minus floor: p50 %+.3f ms, p99 %+.3f ms", float64(got.P50-floor.P50)/1e6, float64(got.P99-floor.P99)/1e6)
	// The agent's own stage histograms say which hop an outlier came from.
	for _, s := range a.Metrics().LatencySnapshot() {
		t.Logf("stage %-10s %-3s p99 %v max %v", s.Stage, s.Component, s.P99, s.Max)
	}
	t.Logf("CPU stalls over 1 ms seen by the monitors: %d; agent max %.2f ms, largest arrival no stall overlapped: agent %.2f ms, floor %.2f ms",
		stalls.count(), float64(got.Max)/1e6, float64(unexplained)/1e6, float64(floorUnexplained)/1e6)
	if got.Lost != 0 || got.Duplicated != 0 {
		t.Fatalf("lost %d, duplicated %d", got.Lost, got.Duplicated)
	}
}

// TestPerfNetcatToFileRoll floods 4 connections of 256-byte lines through
// netcat -> memory -> file_roll and reports lines/s and CPU per line (the
// process's CPU, senders included, so the figure is an upper bound).
func TestPerfNetcatToFileRoll(t *testing.T) {
	testutil.RequirePerf(t)
	const conns, size = 4, 256
	perConn := testutil.EnvInt("SLUICE_PERF_LINES", 2_000_000) / conns
	dir := t.TempDir()
	ncPort := testutil.FreePort(t)
	agenttest.StartConf(t, pipelineConfig(ncPort, fmt.Sprintf("a1.sinks.k1.type = file_roll\na1.sinks.k1.sink.directory = %s\na1.sinks.k1.sink.rollInterval = 0\n", dir)))

	total := conns * perConn
	want := int64(total) * (size + 1)
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	errs := make(chan error, conns)
	for c := range conns {
		go func() {
			s, err := Dial(fmt.Sprintf("127.0.0.1:%d", ncPort))
			if err != nil {
				errs <- err
				return
			}
			if err := s.Flood(uint64(c*perConn), perConn, size); err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		}()
	}
	deadline := time.Now().Add(5 * time.Minute)
	var got int64
	for got < want && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		got = dirBytes(t, dir)
	}
	elapsed := time.Since(start)
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got != want {
		t.Fatalf("file_roll holds %d bytes, want %d", got, want)
	}
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	t.Logf("%d lines of %d bytes over %d connections in %v: %.0f lines/s, %.1f MiB/s, CPU %.2f µs/line (%.2f cores)",
		total, size, conns, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(),
		float64(want)/elapsed.Seconds()/(1<<20), float64(cpu.Microseconds())/float64(total), cpu.Seconds()/elapsed.Seconds())
}

func dirBytes(t *testing.T, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

// TestPerfSeqToNull runs seq -> memory -> null in process and reports
// events/s: the agent's own overhead with no I/O (Flume's memory channel:
// ~123k events/s in the articles).
func TestPerfSeqToNull(t *testing.T) {
	testutil.RequirePerf(t)
	total := testutil.EnvInt("SLUICE_PERF_EVENTS", 10_000_000)
	conf := fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = seq
a1.sources.r1.batchSize = 1000
a1.sources.r1.totalEvents = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 100000
a1.channels.c1.transactionCapacity = 1000
a1.sinks.k1.type = null
a1.sinks.k1.batchSize = 1000
a1.sinks.k1.channel = c1
`, total)
	start := time.Now()
	a := agenttest.StartConf(t, conf)
	var drained int64
	for drained < int64(total) && time.Since(start) < 5*time.Minute {
		time.Sleep(time.Millisecond)
		drained = testutil.Counter(a.Metrics(), metrics.KindSink, "k1", "EventDrainSuccessCount")
	}
	elapsed := time.Since(start)
	if drained != int64(total) {
		t.Fatalf("null sink drained %d of %d", drained, total)
	}
	t.Logf("seq -> memory -> null: %d events in %v: %.2f M events/s", total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds()/1e6)
}
