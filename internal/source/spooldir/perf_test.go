package spooldirsource

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestPerfSpooldir measures what recording the progress after every batch
// costs (docs/PERFORMANCE.md, section "spooldir"): the real agent reads
// SLUICE_PERF_FILES files (default 40) of SLUICE_PERF_LINES lines (default
// 25,000) of 100 bytes from a spool directory into a memory channel and a
// null sink, so the source is the bottleneck, and is timed until every
// file is marked done. With SLUICE_PERF_BASELINE=/path/to/other/sluice the
// same runs alternate with that binary (built from an older commit), so
// both are measured under the same load:
//
//	git worktree add /tmp/old COMMIT && (cd /tmp/old && go build -o /tmp/sluice-old ./cmd/sluice)
//	SLUICE_PERF=1 SLUICE_PERF_BASELINE=/tmp/sluice-old go test -run TestPerfSpooldir -v -count=1 ./internal/source/spooldir/
func TestPerfSpooldir(t *testing.T) {
	testutil.RequirePerf(t)
	bins := []struct{ name, path string }{{"this build", binary(t)}}
	if old := os.Getenv("SLUICE_PERF_BASELINE"); old != "" {
		bins = append(bins, struct{ name, path string }{"baseline", old})
	}
	files := testutil.EnvInt("SLUICE_PERF_FILES", 40)
	perFile := testutil.EnvInt("SLUICE_PERF_LINES", 25000)
	rounds := testutil.EnvInt("SLUICE_PERF_ROUNDS", 3)
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	line := append(bytes.Repeat([]byte("x"), 99), '\n')
	content := bytes.Repeat(line, perFile)
	for f := range files {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%03d.log", f)), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines := files * perFile
	for _, batch := range []int{100, 1000} {
		for round := range rounds {
			for _, b := range bins {
				dir := filepath.Join(base, fmt.Sprintf("run-%d-%d-%s", batch, round, b.name[:4]))
				spool := filepath.Join(dir, "spool")
				if err := os.MkdirAll(spool, 0o755); err != nil {
					t.Fatal(err)
				}
				for f := range files {
					name := fmt.Sprintf("f%03d.log", f)
					if err := os.Link(filepath.Join(src, name), filepath.Join(spool, name)); err != nil {
						t.Fatal(err)
					}
				}
				conf := filepath.Join(dir, "agent.properties")
				if err := os.WriteFile(conf, []byte(fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = spooldir
a1.sources.r1.spoolDir = %s
a1.sources.r1.batchSize = %d
a1.sources.r1.deletePolicy = immediate
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 100000
a1.channels.c1.transactionCapacity = 1000
a1.sinks.k1.type = null
a1.sinks.k1.batchSize = 1000
a1.sinks.k1.channel = c1
`, spool, batch)), 0o644); err != nil {
					t.Fatal(err)
				}
				log := newLogFile(t)
				t0 := time.Now()
				a := startAgent(t, b.path, conf, log.f)
				testutil.WaitFor(t, 10*time.Minute, "every file read", func() bool {
					m, _ := filepath.Glob(filepath.Join(spool, "f*.log"))
					return len(m) == 0
				})
				took := time.Since(t0)
				a.Stop(30 * time.Second)
				t.Logf("batchSize %4d, %-10s: %d files of %d lines in %v: %.0f files/s, %.0f lines/s",
					batch, b.name, files, perFile, took.Round(time.Millisecond),
					float64(files)/took.Seconds(), float64(lines)/took.Seconds())
				os.RemoveAll(dir)
			}
		}
	}
}
