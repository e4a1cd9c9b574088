package listener

import (
	"encoding/binary"
	"net"
	"syscall"
)

// setRecvBuffer sets the socket's receive buffer to n bytes, past rmem_max
// when the process may (SO_RCVBUFFORCE), and enables drop counts
// (SO_RXQ_OVFL). It returns whether it forced and the usable size the
// kernel reports (half its SO_RCVBUF value), 0 if unknown.
func setRecvBuffer(c *net.UDPConn, n int) (forced bool, got int) {
	rc, err := c.SyscallConn()
	if err != nil {
		return false, 0
	}
	_ = rc.Control(func(fd uintptr) {
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, n) == nil {
			forced = true
		} else {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
		}
		if v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF); err == nil {
			got = v / 2
		}
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, 1)
	})
	return forced, got
}

// dropCount reads the kernel's running count of dropped datagrams from the
// control messages of a read.
func dropCount(oob []byte) (uint32, bool) {
	if len(oob) == 0 {
		return 0, false
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SO_RXQ_OVFL && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data), true
		}
	}
	return 0, false
}
