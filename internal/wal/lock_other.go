//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package wal

import "os"

// lockDir creates dir/LOCK; this platform has no flock, so nothing stops a
// second process.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(dir+"/LOCK", os.O_RDWR|os.O_CREATE, 0o644)
}
