//go:build !linux

package listener

import "net"

// setRecvBuffer asks for n bytes; the size granted is not read back here.
func setRecvBuffer(c *net.UDPConn, n int) (forced bool, got int) {
	_ = c.SetReadBuffer(n)
	return false, 0
}

// dropCount: kernel drop counts are read on Linux only.
func dropCount([]byte) (uint32, bool) { return 0, false }
