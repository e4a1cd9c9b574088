package tcpsink

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
)

// peer is a line-collecting TCP server on 127.0.0.1.
type peer struct {
	ln net.Listener

	mu    sync.Mutex
	conns [][]string // lines received, per accepted connection
	open  []net.Conn
	cond  *sync.Cond
	wg    sync.WaitGroup
	// onConn, if set, handles an accepted connection instead of reading it
	// to the end; it is given the connection's index.
	onConn func(i int, c net.Conn, p *peer)
}

func newPeer(t *testing.T, addr string, onConn func(i int, c net.Conn, p *peer)) *peer {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{ln: ln, onConn: onConn}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *peer) addr() string { return p.ln.Addr().String() }

func (p *peer) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		i := len(p.conns)
		p.conns = append(p.conns, nil)
		p.open = append(p.open, c)
		h := p.onConn
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			if h != nil {
				h(i, c, p)
				return
			}
			p.readLines(i, c, -1)
		}()
	}
}

// readLines records up to max lines (all, when max < 0) read from c as
// connection i's.
func (p *peer) readLines(i int, c net.Conn, max int) {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 0; n != max && sc.Scan(); n++ {
		p.mu.Lock()
		p.conns[i] = append(p.conns[i], sc.Text())
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

func (p *peer) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.open {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

// all returns every line received, connection after connection.
func (p *peer) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.conns {
		out = append(out, c...)
	}
	return out
}

// waitLines waits until connection i received n lines, or fails the test
// after a generous timeout.
func (p *peer) waitLines(t *testing.T, i, n int) {
	t.Helper()
	stop := time.AfterFunc(10*time.Second, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop.Stop()
	deadline := time.Now().Add(10 * time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.conns) <= i || len(p.conns[i]) < n {
		if time.Now().After(deadline) {
			t.Fatalf("connection %d has %d lines, want %d", i, lenOf(p.conns, i), n)
		}
		p.cond.Wait()
	}
}

func lenOf(conns [][]string, i int) int {
	if i < len(conns) {
		return len(conns[i])
	}
	return 0
}

func batch(from, n int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i].Body = []byte("event-" + strconv.Itoa(from+i))
	}
	return evs
}

func names(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "event-" + strconv.Itoa(from+i)
	}
	return out
}

