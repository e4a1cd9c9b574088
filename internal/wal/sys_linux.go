package wal

import (
	"os"
	"syscall"
)

// datasync flushes f's data (and the metadata needed to read it back, such
// as its size) to stable storage with fdatasync(2).
func datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// startWriteback asks the kernel to start writing f's dirty pages in
// [off, off+n) to disk now, without waiting (sync_file_range(2) with
// SYNC_FILE_RANGE_WRITE). The fdatasync that follows then finds most of
// the data already on its way. It makes nothing durable by itself; errors
// are ignored (the fdatasync reports them).
func startWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), 2 /* SYNC_FILE_RANGE_WRITE */, 0, 0)
	})
}
