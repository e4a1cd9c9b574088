package topology

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Opt-in measurements of the Avro hop (they take tens of seconds and want a
// quiet machine); docs/PERFORMANCE.md records them:
//
//	SLUICE_PERF=1 go test -run PerfAvro -v -count=1 ./internal/systemtest/topology/

// hopConfigs are the two agents of every measurement, untuned: a1 = avro
// source → memory → avro sink (Flume's defaults: batch-size 100) to a2 =
// avro source → memory → sink2.
func hopConfigs(p1, p2 int, sink2 string) (a1, a2 string) {
	a1 = fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = avro
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 100000
a1.channels.c1.transactionCapacity = 1000
a1.sinks.k1.type = avro
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = %d
a1.sinks.k1.channel = c1
`, p1, p2)
	a2 = fmt.Sprintf(`a2.sources = r1
a2.channels = c1
a2.sinks = k1
a2.sources.r1.type = avro
a2.sources.r1.bind = 127.0.0.1
a2.sources.r1.port = %d
a2.sources.r1.channels = c1
a2.channels.c1.type = memory
a2.channels.c1.capacity = 100000
a2.channels.c1.transactionCapacity = 1000
a2.sinks.k1.channel = c1
%s`, p2, sink2)
	return a1, a2
}

func quietAgent(t *testing.T, name, conf string) *agent.Agent {
	t.Helper()
	return startAgent(t, writeConf(t, name, conf), name, agent.Options{})
}

// TestPerfAvroHopThroughput floods a1 from 4 connections with appendBatch
// calls of 100 events of 1 KiB and reports the events/s that reach a2's
// null sink, and the CPU per event (the whole process: senders and both
// agents).
func TestPerfAvroHopThroughput(t *testing.T) {
	testutil.RequirePerf(t)
	const conns, batch, size = 4, 100, 1024
	total := testutil.EnvInt("SLUICE_PERF_EVENTS", 1_000_000) / (conns * batch) * (conns * batch)
	p1, p2 := testutil.FreePort(t), testutil.FreePort(t)
	c1, c2 := hopConfigs(p1, p2, "a2.sinks.k1.type = null\n")
	a2 := quietAgent(t, "a2", c2)
	quietAgent(t, "a1", c1)

	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	errs := make(chan error, conns)
	for range conns {
		go func() {
			errs <- func() error {
				cl, err := avrorpc.Dial(context.Background(), fmt.Sprintf("127.0.0.1:%d", p1), avrorpc.ClientConfig{})
				if err != nil {
					return err
				}
				defer cl.Close()
				events := make([]event.Event, batch)
				for i := range events {
					events[i] = event.Event{Body: body}
				}
				for sent := 0; sent < total/conns; {
					st, err := cl.AppendBatch(context.Background(), events)
					if err != nil {
						return err
					}
					if st == avrorpc.OK {
						sent += batch
					} // FAILED: a1's channel is full; send the batch again
				}
				return nil
			}()
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sendDone := time.Since(start)
	deadline := time.Now().Add(5 * time.Minute)
	for drained(a2, "k1") < total && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if got := drained(a2, "k1"); got != total {
		t.Fatalf("a2's null sink drained %d of %d events", got, total)
	}
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	t.Logf("%d events of %d bytes in batches of %d over %d connections: all acknowledged by a1 after %v, all at a2's sink after %v: %.0f events/s, %.1f MiB/s, CPU %.2f µs/event (%.2f cores)",
		total, size, batch, conns, sendDone.Round(time.Millisecond), elapsed.Round(time.Millisecond),
		float64(total)/elapsed.Seconds(), float64(total)*size/elapsed.Seconds()/(1<<20),
		float64(cpu.Microseconds())/float64(total), cpu.Seconds()/elapsed.Seconds())
}

// TestPerfAvroHopLatency200 sends 200 events/s of 1 KiB, each in its own
// appendBatch, through a1 → a2 → tcp sink → receiver, and beside it in the
// same run straight from a TCP sender to a receiver (the floor the machine
// allows). Latency is from the send time in the body to the receiver's
// read, so it covers both hops.
func TestPerfAvroHopLatency200(t *testing.T) {
	testutil.RequirePerf(t)
	seconds := testutil.EnvInt("SLUICE_PERF_SECONDS", 20)
	const rate, size = 200, 1024
	count := rate * seconds

	floorRecv, err := bench.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer floorRecv.Close()
	recv, err := bench.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	p1, p2 := testutil.FreePort(t), testutil.FreePort(t)
	c1, c2 := hopConfigs(p1, p2, "a2.sinks.k1.type = tcp\na2.sinks.k1.hostname = 127.0.0.1\na2.sinks.k1.port = "+portOf(recv.Addr())+"\n")
	quietAgent(t, "a2", c2)
	quietAgent(t, "a1", c1)

	direct, err := bench.Dial(floorRecv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := avrorpc.Dial(context.Background(), fmt.Sprintf("127.0.0.1:%d", p1), avrorpc.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(context.Background()); err != nil { // the handshake, outside the measurement
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+30)*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { _, err := direct.Paced(ctx, 0, count, size, time.Second/rate); errs <- err }()
	go func() {
		errs <- func() error {
			tick := time.NewTicker(time.Second / rate)
			defer tick.Stop()
			var line []byte
			ev := make([]event.Event, 1)
			for i := range count {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-tick.C:
				}
				line = bench.AppendLine(line[:0], uint64(i), time.Now(), size)
				ev[0] = event.Event{Body: line[:len(line)-1]} // the tcp sink adds the newline
				if st, err := cl.AppendBatch(ctx, ev); err != nil || st != avrorpc.OK {
					return fmt.Errorf("event %d: %v %v", i, st, err)
				}
			}
			return nil
		}()
	}()
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
	_ = direct.Close()
	floor, got := floorRecv.Report(count), recv.Report(count)
	t.Logf("direct TCP (floor):                    %v", floor)
	t.Logf("avro → a1 → avro hop → a2 → tcp:       %v", got)
	t.Logf("sluice minus floor: p50 %+.3f ms, p99 %+.3f ms", float64(got.P50-floor.P50)/1e6, float64(got.P99-floor.P99)/1e6)
	if got.Lost != 0 || got.Duplicated != 0 {
		t.Fatalf("lost %d, duplicated %d", got.Lost, got.Duplicated)
	}
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
