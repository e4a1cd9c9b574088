package listener

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// lineServer is a group serving a line protocol: each line is answered
// "OK" after hold (Busy meanwhile).
type lineServer struct {
	g    *Group
	addr string
	set  *metrics.Set
	logs *testutil.LogBuffer
	open atomic.Int64
	hold time.Duration
}

// privateLoopback is where the test servers listen. These tests count every
// connection a server sees, and a port on 127.0.0.1 just freed by another
// test process may still be dialled by that process's retrying client: a
// full suite run once counted 3 refused connections where the test made one,
// which only connections from outside the test explain. Linux routes all of
// 127/8 to the loopback, and nothing else here uses 127.0.0.2.
var privateLoopback = func() string {
	if runtime.GOOS == "linux" {
		return "127.0.0.2"
	}
	return "127.0.0.1"
}()

func newLineServer(t *testing.T, cfg Config) *lineServer {
	t.Helper()
	s := &lineServer{set: metrics.NewSet(metrics.KindSource, "r1", "test"), logs: &testutil.LogBuffer{}}
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rej := NewRejects("r1", log, s.set, ConnReasons...)
	s.g = NewGroup(cfg, Options{Source: "r1", Log: log, Rejects: rej, Open: &s.open})
	ln, err := s.g.Listen(privateLoopback + ":0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.g.Serve(ln, s.serve)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.g.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

func (s *lineServer) serve(c *Conn) {
	r := bufio.NewReader(c)
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		c.Busy()
		time.Sleep(s.hold)
		if _, err := c.Write([]byte("OK\n")); err != nil {
			return
		}
		if r.Buffered() > 0 {
			c.Receiving()
		} else {
			c.Idle()
		}
	}
}

// states counts the connections in state st.
func (s *lineServer) states(st State) int {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	n := 0
	for c := range s.g.conns {
		if c.State() == st {
			n++
		}
	}
	return n
}

func (s *lineServer) counter(name string) int64 { return s.set.Counter(name).Load() }

// dial connects and waits until the server has admitted the connection.
func (s *lineServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a line and reads the answer; it reports whether "OK" came.
func roundTrip(c net.Conn, line string) bool {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return false
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && got == "OK\n"
}

// TestLimitClosesOldestIdle: at the connection limit a new client is
// admitted by closing the connection idle longest, not refused; the others
// keep working.
func TestLimitClosesOldestIdle(t *testing.T) {
	s := newLineServer(t, Config{MaxConns: 3})
	var conns []net.Conn
	for i := range 3 {
		c := s.dial(t)
		if !roundTrip(c, "hello") {
			t.Fatalf("client %d not served", i)
		}
		conns = append(conns, c)
		time.Sleep(20 * time.Millisecond)
	}
	// The first is idle longest unless it speaks again: make the second the oldest idle.
	if !roundTrip(conns[0], "again") {
		t.Fatal("client 0 not served again")
	}
	honest := s.dial(t)
	if !roundTrip(honest, "new") {
		t.Fatal("the new client was not served at the limit")
	}
	if !testutil.ClosedByServer(conns[1], 2*time.Second) {
		t.Error("the connection idle longest (client 1) was not closed")
	}
	for _, i := range []int{0, 2} {
		if !roundTrip(conns[i], "still") {
			t.Errorf("client %d lost its connection", i)
		}
	}
	if got := s.counter("ConnectionEvictedCount"); got != 1 {
		t.Errorf("ConnectionEvictedCount = %d, want 1", got)
	}
	if got := s.open.Load(); got != 3 {
		t.Errorf("open connections = %d, want 3", got)
	}
}

// TestLimitRefusesWhenAllBusy: at the limit with every connection busy (or
// receiving at a decent rate), the new one is refused and counted.
func TestLimitRefusesWhenAllBusy(t *testing.T) {
	s := newLineServer(t, Config{MaxConns: 2, ProgressTimeout: time.Minute, MinRate: 1})
	s.hold = time.Second
	for range 2 {
		c := s.dial(t)
		if _, err := c.Write([]byte("work\n")); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "two busy connections", func() bool { return s.states(Busy) == 2 })
	late := s.dial(t)
	if !testutil.ClosedByServer(late, 2*time.Second) {
		t.Fatalf("a connection over the limit was not refused; logs:\n%s", s.logs)
	}
	if got := s.counter("ConnectionRefusedCount"); got != 1 {
		t.Errorf("ConnectionRefusedCount = %d, want 1; logs:\n%s", got, s.logs)
	}
	if n := s.logs.Lines("refused a connection"); n != 1 {
		t.Errorf("%d refusal log lines, want 1:\n%s", n, s.logs)
	}
}

// TestTrickleClosedHonestSlowKept: a client sending one byte at a time of a
// message that never ends is closed after about the progress timeout; one
// that sends a short line now and then is idle in between and stays.
func TestTrickleClosedHonestSlowKept(t *testing.T) {
	s := newLineServer(t, Config{MaxConns: 10, ProgressTimeout: 300 * time.Millisecond, MinRate: 100})
	trickle := s.dial(t)
	slow := s.dial(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := trickle.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	for range 8 {
		if !roundTrip(slow, "tick") {
			t.Fatal("the slow honest client was not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
	closed := testutil.ClosedByServer(trickle, 3*time.Second)
	close(stop)
	wg.Wait()
	if !closed {
		t.Fatal("the trickling connection was not closed")
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("closed after %v, before the progress timeout", el)
	}
	if !roundTrip(slow, "last") {
		t.Error("the slow honest client lost its connection")
	}
	if got := s.counter("ConnectionTooSlowCount"); got != 1 {
		t.Errorf("ConnectionTooSlowCount = %d, want 1", got)
	}
}

// TestLimitClosesSlowWhenNoneIdle: with every slot held by trickling
// connections, a new client is admitted by closing the slowest.
func TestLimitClosesSlowWhenNoneIdle(t *testing.T) {
	s := newLineServer(t, Config{MaxConns: 3, ProgressTimeout: time.Hour, MinRate: 1000})
	for range 3 {
		c := s.dial(t)
		if _, err := c.Write([]byte("a")); err != nil { // a message begun, never finished
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "three receiving connections", func() bool { return s.states(Receiving) == 3 })
	time.Sleep(20 * time.Millisecond) // below 1000 bytes/s by now
	honest := s.dial(t)
	if !roundTrip(honest, "hello") {
		t.Fatal("the honest client was not served while trickling connections held every slot")
	}
	if got := s.counter("ConnectionEvictedCount"); got != 1 {
		t.Errorf("ConnectionEvictedCount = %d, want 1", got)
	}
}

// TestIdleTimeout: a connection idle past the timeout is closed and
// counted; one that keeps talking is not.
func TestIdleTimeout(t *testing.T) {
	s := newLineServer(t, Config{MaxConns: 10, IdleTimeout: 200 * time.Millisecond})
	idle := s.dial(t)
	if !roundTrip(idle, "hi") {
		t.Fatal("not served")
	}
	talker := s.dial(t)
	for range 6 {
		if !roundTrip(talker, "hi") {
			t.Fatal("the talking client lost its connection")
		}
		time.Sleep(80 * time.Millisecond)
	}
	if !testutil.ClosedByServer(idle, 2*time.Second) {
		t.Fatal("the idle connection was not closed")
	}
	if got := s.counter("ConnectionIdleTimeoutCount"); got != 1 {
		t.Errorf("ConnectionIdleTimeoutCount = %d, want 1", got)
	}
}

// TestShutdownPrompt: Shutdown closes the listener and idle connections at
// once, lets a busy one answer, then closes it.
func TestShutdownPrompt(t *testing.T) {
	s := newLineServer(t, Config{MaxConns: 10})
	s.hold = 300 * time.Millisecond
	idle := s.dial(t)
	busy := s.dial(t)
	testutil.WaitFor(t, 5*time.Second, "two connections", func() bool { return s.open.Load() == 2 })
	if _, err := busy.Write([]byte("work\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "a busy connection", func() bool { return s.states(Busy) == 1 })
	start := time.Now()
	if err := s.g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("shutdown took %v", el)
	}
	if !testutil.ClosedByServer(idle, time.Second) {
		t.Error("the idle connection is still open")
	}
	_ = busy.SetReadDeadline(time.Now().Add(time.Second))
	got, _ := io.ReadAll(busy)
	if string(got) != "OK\n" {
		t.Errorf("the busy connection got %q before closing, want its answer", got)
	}
	if _, err := net.Dial("tcp", s.addr); err == nil {
		t.Error("the listener still accepts")
	}
}

// TestRejectLogsThrottled: many rejects of one reason give one line plus a
// summary, and the counter counts them all.
func TestRejectLogsThrottled(t *testing.T) {
	var logs testutil.LogBuffer
	set := metrics.NewSet(metrics.KindSource, "r1", "test")
	r := NewRejects("r1", slog.New(slog.NewTextHandler(&logs, nil)), set)
	bad := Reason{Counter: "BadThingCount", Msg: "refused a bad thing", Level: slog.LevelWarn}
	for i := range 500 {
		r.Add(bad, "10.0.0.1:"+string(rune('0'+i%10)))
	}
	if got := set.Counter("BadThingCount").Load(); got != 500 {
		t.Errorf("BadThingCount = %d, want 500", got)
	}
	if n := logs.Lines("refused a bad thing"); n != 1 {
		t.Errorf("%d log lines for 500 rejects within the interval, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "peer=10.0.0.1:0") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the line lacks the peer or level:\n%s", logs.String())
	}
}

func TestBudget(t *testing.T) {
	b := NewBudget(100)
	if !b.TryAcquire(60) || b.TryAcquire(50) {
		t.Fatal("TryAcquire: want 60 granted, then 50 refused")
	}
	if err := b.Acquire(context.Background(), 101); err == nil {
		t.Fatal("Acquire over the whole budget succeeded")
	}
	got := make(chan int, 2)
	go func() { _ = b.Acquire(context.Background(), 50); got <- 50 }()
	testutil.WaitFor(t, 5*time.Second, "a waiter", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 1 })
	// A small request does not overtake the waiter.
	if b.TryAcquire(10) {
		t.Fatal("TryAcquire overtook a waiter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Acquire(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire behind a waiter: %v, want the deadline", err)
	}
	b.Release(60)
	if n := <-got; n != 50 || b.InUse() != 50 {
		t.Fatalf("after release: granted %d, in use %d; want 50, 50", n, b.InUse())
	}
	h := NewHold(b)
	if !h.Try(50) || h.Try(1) {
		t.Fatal("Hold.Try: want 50 granted, then 1 refused")
	}
	h.Release()
	if b.InUse() != 50 {
		t.Fatalf("in use %d after the hold's release, want 50", b.InUse())
	}
}

func TestListenUDPReceiveBuffer(t *testing.T) {
	conn, rb, err := ListenUDP("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if rb.Asked != DefaultReceiveBuffer {
		t.Errorf("asked %d, want the default %d", rb.Asked, DefaultReceiveBuffer)
	}
	want := DefaultReceiveBuffer
	if !rb.Forced && rb.KernelMax > 0 {
		want = min(want, rb.KernelMax)
	}
	if rb.Got != 0 && rb.Got < want {
		t.Errorf("got a %d-byte buffer, want %d (forced %v, rmem_max %d)", rb.Got, want, rb.Forced, rb.KernelMax)
	}
	var logs testutil.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	RecvBuffer{Asked: 8 << 20, Got: 212992, KernelMax: 212992}.Note(log, "syslogudp", "r1", true)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "sysctl -w net.core.rmem_max=8388608") {
		t.Errorf("the capped note does not say how to fix it:\n%s", logs.String())
	}
}

// net/http's connection error lines become rejects: a failed handshake is
// counted and told (throttled), one that ended before a byte (a TCP health
// check) counted at DEBUG, one the group closed itself not again.
func TestHTTPErrorLogCountsHandshakes(t *testing.T) {
	logs := &testutil.LogBuffer{}
	set := metrics.NewSet(metrics.KindSource, "r1", "http")
	other := Reason{Counter: "ProtocolErrorCount", Level: slog.LevelWarn, Msg: "a connection failed"}
	rej := NewRejects("r1", slog.New(slog.NewTextHandler(logs, nil)), set, append(TLSReasons, other)...)
	srv := &http.Server{ReadHeaderTimeout: time.Second}
	HTTP(srv, rej, other)
	if srv.ReadHeaderTimeout != 0 || srv.ReadTimeout != 0 {
		t.Fatal("net/http's read timeouts left on: they cut requests without a count or a line")
	}
	for range 100 {
		srv.ErrorLog.Printf("http: TLS handshake error from 10.0.0.1:5000: remote error: tls: bad certificate")
	}
	srv.ErrorLog.Printf("http: TLS handshake error from 10.0.0.2:5000: EOF")
	srv.ErrorLog.Printf("http: TLS handshake error from 10.0.0.3:5000: read tcp 127.0.0.1:1->10.0.0.3:5000: use of closed network connection")
	srv.ErrorLog.Printf("http: superfluous response.WriteHeader call")
	if n := testutil.Metric(set, "TLSHandshakeFailCount"); n != "101" {
		t.Errorf("TLSHandshakeFailCount %s, want 101 (100 failed, 1 ended before its hello)", n)
	}
	if n := testutil.Metric(set, "ProtocolErrorCount"); n != "1" {
		t.Errorf("ProtocolErrorCount %s, want 1", n)
	}
	if n := logs.Lines("TLS handshake failed"); n != 1 || logs.Lines("peer=10.0.0.1:5000") != 1 {
		t.Errorf("%d lines for 100 failed handshakes, want 1 (throttled), naming the peer:\n%s", n, logs.String())
	}
	if logs.Lines("10.0.0.2") != 0 || logs.Lines("10.0.0.3") != 0 {
		t.Errorf("a connection closed before its hello, or by the group, told at INFO or above:\n%s", logs.String())
	}
}

// A source's own failure (here: accepting) is a streak: told when it
// starts, and once it is over ("accepting connections again").
func TestRejectsStreak(t *testing.T) {
	logs := &testutil.LogBuffer{}
	rej := NewRejects("r1", slog.New(slog.NewTextHandler(logs, nil)), nil)
	for range 50 {
		rej.Add(reasonAccept, "127.0.0.1:1", "err", "too many open files")
	}
	rej.Ok(reasonAccept)
	if logs.Lines("could not accept a connection; retrying") != 1 || logs.Lines("accepting connections again") != 0 {
		t.Fatalf("during the hold after the first success:\n%s", logs.String())
	}
	rej.Flush() // a stop: the summary of what was held back
	if logs.Lines("could not accept a connection; retrying (repeated)") != 1 || logs.Lines("failures=50") != 1 {
		t.Fatalf("at the stop, want the summary of 50 failures:\n%s", logs.String())
	}
}
