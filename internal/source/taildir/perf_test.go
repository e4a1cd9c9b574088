package taildirsource_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// Opt-in measurements for docs/PERFORMANCE.md (section "taildir"):
//
//	SLUICE_PERF=1 go test -run 'TestPerf' -v -count=1 ./internal/source/taildir/

// TestPerfThroughput tails a file of 256-byte lines through a memory
// channel into a file_roll sink and reports MiB/s.
func TestPerfThroughput(t *testing.T) {
	testutil.RequirePerf(t)
	const total = 512 << 20 // bytes of log
	line := append(bytes.Repeat([]byte("x"), 255), '\n')
	for _, batch := range []int{100, 1000} {
		t.Run(fmt.Sprintf("batchSize=%d", batch), func(t *testing.T) {
			base := t.TempDir()
			logs, out := filepath.Join(base, "logs"), filepath.Join(base, "out")
			if err := os.Mkdir(logs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.Create(filepath.Join(logs, "app.log"))
			if err != nil {
				t.Fatal(err)
			}
			chunk := bytes.Repeat(line, 4096)
			for n := 0; n < total; n += len(chunk) {
				f.Write(chunk)
			}
			f.Close()
			conf := filepath.Join(base, "agent.properties")
			testutil.WriteFile(t, conf, fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = taildir
a1.sources.r1.channels = c1
a1.sources.r1.filegroups = g1
a1.sources.r1.filegroups.g1 = %s/app\.log
a1.sources.r1.positionFile = %s/pos.json
a1.sources.r1.batchSize = %d
a1.channels.c1.type = memory
a1.channels.c1.capacity = 100000
a1.channels.c1.transactionCapacity = %d
a1.sinks.k1.type = file_roll
a1.sinks.k1.channel = c1
a1.sinks.k1.sink.directory = %s
a1.sinks.k1.sink.rollInterval = 0
a1.sinks.k1.sink.batchSize = %d
`, logs, base, batch, batch, out, batch))
			var ru0 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0) // cannot fail for RUSAGE_SELF
			start := time.Now()
			a := agenttest.Start(t, agent.Options{File: conf, Logger: testLogger()})
			defer a.Stop(t.Context())
			if !testutil.Eventually(func() bool { return dirSize(out) >= total }, 5*time.Minute) {
				t.Fatalf("only %d of %d bytes arrived", dirSize(out), total)
			}
			el := time.Since(start)
			var ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)
			t.Logf("taildir -> memory -> file_roll, 256-byte lines, batchSize %d: %d MiB in %v = %.1f MiB/s (%.0f lines/s), CPU %.2f s (%.0f%% of one core)",
				batch, total>>20, el.Round(time.Millisecond), float64(total)/(1<<20)/el.Seconds(), float64(total/256)/el.Seconds(), cpu.Seconds(), 100*cpu.Seconds()/el.Seconds())
		})
	}
}

// TestPerfIdleFiles follows 1,000 idle files and reports the CPU the whole
// process uses while nothing is written.
func TestPerfIdleFiles(t *testing.T) {
	testutil.RequirePerf(t)
	const files = 1000
	for _, watch := range []bool{true, false} {
		t.Run(fmt.Sprintf("watchFiles=%v", watch), func(t *testing.T) {
			base := t.TempDir()
			logs, out := filepath.Join(base, "logs"), filepath.Join(base, "out")
			if err := os.Mkdir(logs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < files; i++ {
				testutil.WriteFile(t, filepath.Join(logs, fmt.Sprintf("app-%04d.log", i)), "one line\n")
			}
			conf := filepath.Join(base, "agent.properties")
			testutil.WriteFile(t, conf, fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = taildir
a1.sources.r1.channels = c1
a1.sources.r1.filegroups = g1
a1.sources.r1.filegroups.g1 = %s/app-.*\.log
a1.sources.r1.positionFile = %s/pos.json
a1.sources.r1.watchFiles = %v
a1.channels.c1.type = memory
a1.sinks.k1.type = file_roll
a1.sinks.k1.channel = c1
a1.sinks.k1.sink.directory = %s
a1.sinks.k1.sink.rollInterval = 0
`, logs, base, watch, out))
			a := agenttest.Start(t, agent.Options{File: conf, Logger: testLogger()})
			defer a.Stop(t.Context())
			if !testutil.Eventually(func() bool { return dirSize(out) >= files*9 }, time.Minute) {
				t.Fatalf("the files' lines did not arrive: %d bytes", dirSize(out))
			}
			time.Sleep(time.Second)
			const idle = 20 * time.Second
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0) // cannot fail for RUSAGE_SELF
			time.Sleep(idle)
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)
			t.Logf("%d idle files, watchFiles=%v: %v CPU in %v = %.2f%% of one core", files, watch, cpu.Round(time.Millisecond), idle, 100*cpu.Seconds()/idle.Seconds())
		})
	}
}

func tv(t syscall.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}

func dirSize(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}
