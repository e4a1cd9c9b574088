package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

// The perf tests run this test binary again as stall monitors: one small
// process per CPU, pinned to it, that sleeps 1 ms at a time and reports
// every wake-up more than 1 ms late. Such a delay is the machine's (the
// hypervisor did not run that CPU, or something else held it), seen from
// outside the process under test, so a latency outlier that overlaps one
// is told apart from one the pipeline made.
const stallMonitorEnv = "SLUICE_STALL_MONITOR_CPU"

func TestMain(m *testing.M) {
	if cpu := os.Getenv(stallMonitorEnv); cpu != "" {
		runStallMonitor(cpu)
		return
	}
	testutil.Main(m) // removes the agent binary TestProcessRow built
}

func runStallMonitor(cpuArg string) {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	cpu, err := strconv.Atoi(cpuArg)
	if err != nil {
		os.Exit(2)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintln(os.Stderr, "stall monitor:", err)
		os.Exit(2)
	}
	const nap = time.Millisecond // short naps would keep the CPU from idling and hide stalls
	ts := unix.NsecToTimespec(int64(nap))
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	if out.Flush() != nil {
		return
	}
	for {
		t0 := time.Now()
		_ = unix.Nanosleep(&ts, nil)
		now := time.Now()
		if late := now.Sub(t0) - nap; late > time.Millisecond {
			fmt.Fprintf(out, "%d %d\n", now.UnixNano(), late.Nanoseconds())
			if out.Flush() != nil {
				return // the test is gone
			}
		}
	}
}

// stall is a span of wall-clock time during which one CPU did not run its
// monitor.
type stall struct {
	cpu        int
	start, end int64 // Unix nanoseconds
}

// stallMonitors runs one monitor per CPU until the test ends.
type stallMonitors struct {
	mu     sync.Mutex
	stalls []stall
}

func startStallMonitors(t *testing.T) *stallMonitors {
	t.Helper()
	s := &stallMonitors{}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs last, after every monitor was killed
	for cpu := range runtime.NumCPU() {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", stallMonitorEnv, cpu))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		// Wait until it runs, so its own start-up does not fall into the
		// measurement unseen.
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("stall monitor for CPU %d did not start: %v", cpu, sc.Err())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sc.Scan() {
				var at, late int64
				if _, err := fmt.Sscan(sc.Text(), &at, &late); err == nil {
					s.mu.Lock()
					s.stalls = append(s.stalls, stall{cpu: cpu, start: at - late, end: at})
					s.mu.Unlock()
				}
			}
		}()
	}
	return s
}

// worstOverlap returns the longest stall overlapping [from, to] (0: none).
func (s *stallMonitors) worstOverlap(from, to int64) (time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var worst time.Duration
	cpu := -1
	for _, st := range s.stalls {
		if st.end >= from && st.start <= to {
			if d := time.Duration(st.end - st.start); d > worst {
				worst, cpu = d, st.cpu
			}
		}
	}
	return worst, cpu
}

func (s *stallMonitors) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stalls)
}
