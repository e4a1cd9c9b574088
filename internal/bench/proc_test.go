package bench

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
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

// TestProcSwitches: a thread that sleeps 100 times gives up its CPU at
// least that often, and the count must show it.
func TestProcSwitches(t *testing.T) {
	pid := os.Getpid()
	before, err := procSwitches(pid)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread() // sleep in the kernel, not in the Go scheduler
	defer runtime.UnlockOSThread()
	for range 100 {
		ts := syscall.Timespec{Nsec: 200_000}
		_ = syscall.Nanosleep(&ts, nil)
	}
	after, err := procSwitches(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := after - before; d < 100 {
		t.Errorf("%d context switches over 100 sleeps", d)
	}
}

// TestProcessRow runs a preset row the way `sluice bench lowrate` does:
// the agent a process of its own (the real binary), 200 events/s for 2 s.
// Every event must arrive, and the agent's own CPU time, context switches
// and memory must be measured (an agent that moved 400 events over TCP
// used CPU and gave up its CPU many times).
func TestProcessRow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	p := Preset{
		Name:    "process-row",
		Process: true,
		Runs: []PresetRun{{Label: "sluice, memory channel", Config: "bench-latency.properties",
			Load: Load{Transport: SendNetcat, Rate: 200, Size: 1024, Duration: 2 * time.Second}, Receive: Receive{Kind: ReceiveTCP}}},
	}
	out, err := RunPreset(context.Background(), p, PresetOptions{Examples: "../../examples", Binary: testutil.AgentBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Runs[0]
	if r.Err != nil || r.Sent < 300 || r.Received != r.Sent {
		t.Fatalf("sent %d, delivered %d, err %v", r.Sent, r.Received, r.Err)
	}
	if r.CPU <= 0 || r.Switches < int64(r.Received) || r.PeakRSS < 1<<20 || r.PeakAnon <= 0 {
		t.Errorf("agent process: CPU %v, %d context switches for %d events, peak RSS %d, peak anon %d",
			r.CPU, r.Switches, r.Received, r.PeakRSS, r.PeakAnon)
	}
	var buf bytes.Buffer
	out.WriteText(&buf)
	if !strings.Contains(buf.String(), "switches/event") {
		t.Errorf("the report has no switches column:\n%s", buf.String())
	}
}
