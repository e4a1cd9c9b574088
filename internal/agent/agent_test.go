package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// netcatPipeline is netcat -> memory -> tcp sink, the shape most tests use.
func netcatPipeline(ncPort, sinkPort, capacity int) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = %d
a1.channels.c1.transactionCapacity = 100
a1.channels.c1.keep-alive = 1
a1.sinks.k1.type = tcp
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = %d
a1.sinks.k1.channel = c1
`, ncPort, capacity, sinkPort)
}

// sendLines writes n generated lines on one connection and reads back one
// OK per line, so it returns only once every line was committed.
func sendLines(t *testing.T, addr string, first, n int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReader(c)
		for i := 0; i < n; i++ {
			line, err := br.ReadString('\n')
			if err != nil {
				done <- fmt.Errorf("reply %d: %w", i, err)
				return
			}
			if line != "OK\n" {
				done <- fmt.Errorf("reply %d = %q, want OK", i, line)
				return
			}
		}
		done <- nil
	}()
	bw := bufio.NewWriter(c)
	var buf []byte
	for i := 0; i < n; i++ {
		buf = bench.AppendLine(buf[:0], uint64(first+i), time.Now(), 100)
		if _, err := bw.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no OK for every line within 30 s")
	}
}

// TestFlumeUserGuideExample runs the first example of Flume's user guide,
// unchanged but for the port, and checks the netcat reply and the counters.
func TestFlumeUserGuideExample(t *testing.T) {
	port := testutil.FreePort(t)
	conf, err := os.ReadFile("testdata/good/flume-user-guide.properties")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "example.conf")
	testutil.WriteFile(t, file, strings.Replace(string(conf), "44444", fmt.Sprint(port), 1))
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0"})

	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "Hello world!\r\n"); err != nil {
		t.Fatal(err)
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || reply != "OK\n" {
		t.Fatalf("reply %q, %v; want OK", reply, err)
	}
	base := "http://" + a.HTTPAddr()
	testutil.WaitFor(t, 20*time.Second, "the event accepted and delivered", func() bool {
		m := flumeMetrics(t, base)
		return m["SOURCE.r1"]["EventAcceptedCount"] == "1" && m["SINK.k1"]["EventDrainSuccessCount"] == "1"
	})
	m := flumeMetrics(t, base)
	if m["CHANNEL.c1"]["ChannelCapacity"] != "1000" || m["CHANNEL.c1"]["Type"] != "CHANNEL" {
		t.Errorf("channel metrics = %v", m["CHANNEL.c1"])
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz = %d, want 200", resp.StatusCode)
	}
}

func flumeMetrics(t *testing.T, base string) map[string]map[string]string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBackpressureLosesNothing fills a small channel while the downstream
// is down: netcat stops reading (the sender blocks), and once the
// downstream appears every line sent arrives exactly once.
func TestBackpressureLosesNothing(t *testing.T) {
	ncPort, sinkPort := testutil.FreePort(t), testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, netcatPipeline(ncPort, sinkPort, 200))
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0"})
	base := "http://" + a.HTTPAddr()

	const n = 3000
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		sendLines(t, fmt.Sprintf("127.0.0.1:%d", ncPort), 0, n)
	}()
	// The channel fills until a batch no longer fits (commits are all or
	// nothing, so it may stop short of 200) and the source is refused: pushed back.
	testutil.WaitFor(t, 20*time.Second, "the channel full and the source refused", func() bool {
		m := flumeMetrics(t, base)
		size, _ := strconv.Atoi(m["CHANNEL.c1"]["ChannelSize"])
		return size > 100 && m["SOURCE.r1"]["ChannelWriteFail"] != "0"
	})
	select {
	case <-sent:
		t.Fatal("every line was acknowledged although the channel is full and the sink down")
	case <-time.After(200 * time.Millisecond):
	}
	recv, err := bench.Listen(fmt.Sprintf("127.0.0.1:%d", sinkPort))
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := recv.WaitFor(ctx, n); err != nil {
		t.Fatal(err)
	}
	<-sent
	rep := recv.Report(n)
	if rep.Lost != 0 || rep.Duplicated != 0 || rep.Received != n {
		t.Fatalf("report %v", rep)
	}
	m := flumeMetrics(t, base)
	if m["SOURCE.r1"]["EventAcceptedCount"] != fmt.Sprint(n) {
		t.Errorf("source accepted %s, want %d", m["SOURCE.r1"]["EventAcceptedCount"], n)
	}
}

// TestReloadKeepsChannelEvents changes only the sink: the memory channel and
// the source keep running, and the events the channel held are delivered by
// the new sink.
func TestReloadKeepsChannelEvents(t *testing.T) {
	ncPort, deadPort := testutil.FreePort(t), testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, netcatPipeline(ncPort, deadPort, 1000))
	a := agenttest.Start(t, agent.Options{File: file})
	addr := fmt.Sprintf("127.0.0.1:%d", ncPort)
	sendLines(t, addr, 0, 100)
	// A connection open across the reload survives it: the source is kept, not restarted.
	open, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	recv, err := bench.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	_, livePort, _ := net.SplitHostPort(recv.Addr())
	testutil.WriteFile(t, file, strings.Replace(netcatPipeline(ncPort, deadPort, 1000), fmt.Sprintf("port = %d\na1.sinks.k1.channel", deadPort), "port = "+livePort+"\na1.sinks.k1.channel", 1))
	if err := a.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	sendLines(t, addr, 100, 50)
	if _, err := open.Write(bench.AppendLine(nil, 150, time.Now(), 100)); err != nil {
		t.Fatal(err)
	}
	if reply, err := bufio.NewReader(open).ReadString('\n'); err != nil || reply != "OK\n" {
		t.Fatalf("connection opened before the reload: reply %q, %v", reply, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := recv.WaitFor(ctx, 151); err != nil {
		t.Fatal(err)
	}
	if rep := recv.Report(151); rep.Lost != 0 || rep.Duplicated != 0 {
		t.Fatalf("report %v", rep)
	}
}

// TestReloadRefusesBadConfig keeps the running graph when the new file has problems.
func TestReloadRefusesBadConfig(t *testing.T) {
	ncPort := testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	recv, err := bench.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	_, p, _ := net.SplitHostPort(recv.Addr())
	var port int
	if _, err := fmt.Sscan(p, &port); err != nil {
		t.Fatal(err)
	}
	good := netcatPipeline(ncPort, port, 1000)
	testutil.WriteFile(t, file, good)
	a := agenttest.Start(t, agent.Options{File: file})
	testutil.WriteFile(t, file, good+"a1.channels.c1.byteCapacity = lots\n")
	if err := a.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "byteCapacity") {
		t.Fatalf("Reload error = %v, want the bad property named", err)
	}
	sendLines(t, fmt.Sprintf("127.0.0.1:%d", ncPort), 0, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := recv.WaitFor(ctx, 10); err != nil {
		t.Fatal(err)
	}
}

// TestStopDrainsChannel: events committed before a stop are delivered by
// the sinks before the agent exits.
func TestStopDrainsChannel(t *testing.T) {
	ncPort := testutil.FreePort(t)
	recv, err := bench.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	_, p, _ := net.SplitHostPort(recv.Addr())
	var port int
	if _, err := fmt.Sscan(p, &port); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, netcatPipeline(ncPort, port, 10000))
	a, err := agent.New(agent.Options{File: file, Name: "a1", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sendLines(t, fmt.Sprintf("127.0.0.1:%d", ncPort), 0, 2000)
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := recv.WaitFor(ctx, 2000); err != nil {
		t.Fatal(err)
	}
}

// TestFailedChannelRetried: a reload brings in a file channel that cannot
// start (its checkpoint directory's parent is a file). Status names the
// channel with its reason and the source waiting for it; nothing is
// stale. Once the obstacle is gone the retry starts the channel, then its
// sink and the source, without another reload.
func TestFailedChannelRetried(t *testing.T) {
	ncPort := testutil.FreePort(t)
	recv, err := bench.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	_, p, _ := net.SplitHostPort(recv.Addr())
	sinkPort, _ := strconv.Atoi(p)
	dir := t.TempDir()
	file := filepath.Join(dir, "a.properties")
	testutil.WriteFile(t, file, netcatPipeline(ncPort, sinkPort, 1000))
	a := agenttest.Start(t, agent.Options{File: file})

	blocker := filepath.Join(dir, "blocker")
	testutil.WriteFile(t, blocker, "a file where the channel wants a directory")
	fileChannel := strings.Replace(netcatPipeline(ncPort, sinkPort, 1000), `a1.channels.c1.type = memory
