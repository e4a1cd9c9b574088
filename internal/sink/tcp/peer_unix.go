//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package tcpsink

import (
	"errors"
	"net"
	"syscall"

	"github.com/sluicehq/sluice/internal/rawio"
)

// peerClosed returns a function that reports, without blocking, whether the
// peer of c closed the connection, and how. It reads and discards whatever
// the peer sent, since a line protocol expects nothing back.
func peerClosed(c *net.TCPConn) func() peerState {
	rc, err := c.SyscallConn()
	if err != nil {
		return func() peerState { return peerOpen }
	}
	buf := make([]byte, 4096)
	var st peerState
	probe := func(fd uintptr) bool {
		for {
			var n int
			var err error
			if rawio.Enabled() {
				n, err = rawio.Recv(fd, buf) // a raw call: no scheduler round per batch
			} else {
				n, _, err = syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			}
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK):
				st = peerOpen
			case err == nil && n == 0:
				st = peerEOF
			case err != nil:
				st = peerReset
			default:
				continue // the peer sent something: discard it
			}
			return true
		}
	}
	return func() peerState {
		if err := rc.Read(probe); err != nil {
			return peerReset
		}
		return st
	}
}