func newTestWriter(t *testing.T, addr string) (*Writer, *metrics.SinkCounters) {
	c := metrics.NewSinkCounters("k1", "tcp")
	w := NewWriter(Options{Addr: addr, ConnectTimeout: time.Second, RequestTimeout: 5 * time.Second}, c, nil)
	t.Cleanup(func() { w.Stop(context.Background()) })
	return w, c
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWriterDelivers(t *testing.T) {
	p := newPeer(t, "", nil)
	w, c := newTestWriter(t, p.addr())
	ctx := context.Background()
	for i := range 3 {
		if err := w.Write(ctx, batch(i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	p.waitLines(t, 0, 30)
	if got := p.all(); !equal(got, names(0, 30)) {
		t.Fatalf("peer got %q", got)
	}
	if c.ConnectionCreated.Load() != 1 {
		t.Fatalf("ConnectionCreated = %d", c.ConnectionCreated.Load())
	}
	w.Stop(ctx)
	if c.ConnectionClosed.Load() != 1 {
		t.Fatalf("ConnectionClosed = %d", c.ConnectionClosed.Load())
	}
}

// TestWriterBacksOff checks that without a peer, writes fail, are counted,
// and that retries wait out a growing backoff instead of spinning.
func TestWriterBacksOff(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	w, c := newTestWriter(t, addr)
	ctx := context.Background()
	if err := w.Write(ctx, batch(0, 1)); err == nil {
		t.Fatal("write without a peer succeeded")
	}
	// The second attempt waits 100 ms and dials, the third would wait
	// 200 ms: with a shorter deadline it gives up waiting without dialing.
	if err := w.Write(ctx, batch(0, 1)); err == nil {
		t.Fatal("write without a peer succeeded")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := w.Write(short, batch(0, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write during backoff: %v, want the context's deadline", err)
	}
	if time.Since(start) < 15*time.Millisecond {
		t.Fatal("write during backoff returned without waiting")
	}
	if got := c.ConnectionFailed.Load(); got != 2 {
		t.Fatalf("ConnectionFailed = %d, want 2 (no dial during backoff)", got)
	}
	w.mu.Lock()
	b := w.conn.Backoff()
	w.mu.Unlock()
	if b != 200*time.Millisecond {
		t.Fatalf("backoff %v after two failures, want 200ms", b)
	}
}

// TestWriterReconnectsAfterPeerComesBack: the peer is down, then listens on
// the same address; the retried batch is delivered and the backoff resets.
func TestWriterReconnectsAfterPeerComesBack(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	w, _ := newTestWriter(t, addr)
	ctx := context.Background()
	if err := w.Write(ctx, batch(0, 5)); err == nil {
		t.Fatal("write without a peer succeeded")
	}
	p := newPeer(t, addr, nil)
	if err := w.Write(ctx, batch(0, 5)); err != nil {
		t.Fatal(err)
	}
	p.waitLines(t, 0, 5)
	if got := p.all(); !equal(got, names(0, 5)) {
		t.Fatalf("peer got %q", got)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn.Backoff() != 0 || w.conn.Failures() != 0 {
		t.Fatalf("backoff %v, fails %d after a delivery", w.conn.Backoff(), w.conn.Failures())
	}
}

// TestWriterRetriesBatchAfterReset: the peer stops reading in the middle of
// a batch larger than the socket buffers and resets the connection; the
// write fails, and the retried batch arrives whole on the next connection
// (the first one saw a prefix of it: at-least-once).
func TestWriterRetriesBatchAfterReset(t *testing.T) {
	p := newPeer(t, "", func(i int, c net.Conn, p *peer) {
		if i == 0 {
			c.(*net.TCPConn).SetReadBuffer(16 << 10)
			p.readLines(i, c, 100)
			c.(*net.TCPConn).SetLinger(0) // close with RST
			return
		}
		p.readLines(i, c, -1)
	})
	w, c := newTestWriter(t, p.addr())
	// Small socket buffers on both sides, so the batch cannot fit in them.
	w.onDial = func(c *net.TCPConn) { c.SetWriteBuffer(32 << 10) }
	evs := batch(0, 500)
	pad := bytes.Repeat([]byte("x"), 2<<10)
	for i := range evs {
		evs[i].Body = append(evs[i].Body, pad...)
	}
	err := w.Write(context.Background(), evs)
	if err == nil {
		t.Fatal("write of 1 MiB to a peer that reset after 100 lines succeeded")
	}
	if err := w.Write(context.Background(), evs); err != nil {
		t.Fatalf("retry: %v", err)
	}
	p.waitLines(t, 1, len(evs))
	p.mu.Lock()
	first, second := p.conns[0], p.conns[1]
	p.mu.Unlock()
	if len(first) != 100 {
		t.Fatalf("first connection got %d lines", len(first))
	}
	for i, l := range second {
		if l != string(evs[i].Body) {
			t.Fatalf("line %d of the retry differs", i)
		}
	}
	if c.ConnectionClosed.Load() != 1 || c.ConnectionCreated.Load() != 2 {
		t.Fatalf("created %d closed %d, want 2 1", c.ConnectionCreated.Load(), c.ConnectionClosed.Load())
	}
}

// TestWriterDiscardsWhatPeerSends: a peer that talks back does not look
// closed and does not block the writer.
func TestWriterDiscardsWhatPeerSends(t *testing.T) {
	p := newPeer(t, "", func(i int, c net.Conn, p *peer) {
		c.Write(bytes.Repeat([]byte("hello\n"), 10000))
		p.readLines(i, c, -1)
	})
	w, c := newTestWriter(t, p.addr())
	for i := range 5 {
		if err := w.Write(context.Background(), batch(i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	p.waitLines(t, 0, 5)
	if c.ConnectionCreated.Load() != 1 {
		t.Fatalf("reconnected %d times", c.ConnectionCreated.Load())
	}
}

// BenchmarkWrite writes batches of 100 events of 256 bytes to a peer that
// reads and discards.
func BenchmarkWrite(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	w := NewWriter(Options{Addr: ln.Addr().String(), ConnectTimeout: time.Second, RequestTimeout: 10 * time.Second}, metrics.NewSinkCounters("k1", "tcp"), nil)
	defer w.Stop(context.Background())
	evs := make([]event.Event, 100)
	for i := range evs {
		evs[i].Body = bytes.Repeat([]byte{'a'}, 256)
	}
	b.SetBytes(100 * 257)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(context.Background(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}

// TestMain silences the sink's warnings about the peers the tests take
// down on purpose.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}

// TestWriterNoticesPeerReset: the peer closes with a batch unread, which
// resets the connection; the probe tells a reset from a clean close, and
// the next batch goes to a new connection.
func TestWriterNoticesPeerReset(t *testing.T) {
	got := make(chan struct{})
	p := newPeer(t, "", func(i int, c net.Conn, p *peer) {
		if i == 0 {
			buf := make([]byte, 1)
			_, _ = c.Read(buf) // some of the batch arrived; leave the rest unread
			close(got)
			return // the deferred Close resets: data is unread
		}
		p.readLines(i, c, -1)
	})
	w, c := newTestWriter(t, p.addr())
	if err := w.Write(context.Background(), batch(0, 10)); err != nil {
		t.Fatal(err)
	}
	<-got
	if st := waitClosed(w); st != peerReset {
		t.Fatalf("probe says %v, want a reset", st)
	}
	if err := w.Write(context.Background(), batch(10, 5)); err != nil {
		t.Fatal(err)
	}
	p.waitLines(t, 1, 5)
	if c.ConnectionCreated.Load() != 2 {
		t.Fatalf("ConnectionCreated = %d, want 2", c.ConnectionCreated.Load())
	}
}

// TestConnectionClosedWhileIdle: as for the avro and thrift sinks, a peer
// that reads everything and then closes the connection while it is idle
// between batches costs no failed batch and loses nothing: the next one
// goes at once, whole, to a new connection.
// Either the probe before the batch sees the close, or the close comes
// just after the probe (simulated by blinding the probe once the reset has
// reached the socket) and the write fails on the old connection; then the
// batch is written again at once on a new one.
func TestConnectionClosedWhileIdle(t *testing.T) {
	for _, tc := range []struct {
		name         string
		reset, blind bool
	}{
		{"closed, seen by the probe", false, false},
		{"reset, after the probe", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closeFirst := make(chan struct{})
			p := newPeer(t, "", func(i int, c net.Conn, p *peer) {
				if i == 0 {
					p.readLines(i, c, 10)
					<-closeFirst
					if tc.reset {
						c.(*net.TCPConn).SetLinger(0)
					}
					c.Close()
					return
				}
				p.readLines(i, c, -1)
			})
			w, c := newTestWriter(t, p.addr())
			ctx := context.Background()
			if err := w.Write(ctx, batch(0, 10)); err != nil {
				t.Fatal(err)
			}
			p.waitLines(t, 0, 10)
			close(closeFirst)
			waitClosed(w)
			if tc.blind {
				w.mu.Lock()
				lc, _ := w.conn.Current()
				lc.probe = func() peerState { return peerOpen }
				w.mu.Unlock()
			}
			if err := w.Write(ctx, batch(10, 10)); err != nil {
				t.Fatalf("the batch after an idle close failed: %v", err)
			}
			p.waitLines(t, 1, 10)
			if got := p.all(); !equal(got, names(0, 20)) {
				t.Fatalf("peer got %q", got)
			}
			if c.ConnectionFailed.Load() != 0 || c.ConnectionCreated.Load() != 2 || c.ConnectionClosed.Load() != 1 || w.conn.Failures() != 0 {
				t.Fatalf("failed %d created %d closed %d failures %d, want 0 2 1 0",
					c.ConnectionFailed.Load(), c.ConnectionCreated.Load(), c.ConnectionClosed.Load(), w.conn.Failures())
			}
		})
	}
}

// waitClosed probes w's connection until the peer's close has reached it,
// and returns what the probe saw first.
func waitClosed(w *Writer) peerState {
	for {
		w.mu.Lock()
		st := w.probe()
		w.mu.Unlock()
		if st != peerOpen {
			return st
		}
		time.Sleep(time.Millisecond)
	}
}
