package netcatsource

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// newTCPLogged is newTCP with its log kept.
func newTCPLogged(tb testing.TB, props map[string]string) (*Source, *testutil.LogBuffer) {
	tb.Helper()
	var logs testutil.LogBuffer
	env := sourcetest.Env("r1", "netcat")
	env.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	return sourcetest.New(tb, New, env, sourcetest.Loopback(props)).(*Source), &logs
}

func counter(s *Source, name string) int64 { return s.counters.Counter(name).Load() }

// TestOverlongLinesLogThrottled: 200 clients each sending an over-long line
// all get FAILED, are all counted, and the log says so once (not 200 times).
func TestOverlongLinesLogThrottled(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s, logs := newTCPLogged(t, map[string]string{"max-line-length": "10"})
	start(t, s, pl.Processor)
	const clients = 200
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.Write([]byte("this line is far too long\n"))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			r, _ := bufio.NewReader(c).ReadString('\n')
			if !strings.HasPrefix(r, "FAILED") {
				t.Errorf("reply %q, want FAILED", r)
			}
		}()
	}
	wg.Wait()
	if got := counter(s, "LineTooLongCount"); got != clients {
		t.Errorf("LineTooLongCount = %d, want %d", got, clients)
	}
	if n := logs.Count("longer than max-line-length"); n != 1 {
		t.Errorf("%d log lines for %d over-long lines within the throttle interval, want 1:\n%s", n, clients, logs)
	}
	if !strings.Contains(logs.String(), "peer=127.0.0.1:") {
		t.Errorf("the warning lacks the peer:\n%s", logs)
	}
}

// TestHonestClientServedAtLimit: with every connection slot held by an idle
// client, a new client is served (the one idle longest is closed for it).
func TestHonestClientServedAtLimit(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1000, 100, time.Second)
	s := newTCP(t, map[string]string{"max-connections": "20"})
	start(t, s, pl.Processor)
	for range 25 {
		dial(t, s.Addr()) // held open by its cleanup until the test ends
	}
	if !testutil.Eventually(func() bool { return s.counters.OpenConnection.Load() == 20 }, 5*time.Second) {
		t.Fatalf("open connections %d, want 20", s.counters.OpenConnection.Load())
	}
	honest := dial(t, s.Addr())
	honest.Write([]byte("hello\n"))
	honest.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r, err := bufio.NewReader(honest).ReadString('\n'); r != "OK\n" {
		t.Fatalf("honest client got %q, %v; want OK", r, err)
	}
	if got := counter(s, "ConnectionEvictedCount"); got < 1 {
		t.Errorf("ConnectionEvictedCount = %d, want at least 1", got)
	}
	if n := s.counters.OpenConnection.Load(); n > 20 {
		t.Errorf("open connections %d, over max-connections 20", n)
	}
}

// TestTrickleAndIdleClosed: a client sending a line one byte at a time is
// closed after the progress timeout; an idle one after the idle timeout.
func TestTrickleAndIdleClosed(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newTCP(t, map[string]string{"progress-timeout": "300", "min-bytes-per-second": "100", "idle-timeout": "400"})
	start(t, s, pl.Processor)
	trickle := dial(t, s.Addr())
	idle := dial(t, s.Addr())
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := trickle.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	if !testutil.ClosedByServer(trickle, 5*time.Second) {
		t.Error("the trickling connection was not closed")
	}
	if !testutil.ClosedByServer(idle, 5*time.Second) {
		t.Error("the idle connection was not closed")
	}
	if got := counter(s, "ConnectionTooSlowCount"); got != 1 {
		t.Errorf("ConnectionTooSlowCount = %d, want 1", got)
	}
	if got := counter(s, "ConnectionIdleTimeoutCount"); got != 1 {
		t.Errorf("ConnectionIdleTimeoutCount = %d, want 1", got)
	}
}

