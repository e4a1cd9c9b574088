//go:build !linux

package wal

import "os"

// datasync flushes f to stable storage. Off Linux it is a full fsync.
func datasync(f *os.File) error { return f.Sync() }

func startWriteback(f *os.File, off, n int64) {}
