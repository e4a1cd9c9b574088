package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/panics"
)

// DefaultReceiveBuffer is the UDP receive buffer a source asks for when
// receiveBufferSize is not set: enough for a burst of a few thousand
// syslog datagrams, and what net.core.rmem_max allows on many systems.
const DefaultReceiveBuffer = 4 << 20

// RecvBuffer is what a UDP socket asked the kernel for and got.
type RecvBuffer struct {
	Asked     int  // bytes asked for
	Got       int  // bytes the kernel gives datagrams (half of what it reports: it doubles the value for its bookkeeping); 0 if unknown
	KernelMax int  // net.core.rmem_max, 0 if unknown
	Forced    bool // set past rmem_max with SO_RCVBUFFORCE (the process has CAP_NET_ADMIN)
}

// Capped reports whether the kernel gave less than was asked.
func (b RecvBuffer) Capped() bool { return b.Got > 0 && b.Got < b.Asked }

// ListenUDP binds the UDP address addr with a receive buffer of want bytes
// (0: DefaultReceiveBuffer). A process allowed to (CAP_NET_ADMIN) sets it
// past net.core.rmem_max; otherwise the kernel caps it there, which
// RecvBuffer.Capped tells. WatchDrops counts what the kernel drops on it.
func ListenUDP(addr string, want int) (*net.UDPConn, RecvBuffer, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, RecvBuffer{}, fmt.Errorf("resolve %s: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, RecvBuffer{}, err
	}
	if want <= 0 {
		want = DefaultReceiveBuffer
	}
	rb := RecvBuffer{Asked: want, KernelMax: rmemMax()}
	rb.Forced, rb.Got = setRecvBuffer(conn, want)
	return conn, rb, nil
}

// Note logs, once at startup, the receive buffer a UDP source got when the
// kernel capped it, with the way to raise the cap.
func (b RecvBuffer) Note(log *slog.Logger, kind, source string, configured bool) {
	if !b.Capped() {
		log.Debug(kind+" receive buffer", "source", source, "bytes", b.Got, "asked", b.Asked, "forced", b.Forced)
		return
	}
	level := slog.LevelInfo
	if configured {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, kind+": the kernel caps the UDP receive buffer below what was asked; bursts beyond it are dropped and counted in DatagramDropCount",
		"source", source, "bytes", b.Got, "asked", b.Asked, "rmem_max", b.KernelMax,
		"fix", fmt.Sprintf("sysctl -w net.core.rmem_max=%d (or run with CAP_NET_ADMIN)", b.Asked))
}

func rmemMax() int {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// DropCheckInterval is how often a DropWatch reads its socket's drop count.
const DropCheckInterval = time.Second

// DropWatch counts the datagrams the kernel dropped on a UDP socket for
// lack of receive buffer. It reads the socket's own drop counter (on Linux,
// SO_MEMINFO's SK_MEMINFO_DROPS) every DropCheckInterval and once more at
// Stop, so that drops are counted even when no datagram follows them: the
// count that arrives with a datagram (SO_RXQ_OVFL) misses the tail of a
// burst, which is exactly what a burst loses. Delivered plus dropped then
// accounts for every datagram that reached the socket.
type DropWatch struct {
	conn   *net.UDPConn
	report func(n int64)

	mu   sync.Mutex // serialises reads of the counter and reports
	last uint32
	ok   bool // the kernel reports the counter

	stop chan struct{}
	done chan struct{}
}

// WatchDrops starts watching conn's drop count, calling report with each
// increase (from the watch's goroutine, or Stop's caller). The caller owns
// the watch: it calls Stop before closing conn.
func WatchDrops(conn *net.UDPConn, report func(n int64)) *DropWatch {
	w := &DropWatch{conn: conn, report: report, stop: make(chan struct{}), done: make(chan struct{})}
	w.last, w.ok = socketDrops(conn) // a new socket's: 0
	panics.Go("udp drop watch "+conn.LocalAddr().String(), func() {
		defer close(w.done)
		if !w.ok {
			return
		}
		t := time.NewTicker(DropCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				w.Check()
			}
		}
	})
	return w
}

