package listener

import (
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setRecvBuffer sets the socket's receive buffer to n bytes, past rmem_max
// when the process may (SO_RCVBUFFORCE). It returns whether it forced and
// the usable size the kernel reports (half its SO_RCVBUF value), 0 if
// unknown.
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
	})
	return forced, got
}

// The kernel's socket memory report (linux/sock_diag.h): SO_MEMINFO fills
// an array of u32 of which SK_MEMINFO_DROPS (since Linux 4.5) is the
// socket's running count of packets it dropped: for UDP, those that found
// its receive buffer full (the counter SO_RXQ_OVFL reports with each read).
const (
	skMemInfoDrops = 8
	skMemInfoVars  = 9
)

// socketDrops reads the socket's drop counter; false when the kernel does
// not report it or the socket is closed.
func socketDrops(c *net.UDPConn) (uint32, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var mem [skMemInfoVars]uint32
	ok := false
	cerr := rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mem))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
		ok = e == 0 && l >= (skMemInfoDrops+1)*4
	})
	if cerr != nil || !ok {
		return 0, false
	}
	return mem[skMemInfoDrops], true
}

// readQueued reads one datagram queued on the socket, without waiting: ok
// is false when none is queued (or the socket is closed).
func readQueued(rc syscall.RawConn, buf []byte) (n int, from netip.AddrPort, ok bool) {
	var sa unix.Sockaddr
	var err error
	cerr := rc.Read(func(fd uintptr) bool {
		for {
			n, sa, err = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if err != unix.EINTR {
				return true // never wait: EAGAIN ends the drain
			}
		}
	})
	if cerr != nil || err != nil {
		return 0, netip.AddrPort{}, false
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		from = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		ip := netip.AddrFrom16(a.Addr)
		if a.ZoneId != 0 {
			ip = ip.WithZone(strconv.Itoa(int(a.ZoneId)))
		}
		from = netip.AddrPortFrom(ip, uint16(a.Port))
	}
	return n, from, true
}
