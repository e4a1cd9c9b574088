package listener

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
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
// RecvBuffer.Capped tells. It also asks the kernel to report, with each
// datagram, how many it dropped for lack of buffer (see Drops).
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

// Drops turns the kernel's running count of datagrams it dropped on a
// socket (a control message with each read, see ListenUDP) into increments.
type Drops struct {
	last uint32
}

// Update reads the count in the control messages oob of one read and
// returns how many datagrams were dropped since the last read that carried it.
func (d *Drops) Update(oob []byte) int64 {
	v, ok := dropCount(oob)
	if !ok {
		return 0
	}
	delta := v - d.last // wraps as the kernel's uint32 does
	d.last = v
	return int64(delta)
}

// OOBSize is the control-message buffer a read needs for the drop count.
const OOBSize = 64
