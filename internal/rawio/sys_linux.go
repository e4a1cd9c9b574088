//go:build linux

package rawio

import (
	"errors"
	"syscall"
	"unsafe"
)

// Supported says whether this system has the raw calls.
const Supported = true

func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

func rawRecv(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// readNow is one read of a non-blocking socket: raw where useRaw, else
// through the scheduler (the race detector sees those).
func readNow(fd uintptr, p []byte) (int, syscall.Errno) {
	if useRaw {
		return rawRead(fd, p)
	}
	n, err := syscall.Read(int(fd), p)
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) || errno == 0 {
			errno = syscall.EIO
		}
		return 0, errno
	}
	return n, 0
}
