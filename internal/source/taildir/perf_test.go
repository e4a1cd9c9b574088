package taildirsource_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/metrics"
	taildirsource "github.com/sluicehq/sluice/internal/source/taildir"
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
			conf := perfConf(t, base, logs+`/app\.log`,
				fmt.Sprintf("a1.sources.r1.batchSize = %d", batch),
				"a1.channels.c1.capacity = 100000",
				fmt.Sprintf("a1.channels.c1.transactionCapacity = %d", batch),
				"a1.sinks.k1.type = file_roll",
				"a1.sinks.k1.sink.directory = "+out,
				"a1.sinks.k1.sink.rollInterval = 0",
				fmt.Sprintf("a1.sinks.k1.sink.batchSize = %d", batch))
			c0 := testutil.CPUTime()
			start := time.Now()
			a := agenttest.Start(t, agent.Options{File: conf, Logger: testLogger()})
			defer a.Stop(t.Context())
			if !testutil.Eventually(func() bool { return dirSize(out) >= total }, 5*time.Minute) {
				t.Fatalf("only %d of %d bytes arrived", dirSize(out), total)
			}
			el := time.Since(start)
			cpu := testutil.CPUTime() - c0
			t.Logf("taildir -> memory -> file_roll, 256-byte lines, batchSize %d: %d MiB in %v = %.1f MiB/s (%.0f lines/s), CPU %.2f s (%.0f%% of one core)",
				batch, total>>20, el.Round(time.Millisecond), float64(total)/(1<<20)/el.Seconds(), float64(total/256)/el.Seconds(), cpu.Seconds(), 100*cpu.Seconds()/el.Seconds())
		})
	}
}

// TestPerfContainerLogs measures what reading container logs costs the
// whole agent against plain tailing of the same bytes: a file of CRI
// records (lines of 100 to 300 bytes, one in ten cut in two records, as
// BenchmarkTail's) tailed with format = cri and with format = line, and the
// same lines as Docker's json-file records with format = docker and line,
// each through a memory channel into a null sink, in interleaved rounds. A
// row's agent starts on an empty directory; the file (in the page cache) is
// linked into it once the agent runs, and the process's CPU time and the
// wall time are taken from then until the sink has taken every event. The
// figures are per line the container wrote: format = cri or docker makes
// one event of it, line makes 1.1 (an event per record).
//
//	SLUICE_PERF=1 go test -run 'TestPerfContainerLogs' -v -count=1 ./internal/source/taildir/
//
// SLUICE_PERF_ROUNDS (5) and SLUICE_PERF_MB (128, each file) size it.
func TestPerfContainerLogs(t *testing.T) {
	testutil.RequirePerf(t)
	rounds := testutil.EnvInt("SLUICE_PERF_ROUNDS", 5)
	size := testutil.EnvInt("SLUICE_PERF_MB", 128) << 20
	dir := t.TempDir()
	for _, data := range []string{"cri", "docker"} {
		gen := taildirsource.BenchCRI
		if data == "docker" {
			gen = taildirsource.BenchDocker
		}
		content, lines := gen(size)
		records, mib := lines+(lines+9)/10, len(content)>>20
		file := filepath.Join(dir, data+".log")
		if err := os.WriteFile(file, content, 0o644); err != nil {
			t.Fatal(err)
		}
		type row struct{ cpu, wall []time.Duration }
		rows := map[string]*row{"line": {}, data: {}}
		var ratios []float64
		for r := 0; r <= rounds; r++ {
			var cpu [2]time.Duration
			for i, format := range []string{"line", data} {
				want := lines
				if format == "line" {
					want = records
				}
				runtime.GC() // the row before's garbage is not this one's to collect
				c, w := tailOnce(t, file, format, want)
				if r == 0 {
					continue // a round to warm up (the page cache, the heap)
				}
				rows[format].cpu, rows[format].wall = append(rows[format].cpu, c), append(rows[format].wall, w)
				cpu[i] = c
				t.Logf("%s data, round %d, format = %-6s: %5.0f CPU ns per line, %5.0f wall ns per line (%.2f M lines/s)",
					data, r, format, perLine(c, lines), perLine(w, lines), float64(lines)/w.Seconds()/1e6)
			}
			if r > 0 {
				ratios = append(ratios, cpu[1].Seconds()/cpu[0].Seconds())
			}
		}
		for _, format := range []string{"line", data} {
			c, w := median(rows[format].cpu), median(rows[format].wall)
			t.Logf("%s data, %d MiB, %d lines (%d records), format = %-6s: median %5.0f CPU ns per line, %.2f M lines/s",
				data, mib, lines, records, format, perLine(c, lines), float64(lines)/w.Seconds()/1e6)
		}
		slices.Sort(ratios)
		t.Logf("%s data: format = %s costs %.2f x format = line in CPU per line (median of %d rounds; each round's %s)",
			data, data, ratios[len(ratios)/2], rounds, fmtRatios(ratios))
	}
}