// TestLongLinesBoundedByBudget: many clients each holding most of a long
// line in progress make the source hold at most max-bytes-in-flight for
// them (plus a small buffer each), not a line buffer per connection; the
// ones over the budget are closed and counted, and a short-line client is
// still served.
func TestLongLinesBoundedByBudget(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	// A line may take 3 × 100000 bytes; the budget holds 3 such buffers.
	s := newTCP(t, map[string]string{"max-line-length": "100000", "max-bytes-in-flight": "1000000", "progress-timeout": "1000"})
	start(t, s, pl.Processor)
	const clients = 60
	partial := bytes.Repeat([]byte("y"), 90000)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	for range clients {
		c := dial(t, s.Addr())
		c.Write(partial)
		conns = append(conns, c)
	}
	// Wait until every client is either holding a large buffer or closed.
	if !testutil.Eventually(func() bool {
		return s.inFlight() == 3*int64(s.bigBufs.Size()) && counter(s, "OverBudgetCount") == clients-3
	}, 15*time.Second) {
		t.Fatalf("in flight %d bytes, OverBudgetCount %d; want %d and %d", s.inFlight(), counter(s, "OverBudgetCount"), 3*s.bigBufs.Size(), clients-3)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	if limit := int64(4 << 20); grown > limit {
		t.Errorf("heap grew by %d bytes for %d clients; want under %d (the budget plus small buffers)", grown, clients, limit)
	}
	honest := dial(t, s.Addr())
	honest.Write([]byte("short\n"))
	honest.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r, err := bufio.NewReader(honest).ReadString('\n'); r != "OK\n" {
		t.Fatalf("short-line client got %q, %v; want OK", r, err)
	}
	for _, c := range conns {
		c.Close()
	}
	if !testutil.Eventually(func() bool { return s.inFlight() == 0 }, 5*time.Second) {
		t.Errorf("%d bytes still in flight after every client left", s.inFlight())
	}
}

// rcvbuf reads the receive buffer the kernel gives conn's datagrams.
func rcvbuf(t *testing.T, conn *net.UDPConn) int {
	t.Helper()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if cerr := rc.Control(func(fd uintptr) { v, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v / 2 // the kernel reports twice the size it was set to
}

// TestUDPReceiveBuffer: netcatudp asks for a 4 MiB receive buffer by
// default (the kernel's default is about 208 KiB), and for
// receiveBufferSize when set.
func TestUDPReceiveBuffer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads SO_RCVBUF as Linux reports it")
	}
	for _, tt := range []struct {
		props map[string]string
		want  int
	}{
		{nil, 4 << 20},
		{map[string]string{"receiveBufferSize": "1048576"}, 1 << 20},
	} {
		pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
		s := newUDP(t, tt.props)
		start(t, s, pl.Processor)
		s.mu.Lock()
		conn := s.sock.Conn
		s.mu.Unlock()
		want := tt.want
		if max := rmemMax(t); os.Geteuid() != 0 && max < want {
			want = max // the kernel caps an unprivileged process at rmem_max
		}
		if got := rcvbuf(t, conn); got < want {
			t.Errorf("props %v: receive buffer %d bytes, want %d", tt.props, got, want)
		}
	}
}

func rmemMax(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Skip(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// TestUDPDropsCountedAndLogged: datagrams the kernel drops while the
// channel is full are counted in DatagramDropCount and told in one warning,
// though no datagram follows the burst (the drops of its tail are read from
// the socket); at the stop (intake closed first, as the agent stops), what
// the socket still held is counted too: the channel's events plus
// DatagramDropCount is every datagram sent, exactly.
func TestUDPDropsCountedAndLogged(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("kernel drop counts are read on Linux only")
	}
	pl := sourcetest.NewPipeline(t, 1, 1, 20*time.Millisecond)
	var logs testutil.LogBuffer
	all := map[string]string{"bind": "127.0.0.1", "port": "0", "receiveBufferSize": "4096"}
	p := config.FromMap("a1.sources.r1.", all)
	env := sourcetest.Env("r1", "netcatudp")
	env.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	src, err := NewUDP(env, p)
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	s := src.(*UDPSource)
	start(t, s, pl.Processor)
	c, err := net.Dial("udp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 2000
	msg := bytes.Repeat([]byte("d"), 500)
	for range sent {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	drops := s.counters.Counter("DatagramDropCount")
	if !testutil.Eventually(func() bool { return drops.Load() > 0 }, 5*time.Second) {
		t.Fatal("no drop counted within 5 s of the burst, with nothing sent after it")
	}
	if err := pl.Processor.(*flow.ChannelProcessor).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	took := int64(pl.Channel.Len())
	if took+drops.Load() != sent {
		t.Errorf("channel %d + dropped %d = %d, want %d sent", took, drops.Load(), took+drops.Load(), sent)
	}
	// One warning when drops start (a summary may follow, if they went on
	// past a check of the count).
	if n := logs.Count("msg=\"" + reasonKernelDrop.Msg + "\""); n != 1 {
		t.Errorf("%d drop warnings, want 1:\n%s", n, logs.String())
	}
}

// TestStoppingAnswersFailed: once the agent closed the source's processor,
// a line is answered FAILED (nothing kept) and the connection is closed,
// instead of being retried as if the channel were full.
func TestStoppingAnswersFailed(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newTCP(t, nil)
	start(t, s, pl.Processor)
	c := dial(t, s.Addr())
	if err := pl.Processor.(*flow.ChannelProcessor).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("late\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if !strings.HasPrefix(line, "FAILED: agent is stopping") {
		t.Fatalf("reply %q, %v; want FAILED saying the agent is stopping", line, err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Error("the connection stayed open")
	}
	if n := pl.Channel.Len(); n != 0 {
		t.Errorf("%d events put after the processor closed", n)
	}
}
