package avrosource

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// idleConns is how many connections are between requests.
func (s *Source) idleConns() int {
	s.mu.Lock()
	g := s.group
	s.mu.Unlock()
	if g == nil {
		return 0
	}
	return g.Count(listener.Idle)
}

// packHeader starts a pack of frames frames, the first of n bytes.
func packHeader(frames, n int) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(frames))
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// TestHonestServedWhileIdleHeld: with more idle connections than
// max-connections held open, an honest client is served.
func TestHonestServedWhileIdleHeld(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s := newSource(t, map[string]string{"max-connections": "20"})
	addr := start(t, s, pl.Processor)
	for range 25 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if !testutil.Eventually(func() bool { return counter(s, "OpenConnectionCount") == "20" }, 5*time.Second) {
		t.Fatalf("OpenConnectionCount %s, want 20", counter(s, "OpenConnectionCount"))
	}
	honest := dial(t, addr, avrorpc.ClientConfig{ConnectTimeout: 3 * time.Second, RequestTimeout: 3 * time.Second})
	if st, err := honest.AppendBatch(context.Background(), batch("h", 3)); err != nil || st != avrorpc.OK {
		t.Fatalf("honest client: %v %v; want OK", st, err)
	}
}

// TestTrickleClosed: a request sent a byte at a time is closed after the
// progress timeout, although each byte comes well within stall-timeout.
func TestTrickleClosed(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s := newSource(t, map[string]string{"progress-timeout": "300", "min-bytes-per-second": "100"})
	addr := start(t, s, pl.Processor)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for _, b := range packHeader(1, 1000) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if !testutil.ClosedByServer(c, 5*time.Second) {
		t.Fatal("the trickling connection was not closed")
	}
	if got := counter(s, "ConnectionTooSlowCount"); got != "1" {
		t.Errorf("ConnectionTooSlowCount = %s, want 1", got)
	}
}

// TestInFlightBounded: ten connections each sending most of a large frame
// and then stalling make the source hold at most max-bytes-in-flight, not a
// buffer per connection; they are closed by the progress rule, and an
// honest client is served afterwards.
func TestInFlightBounded(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	const budget = 8 << 20
	s := newSource(t, map[string]string{
		"max-message-bytes": "4194304", "max-bytes-in-flight": "8388608",
		"progress-timeout": "1500", "stall-timeout": "60000",
	})
	addr := start(t, s, pl.Processor)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	chunk := make([]byte, 3<<20)
	var conns []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		go func() {
			c.Write(packHeader(2, 4<<20))
			c.Write(chunk) // then stall in the middle of the frame
		}()
	}
	time.Sleep(700 * time.Millisecond)
	runtime.GC()
	var mid runtime.MemStats
	runtime.ReadMemStats(&mid)
	if inUse := s.inFlight(); inUse > budget {
		t.Errorf("%d bytes in flight, over max-bytes-in-flight %d", inUse, budget)
	}
	grown := int64(mid.HeapInuse) - int64(before.HeapInuse)
	if grown > 2*budget {
		t.Errorf("heap grew by %d bytes for 10 stalled requests; want at most about max-bytes-in-flight (%d)", grown, budget)
	}
	for _, c := range conns {
		if !testutil.ClosedByServer(c, 10*time.Second) {
			t.Fatal("a stalled request's connection was not closed")
		}
	}
	honest := dial(t, addr, avrorpc.ClientConfig{ConnectTimeout: 3 * time.Second, RequestTimeout: 3 * time.Second})
	if st, err := honest.AppendBatch(context.Background(), batch("h", 3)); err != nil || st != avrorpc.OK {
		t.Fatalf("honest client after the stalled ones: %v %v; want OK", st, err)
	}
	if !testutil.Eventually(func() bool { return s.inFlight() == 0 }, 5*time.Second) {
		t.Errorf("%d bytes still in flight after every request ended", s.inFlight())
	}
}

// TestStoppingRepliesFailed: once the agent closed the source's processor,
// a call is answered FAILED (the sender keeps its events), and Stop then
// closes the connection at once.
func TestStoppingRepliesFailed(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s := newSource(t, nil)
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s.Addr().String(), avrorpc.ClientConfig{RequestTimeout: 3 * time.Second})
	if st, err := c.AppendBatch(context.Background(), batch("a", 1)); err != nil || st != avrorpc.OK {
		t.Fatal(st, err)
	}
	if err := pl.Processor.(*flow.ChannelProcessor).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, err := c.AppendBatch(context.Background(), batch("b", 2)); err != nil || st != avrorpc.Failed {
		t.Fatalf("a call after the processor closed: %v %v; want FAILED", st, err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Stop took %v with an idle client connected", el)
	}
	if _, err := c.AppendBatch(context.Background(), batch("c", 1)); err == nil {
		t.Error("the connection still works after Stop")
	}
	if n := pl.Channel.Len(); n != 1 {
		t.Errorf("channel holds %d events, want the 1 acknowledged before the close", n)
	}
}

// TestStopEndsAPutWaitingForSpace: a call whose put waits for space in a
// full channel (keep-alive 60 s) does not hold Stop past its ctx: the put
// gives up, the sender gets FAILED or a closed connection (and resends),
// and nothing of the call is in the channel.
func TestStopEndsAPutWaitingForSpace(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 2, 2, 60*time.Second)
	s := newSource(t, nil)
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s.Addr().String(), avrorpc.ClientConfig{RequestTimeout: 30 * time.Second})
	if st, err := c.AppendBatch(context.Background(), batch("a", 2)); err != nil || st != avrorpc.OK {
		t.Fatal(st, err)
	}
	type reply struct {
		st  avrorpc.Status
		err error
	}
	res := make(chan reply, 1)
	go func() {
		st, err := c.AppendBatch(context.Background(), batch("b", 1))
		res <- reply{st, err}
	}()
	// The call is in: its put waits for space.
	if !testutil.Eventually(func() bool { return counter(s, "AppendBatchReceivedCount") == "2" }, 5*time.Second) {
		t.Fatal("the second call never arrived")
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = s.Stop(ctx) // context.DeadlineExceeded: a call was still in progress
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Stop took %v with a 300 ms ctx while a put waited for space", el)
	}
	r := <-res
	if r.err == nil && r.st != avrorpc.Failed {
		t.Fatalf("the call cut by Stop got %v, want FAILED or a closed connection", r.st)
	}
	if n := pl.Channel.Len(); n != 2 {
		t.Errorf("channel holds %d events, want the 2 acknowledged before", n)
	}
}