a1.channels.c1.capacity = 1000
a1.channels.c1.transactionCapacity = 100
a1.channels.c1.keep-alive = 1
`, fmt.Sprintf(`a1.channels.c1.type = file
a1.channels.c1.checkpointDir = %s
a1.channels.c1.dataDirs = %s
a1.channels.c1.minimumRequiredSpace = 0
`, filepath.Join(blocker, "ck"), filepath.Join(dir, "data")), 1)
	testutil.WriteFile(t, file, fileChannel)
	// The memory channel c1 replaced by another type drains first, in the
	// background; the new c1 starts (and fails) when that drain ends.
	if err := a.Reload(context.Background()); err != nil {
		t.Fatalf("Reload = %v", err)
	}
	byName := func() map[string]metrics.ComponentStatus {
		m := map[string]metrics.ComponentStatus{}
		for _, c := range a.Status().Components {
			m[c.Kind+" "+c.Name] = c
		}
		return m
	}
	testutil.WaitFor(t, 20*time.Second, "channel c1 failed", func() bool { return byName()["channel c1"].State == "failed" })
	st := byName()
	if c := st["channel c1"]; c.State != "failed" || !strings.Contains(c.Reason, "not a directory") || c.Type != "file" {
		t.Errorf("channel c1: %+v", c)
	}
	if c := st["source r1"]; c.State != "starting" || !strings.Contains(c.Reason, "waiting for channel c1") {
		t.Errorf("source r1: %+v", c)
	}
	if c := st["sink k1"]; !strings.Contains(c.Reason, "waiting for channel c1") {
		t.Errorf("sink k1: %+v", c)
	}
	if err := a.Health(); err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("Health = %v, want one line each for c1, r1 and k1", err)
	}
	if _, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ncPort)); err == nil {
		t.Error("the source accepts connections while its channel is down")
	}

	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "the agent healthy", func() bool { return a.Health() == nil })
	for _, c := range a.Status().Components {
		if c.State != "running" || c.Reason != "" {
			t.Errorf("after the retry: %+v", c)
		}
	}
	sendLines(t, fmt.Sprintf("127.0.0.1:%d", ncPort), 0, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := recv.WaitFor(ctx, 10); err != nil {
		t.Fatal(err)
	}
}

// TestFailingSinkReported: a sink whose downstream is down is reported by
// /healthz once it has failed for longer than healthGraceMillis, and no
// longer once it delivers.
func TestFailingSinkReported(t *testing.T) {
	ncPort, sinkPort := testutil.FreePort(t), testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, netcatPipeline(ncPort, sinkPort, 1000)+"a1.sinks.k1.healthGraceMillis = 300\n")
	a := agenttest.Start(t, agent.Options{File: file})
	sendLines(t, fmt.Sprintf("127.0.0.1:%d", ncPort), 0, 5)
	testutil.WaitFor(t, 20*time.Second, "the agent unhealthy", func() bool { return a.Health() != nil })
	err := a.Health()
	if !strings.HasPrefix(err.Error(), "sink k1: cannot deliver") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Health = %q, want one line for sink k1", err)
	}
	recv, err := bench.Listen(fmt.Sprintf("127.0.0.1:%d", sinkPort))
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := recv.WaitFor(ctx, 5); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "the agent healthy", func() bool { return a.Health() == nil })
}

// TestStartFailureReportsOnlyTheFailure: a source that cannot bind fails the
// start; the stop that follows drains as any stop does (an empty channel at
// once) and says nothing untrue about a shutdown deadline.
func TestStartFailureReportsOnlyTheFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, p, _ := net.SplitHostPort(busy.Addr().String())
	ncPort, _ := strconv.Atoi(p)
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, netcatPipeline(ncPort, testutil.FreePort(t), 1000))
	logs := &testutil.LogBuffer{}
	a, err := agent.New(agent.Options{Name: "a1", File: file, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := a.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start = %v, want the bind failure", err)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("a failed start with an empty channel took %v", el)
	}
	if n := logs.Lines("shutdown deadline"); n != 0 {
		t.Errorf("a failed start logged %d lines about a shutdown deadline that never passed:\n%s", n, logs)
	}
}
