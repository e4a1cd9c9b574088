package wal

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestPerfDirectWrite asks what O_DIRECT would save the file channel: it
// writes the same 256 MiB twice per round, in 256 KiB passes with an
// fdatasync every MiB, once as the log does (buffered write, writeback
// started after each pass) and once with O_DIRECT from an aligned buffer
// the data is first copied into (a direct log would need that copy: its
// records arrive in buffers of their own). It logs the process CPU time of
// each, per MiB and per 256-byte line. Both files must read back as written.
func TestPerfDirectWrite(t *testing.T) {
	testutil.RequirePerf(t)
	const total, pass, syncEvery = 256 << 20, 256 << 10, 1 << 20
	src := make([]byte, pass)
	for i := range src {
		src[i] = byte(i * 7)
	}
	staging, err := syscall.Mmap(-1, 0, pass, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(staging) }()

	run := func(direct bool) (cpu, wall time.Duration) {
		path := filepath.Join(t.TempDir(), "seg")
		flags := os.O_CREATE | os.O_RDWR | os.O_TRUNC
		if direct {
			flags |= syscall.O_DIRECT
		}
		f, err := os.OpenFile(path, flags, 0o644)
		if err != nil {
			t.Skipf("open with O_DIRECT=%v: %v (a file system without direct I/O, such as tmpfs)", direct, err)
		}
		defer f.Close()
		c0, t0 := processCPU(), time.Now()
		for off := int64(0); off < total; off += pass {
			if direct {
				copy(staging, src)
				_, err = f.WriteAt(staging, off)
			} else {
				_, err = f.WriteAt(src, off)
				startWriteback(f, off, pass)
			}
			if err != nil {
				t.Fatal(err)
			}
			if (off+pass)%syncEvery == 0 {
				if err := datasync(f); err != nil {
					t.Fatal(err)
				}
			}
		}
		cpu, wall = processCPU()-c0, time.Since(t0)
		check, err := os.Open(path) // buffered: what a reader of the segment sees
		if err != nil {
			t.Fatal(err)
		}
		defer check.Close()
		got := make([]byte, pass)
		for off := int64(0); off < total; off += 16 * pass {
			if _, err := check.ReadAt(got, off); err != nil || !bytes.Equal(got, src) {
				t.Fatalf("direct=%v: pass at %d reads back wrong (err %v)", direct, off, err)
			}
		}
		return cpu, wall
	}
	perLine := func(cpu time.Duration) float64 { return float64(cpu.Nanoseconds()) / 1e3 / (total / 256) }
	for round := range 3 {
		bc, bw := run(false)
		dc, dw := run(true)
		t.Logf("round %d: buffered CPU %v (%.3f µs per 256-byte line, %.0f MB/s); O_DIRECT CPU %v (%.3f µs per line, %.0f MB/s)",
			round+1, bc.Round(time.Millisecond), perLine(bc), total/bw.Seconds()/1e6,
			dc.Round(time.Millisecond), perLine(dc), total/dw.Seconds()/1e6)
	}
}

// processCPU is the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
