//go:build !linux

package rawio

import "syscall"

// Supported is false elsewhere: sockets are read and written as usual.
const Supported = false

func rawRead(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
func rawWrite(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
func rawRecv(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }

func readNow(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
