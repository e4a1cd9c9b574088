package bench

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestProcCPUAndRSS reads this process's own figures: CPU time it burned on
// purpose, and memory it touched on purpose, must show.
func TestProcCPUAndRSS(t *testing.T) {
	pid := os.Getpid()
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// Burn at least 200 ms of CPU, as the kernel counts it.
	start := rusage()
	x := 0
	for rusage()-start < 200*time.Millisecond {
		for range 100000 {
			x++
		}
	}
	_ = x
	got, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	want := rusage()
	// /proc counts in 10 ms ticks; getrusage to the microsecond.
	if d := got - want; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("procCPU = %v, getrusage = %v", got, want)
	}
	const size = 64 << 20
	b := make([]byte, size)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	rss, err := procPeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := procAnon(pid)
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(b)
	if rss < size {
		t.Errorf("peak RSS %d bytes after touching %d bytes", rss, size)
	}
	if anon < size {
		t.Errorf("anonymous RSS %d bytes while holding %d bytes", anon, size)
	}
}
