package bench

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestProcCPUAndRSS reads this process's own figures: CPU time it burned on
// purpose, and memory it touched on purpose, must show.
func TestProcCPUAndRSS(t *testing.T) {
	pid := os.Getpid()
	before, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	x := 0
	for time.Since(start) < 300*time.Millisecond {
		x++
	}
	_ = x
	after, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := after - before; d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("CPU time grew by %v over a 300 ms busy loop", d)
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
	runtime.KeepAlive(b)
	if rss < size {
		t.Errorf("peak RSS %d bytes after touching %d bytes", rss, size)
	}
}
