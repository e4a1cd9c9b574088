//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package tcpsink

import (
	"net"
	"syscall"
)

// peerClosed returns a function that reports, without blocking, whether the
// peer of c closed the connection (or reset it). It reads and discards
// whatever the peer sent, since a line protocol expects nothing back.
func peerClosed(c *net.TCPConn) func() bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	buf := make([]byte, 4096)
	var closed bool
	probe := func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
				return true
			case err != nil || n == 0:
				closed = true
				return true
			}
		}
	}
	return func() bool {
		closed = false
		if err := rc.Read(probe); err != nil {
			return true
		}
		return closed
	}
}
