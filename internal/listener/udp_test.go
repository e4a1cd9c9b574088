package listener

import (
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestDropWatchCountsTheTail: datagrams the kernel drops after the last one
// it queued are counted, though no datagram follows them (the count that
// comes with a read, SO_RXQ_OVFL, never reports them): queued plus dropped
// is every datagram sent, exactly.
func TestDropWatchCountsTheTail(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the socket's drop count is read on Linux only")
	}
	conn, _, err := ListenUDP("127.0.0.1:0", 1) // the kernel's smallest buffer
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var dropped atomic.Int64
	w := WatchDrops(conn, func(n int64) { dropped.Add(n) })
	if !w.Supported() {
		t.Skip("the kernel does not report the socket's drop count (SO_MEMINFO)")
	}
	c, err := net.Dial("udp", conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 500
	msg := make([]byte, 200)
	for range sent {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing is read yet, and nothing more is sent: the drops are known
	// from the socket alone.
	w.Check()
	if dropped.Load() == 0 {
		t.Fatal("no drop counted, with 500 datagrams sent to a buffer of a few")
	}
	// A stopping source reads what is queued, then reads the count a last
	// time.
	if err := conn.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	if _, _, err := conn.ReadFromUDPAddrPort(buf); err == nil {
		t.Fatal("the read deadline did not stop the read")
	}
	queued := 0
	DrainUDP(conn, buf, time.Second, func(d []byte, from netip.AddrPort) {
		if len(d) != len(msg) || from.Addr() != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("drained %d bytes from %v", len(d), from)
		}
		queued++
	})
	w.Stop()
	if queued == 0 || int64(queued)+dropped.Load() != sent {
		t.Errorf("queued %d + dropped %d = %d, want %d sent", queued, dropped.Load(), int64(queued)+dropped.Load(), sent)
	}
	w.Stop() // a second Stop is harmless
}
