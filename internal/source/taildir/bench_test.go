package taildirsource

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// countingProcessor counts what the source puts and keeps nothing: the
// benchmarks measure the source alone.
type countingProcessor struct{ events atomic.Int64 }

func (p *countingProcessor) Process(_ context.Context, events []event.Event) error {
	p.events.Add(int64(len(events)))
	return nil
}

// benchSource makes a taildir source of props that logs nothing.
func benchSource(b *testing.B, props map[string]string) flow.Source {
	b.Helper()
	p := config.FromMap("a1.sources.r1.", props)
	env := sourcetest.Env("r1", "taildir")
	env.Logger = slog.New(slog.DiscardHandler)
	s, err := New(env, p)
	if err != nil || p.Err() != nil {
		b.Fatal(err, p.Err())
	}
	return s
}

// BenchmarkTail tails a file of container log records (lines of 100 to
// 300 bytes, one in ten cut in two records) as plain lines (format = line:
// an event per record, Flume's taildir) and as container logs (format = cri
// or docker: the records of a line joined, the headers stream, timestamp
// and time), on the same bytes: data=cri holds CRI records, data=docker
// the same lines as dockerd's JSON. Every figure is per log line, the line
// the container wrote (what format = cri or docker makes one event of;
// format = line makes 1.1 events of it), so the two formats are compared
// on the same bytes and the same lines: the wall time from the start to
// the last line put, the CPU of the whole process in that time (the
// source's goroutine, the runtime's, the garbage collector's) and the
// memory allocated, per line. fileHeader=true is plain lines with the
// header file on each event: what a map of headers per event costs.
//
//	go test -run XXX -bench BenchmarkTail -count 10 ./internal/source/taildir/ | tee tail.txt
//	benchstat -row /data -col /format,/fileHeader tail.txt
func BenchmarkTail(b *testing.B) {
	for _, data := range []string{"cri", "docker"} {
		var content []byte
		var lines int
		if data == "cri" {
			content, lines = benchCRI(16 << 20)
		} else {
			content, lines = benchDocker(16 << 20)
		}
		records := lines + (lines+9)/10
		dir := b.TempDir()
		logs := filepath.Join(dir, "logs")
		if err := os.Mkdir(logs, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(logs, "0.log"), content, 0o644); err != nil {
			b.Fatal(err)
		}
		for _, run := range []struct {
			format     string
			fileHeader bool
		}{{"line", false}, {"line", true}, {data, false}} {
			format := run.format
			name := "data=" + data + "/format=" + format
			if run.fileHeader {
				name += "/fileHeader=true"
			}
			b.Run(name, func(b *testing.B) {
				want := int64(records)
				if format != "line" {
					want = int64(lines)
				}
				var wall, cpu time.Duration
				var mallocs, alloc uint64
				var ms runtime.MemStats
				b.SetBytes(int64(len(content)))
				for i := 0; b.Loop(); i++ {
					s := benchSource(b, map[string]string{
						"filegroups": "g1", "filegroups.g1": logs + `/[0-9]+\.log`, "format": format,
						"positionFile": filepath.Join(dir, fmt.Sprintf("pos-%s-%v-%d.json", format, run.fileHeader, i)), "batchSize": "1000",
						"fileHeader": strconv.FormatBool(run.fileHeader),
					})
					proc := &countingProcessor{}
					runtime.ReadMemStats(&ms)
					m0, a0 := ms.Mallocs, ms.TotalAlloc
					c0, w0 := testutil.CPUTime(), time.Now()
					if err := s.Start(context.Background(), proc); err != nil {
						b.Fatal(err)
					}
					for proc.events.Load() < want {
						time.Sleep(time.Millisecond)
					}
					cpu, wall = cpu+testutil.CPUTime()-c0, wall+time.Since(w0)
					runtime.ReadMemStats(&ms)
					mallocs, alloc = mallocs+ms.Mallocs-m0, alloc+ms.TotalAlloc-a0
					s.Stop(context.Background())
					if got := proc.events.Load(); got != want {
						b.Fatalf("%d events, want %d", got, want)
					}
				}
				n := float64(b.N) * float64(lines)
				b.ReportMetric(float64(wall.Nanoseconds())/n, "ns/line")
				b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/line")
				b.ReportMetric(float64(mallocs)/n, "allocs/line")
				b.ReportMetric(float64(alloc)/n, "B/line")
			})
		}
	}
}

// benchDocker writes the lines benchCRI writes as dockerd's json-file
// records: about size bytes, one line in ten cut in two records.
func benchDocker(size int) ([]byte, int) {
	r := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	lines := 0
	for b.Len() < size {
		n := 100 + r.IntN(200)
		text := strings.Repeat(string(rune('a'+lines%26)), n)
		ts := fmt.Sprintf("2024-05-01T10:%02d:%02d.%09dZ", lines/60%60, lines%60, r.IntN(1e9))
		const rec = `{"log":"%s","stream":"stdout","time":"%s"}` + "\n"
		if lines%10 == 0 {
			fmt.Fprintf(&b, rec, text[:n/2], ts)
			text = text[n/2:]
		}
		fmt.Fprintf(&b, rec, text+`\n`, ts)
		lines++
	}
	return b.Bytes(), lines
}

// BenchmarkTailLive appends one line at a time to a file being tailed and
// waits for its event: a live log that grows by a line, as most of a
// node's container logs do. B/append is what reading one append costs in
// memory (the slab the read fills, the events): it was a whole batch's
// slab, over 100 KB, before reads were bounded by what the file holds.
//
//	go test -run XXX -bench BenchmarkTailLive -benchtime 2000x ./internal/source/taildir/
func BenchmarkTailLive(b *testing.B) {
	for _, format := range []string{"line", "cri"} {
		b.Run("format="+format, func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "0.log")
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			s := benchSource(b, map[string]string{
				"filegroups": "g1", "filegroups.g1": dir + `/[0-9]+\.log`, "format": format,
				"positionFile": filepath.Join(dir, "pos.json"), "pollInterval": "10",
			})
			proc := &countingProcessor{}
			if err := s.Start(context.Background(), proc); err != nil {
				b.Fatal(err)
			}
			defer s.Stop(context.Background())
			line := "2024-05-01T10:00:00.123456789Z stdout F " + strings.Repeat("x", 160) + "\n"
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			a0 := ms.TotalAlloc
			n := int64(0)
			for b.Loop() {
				if _, err := f.WriteString(line); err != nil {
					b.Fatal(err)
				}
				n++
				for proc.events.Load() < n {
					time.Sleep(50 * time.Microsecond)
				}
			}
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.TotalAlloc-a0)/float64(n), "B/append")
		})
	}
}