// tailOnce runs an agent that tails file, linked into an empty directory
// once the agent runs, with format, into a null sink, and returns the
// process's CPU time and the wall time from the link until the sink took
// want events.
func tailOnce(t *testing.T, file, format string, want int) (cpu, wall time.Duration) {
	t.Helper()
	base := t.TempDir()
	logs := filepath.Join(base, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := perfConf(t, base, logs+`/[0-9]+\.log`,
		"a1.sources.r1.format = "+format,
		"a1.sources.r1.batchSize = 1000",
		"a1.channels.c1.capacity = 100000",
		"a1.channels.c1.transactionCapacity = 1000",
		"a1.sinks.k1.type = null",
		"a1.sinks.k1.batchSize = 1000")
	a := agenttest.Start(t, agent.Options{File: conf, Logger: testLogger()})
	defer a.Stop(t.Context())
	c0 := testutil.CPUTime()
	start := time.Now()
	if err := os.Link(file, filepath.Join(logs, "0.log")); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(func() bool { return drained(a, "k1") >= want }, 5*time.Minute) {
		t.Fatalf("format = %s: the sink took %d events of %d", format, drained(a, "k1"), want)
	}
	wall = time.Since(start)
	cpu = testutil.CPUTime() - c0
	if got := drained(a, "k1"); got != want {
		t.Fatalf("format = %s: the sink took %d events, want %d", format, got, want)
	}
	return cpu, wall
}

// drained is how many events sink name of agent a took.
func drained(a *agent.Agent, name string) int {
	return int(testutil.Counter(a.Metrics(), metrics.KindSink, name, "EventDrainSuccessCount"))
}

func perLine(d time.Duration, lines int) float64 { return float64(d.Nanoseconds()) / float64(lines) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func fmtRatios(rs []float64) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += ", "
		}
		out += strconv.FormatFloat(r, 'f', 2, 64)
	}
	return out
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
			conf := perfConf(t, base, logs+`/app-.*\.log`,
				fmt.Sprintf("a1.sources.r1.watchFiles = %v", watch),
				"a1.sinks.k1.type = file_roll",
				"a1.sinks.k1.sink.directory = "+out,
				"a1.sinks.k1.sink.rollInterval = 0")
			a := agenttest.Start(t, agent.Options{File: conf, Logger: testLogger()})
			defer a.Stop(t.Context())
			if !testutil.Eventually(func() bool { return dirSize(out) >= files*9 }, time.Minute) {
				t.Fatalf("the files' lines did not arrive: %d bytes", dirSize(out))
			}
			time.Sleep(time.Second)
			const idle = 20 * time.Second
			c0 := testutil.CPUTime()
			time.Sleep(idle)
			cpu := testutil.CPUTime() - c0
			t.Logf("%d idle files, watchFiles=%v: %v CPU in %v = %.2f%% of one core", files, watch, cpu.Round(time.Millisecond), idle, 100*cpu.Seconds()/idle.Seconds())
		})
	}
}

// perfConf writes the config of an agent a1 whose taildir source r1 follows
// pattern (group g1, position file in base) into memory channel c1 and
// sink k1, with the lines given (the sink's type among them), and returns
// its path.
func perfConf(t *testing.T, base, pattern string, lines ...string) string {
	t.Helper()
	conf := filepath.Join(base, "agent.properties")
	testutil.WriteFile(t, conf, strings.Join(append([]string{
		"a1.sources = r1", "a1.channels = c1", "a1.sinks = k1",
		"a1.sources.r1.type = taildir", "a1.sources.r1.channels = c1",
		"a1.sources.r1.filegroups = g1", "a1.sources.r1.filegroups.g1 = " + pattern,
		"a1.sources.r1.positionFile = " + filepath.Join(base, "pos.json"),
		"a1.channels.c1.type = memory", "a1.sinks.k1.channel = c1",
	}, lines...), "\n")+"\n")
	return conf
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