// Supported reports whether the kernel reports the socket's drop count.
func (w *DropWatch) Supported() bool { return w.ok }

// Check reads the drop count now and reports its increase.
func (w *DropWatch) Check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ok {
		return
	}
	v, ok := socketDrops(w.conn)
	if !ok {
		return // closed meanwhile
	}
	// The counter is the kernel's uint32, which wraps; reads are
	// serialised, so it never goes back.
	if d := v - w.last; d > 0 {
		w.last = v
		w.report(int64(d))
	}
}

// Stop ends the periodic reads and reads the count a last time; call it
// after the last read of the socket and before closing it.
func (w *DropWatch) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.Check()
}

// DrainUDP reads the datagrams queued on conn when its reader was stopped
// (its read deadline set to the past), without waiting for more, and calls
// fn with each, in the reader's goroutine. A stopping source calls it so
// that what the kernel accepted before the stop is delivered or counted,
// never lost in silence with the socket. It reads for at most max, so a
// sender that keeps sending cannot hold a stop.
func DrainUDP(conn *net.UDPConn, buf []byte, max time.Duration, fn func(datagram []byte, from netip.AddrPort)) {
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return
	}
	end := time.Now().Add(max)
	for i := 0; ; i++ {
		if i%256 == 255 && time.Now().After(end) {
			return
		}
		n, from, ok := readQueued(rc, buf)
		if !ok {
			return
		}
		fn(buf[:n], from)
	}
}

// UDPDrainMax bounds how long a stopping UDP source reads what its socket
// still holds (UDP.Read), so that a sender that keeps sending cannot hold
// the stop.
const UDPDrainMax = time.Second

// maxDatagram is the largest UDP payload, and the size of UDP.Read's buffer.
const maxDatagram = 1 << 16

// UDP is the socket of a UDP source (syslogudp, netcatudp), with the watch
// of what the kernel drops on it and the read loop both run.
type UDP struct {
	Conn  *net.UDPConn
	drops *DropWatch
}

// OpenUDP binds addr with a receive buffer of want bytes (see ListenUDP),
// tells a capped buffer in the log (RecvBuffer.Note; configured: the user
// set the size), and starts counting what the kernel drops on it, passing
// each increase to dropped.
func OpenUDP(addr string, want int, configured bool, log *slog.Logger, kind, source string, dropped func(n int64)) (*UDP, error) {
	conn, rb, err := ListenUDP(addr, want)
	if err != nil {
		return nil, err
	}
	rb.Note(log, kind, source, configured)
	return &UDP{Conn: conn, drops: WatchDrops(conn, dropped)}, nil
}

// Read calls fn with each datagram, in the caller's goroutine, until
// StopReading; then it calls fn with what the socket still holds (for at
// most UDPDrainMax: DrainUDP) and returns. fn must not keep the datagram's
// bytes: the buffer is reused. A read error other than the stop is passed
// to readErr, and reading goes on; a closed socket ends Read.
func (u *UDP) Read(readErr func(error), fn func(datagram []byte, from netip.AddrPort)) {
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := u.Conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				DrainUDP(u.Conn, buf, UDPDrainMax, fn)
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			readErr(err)
			continue
		}
		fn(buf[:n], from)
	}
}

// Addr is the socket's address; nil for a nil UDP (a source not started).
func (u *UDP) Addr() net.Addr {
	if u == nil {
		return nil
	}
	return u.Conn.LocalAddr()
}

// StopReading makes Read read what the socket holds and return.
func (u *UDP) StopReading() { _ = u.Conn.SetReadDeadline(time.Now()) }

// Close reads the drop count a last time and closes the socket. Call it
// once Read has returned (or will no longer be waited for).
func (u *UDP) Close() error {
	u.drops.Stop()
	return u.Conn.Close()
}
