package taildirsource

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
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

// BenchmarkTail tails a file of CRI records (lines of 100 to 300 bytes,
// one in ten cut in two pieces) as plain lines (format = line: an event per
// record, Flume's taildir) and as container logs (format = cri: the pieces
// joined, the headers stream, timestamp and time), on the same bytes. It
// reports the wall time and the process CPU per record read, and the ratio
// of the two formats is the cost of reading records:
//
//	go test -run XXX -bench BenchmarkTail -count 10 ./internal/source/taildir/ | tee tail.txt
//	benchstat -col /format tail.txt
func BenchmarkTail(b *testing.B) {
	data, lines := benchCRI(16 << 20)
	records := lines + (lines+9)/10
	dir := b.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, "0.log"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, format := range []string{"line", "cri"} {
		b.Run("format="+format, func(b *testing.B) {
			want := int64(records)
			if format == "cri" {
				want = int64(lines)
			}
			var cpu time.Duration
			b.SetBytes(int64(len(data)))
			for i := 0; b.Loop(); i++ {
				p := config.FromMap("a1.sources.r1.", map[string]string{
					"filegroups": "g1", "filegroups.g1": logs + `/[0-9]+\.log`, "format": format,
					"positionFile": filepath.Join(dir, fmt.Sprintf("pos-%s-%d.json", format, i)), "batchSize": "1000",
				})
				env := sourcetest.Env("r1", "taildir")
				env.Logger = slog.New(slog.DiscardHandler)
				s, err := New(env, p)
				if err != nil || p.Err() != nil {
					b.Fatal(err, p.Err())
				}
				proc := &countingProcessor{}
				c0 := testutil.CPUTime()
				if err := s.Start(context.Background(), proc); err != nil {
					b.Fatal(err)
				}
				for proc.events.Load() < want {
					time.Sleep(time.Millisecond)
				}
				cpu += testutil.CPUTime() - c0
				s.Stop(context.Background())
				if got := proc.events.Load(); got != want {
					b.Fatalf("%d events, want %d", got, want)
				}
			}
			n := float64(b.N) * float64(records)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/record")
		})
	}
}
