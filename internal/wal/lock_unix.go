//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package wal

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock(2) on dir/LOCK so that two processes
// never write the same log. The lock goes away with the process.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir+"/LOCK", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("%s is in use by another process (or another open Log)", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}
