//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package tcpsink

import "net"

// peerClosed cannot probe the connection on this platform; a closed peer is
// found by the next write that fails.
func peerClosed(*net.TCPConn) func() peerState { return func() peerState { return peerOpen } }
