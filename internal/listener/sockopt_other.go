//go:build !linux

package listener

import (
	"net"
	"net/netip"
	"syscall"
)

// setRecvBuffer asks for n bytes; the size granted is not read back here.
func setRecvBuffer(c *net.UDPConn, n int) (forced bool, got int) {
	_ = c.SetReadBuffer(n)
	return false, 0
}

// socketDrops: the kernel's drop count is read on Linux only.
func socketDrops(*net.UDPConn) (uint32, bool) { return 0, false }

// readQueued: a stopping source drains its socket on Linux only.
func readQueued(syscall.RawConn, []byte) (int, netip.AddrPort, bool) {
	return 0, netip.AddrPort{}, false
}
