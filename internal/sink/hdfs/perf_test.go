package hdfssink

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/sink/fileroll"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestPerfHDFSBesideFileRoll measures MiB/s of 1 KiB events through the
// hdfs sink into local files and into VersityGW, beside file_roll, on the
// same disk in the same run: each round drains the same events from a
// memory channel through each sink in turn (interleaved, so the machine's
// noise falls on all alike), and the median of the rounds is reported.
// Opt-in (SLUICE_PERF=1):
//
//	SLUICE_PERF=1 go test -run PerfHDFSBesideFileRoll -v -count=1 ./internal/sink/hdfs/
func TestPerfHDFSBesideFileRoll(t *testing.T) {
	testutil.RequirePerf(t)
	events := testutil.EnvInt("SLUICE_HDFS_PERF_EVENTS", 200000)
	rounds := testutil.EnvInt("SLUICE_HDFS_PERF_ROUNDS", 5)
	const batch = 1000
	v := startVersity(t)
	body := []byte(strings.Repeat("x", 1023))

	type sinkCase struct {
		name  string
		build func(env flow.Env, dir string) flow.Sink
	}
	hdfsSink := func(extra map[string]string) func(env flow.Env, dir string) flow.Sink {
		return func(env flow.Env, dir string) flow.Sink {
			props := map[string]string{"hdfs.path": dir, "hdfs.batchSize": fmt.Sprint(batch), "hdfs.rollCount": "0",
				"hdfs.rollSize": "67108864", "hdfs.rollInterval": "30", "hdfs.fileType": "DataStream",
				"hdfs.stagingDir": filepath.Join(dir, "..", "staging-"+filepath.Base(dir))}
			for k, val := range extra {
				props[k] = val
			}
			if strings.HasPrefix(props["hdfs.path"], "s3a://") {
				props["hdfs.path"] = props["hdfs.path"] + "/" + filepath.Base(dir)
			}
			return newBenchSink(t, env, props)
		}
	}
	cases := []sinkCase{
		{"file_roll", func(env flow.Env, dir string) flow.Sink {
			s, err := filerollsink.New(env, config.FromMap("a1.sinks.k1.", map[string]string{"sink.directory": dir, "sink.batchSize": fmt.Sprint(batch), "sink.rollInterval": "30"}))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"file_roll sink.fsync=true", func(env flow.Env, dir string) flow.Sink {
			s, err := filerollsink.New(env, config.FromMap("a1.sinks.k1.", map[string]string{"sink.directory": dir, "sink.batchSize": fmt.Sprint(batch), "sink.rollInterval": "30", "sink.fsync": "true"}))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"hdfs DataStream local", hdfsSink(nil)},
		{"hdfs SequenceFile local", hdfsSink(map[string]string{"hdfs.fileType": "SequenceFile"})},
		{"hdfs CompressedStream gzip local", hdfsSink(map[string]string{"hdfs.fileType": "CompressedStream", "hdfs.codeC": "gzip"})},
		{"hdfs DataStream s3a (VersityGW)", hdfsSink(map[string]string{"hdfs.path": "s3a://" + s3Bucket + "/perf", "fs.s3a.endpoint": v.endpoint,
			"fs.s3a.access.key": s3Access, "fs.s3a.secret.key": s3Secret, "fs.s3a.path.style.access": "true"})},
	}
	results := make([][]float64, len(cases))
	base := t.TempDir()
	for r := range rounds {
		for i, c := range cases {
			reg := metrics.NewRegistry("a1")
			chEnv := flow.Env{Agent: "a1", Name: "c1", Type: "memory", Metrics: reg, Logger: slog.New(slog.DiscardHandler)}
			ch, err := memorychannel.New(chEnv, config.FromMap("a1.channels.c1.", map[string]string{
				"capacity": fmt.Sprint(events), "transactionCapacity": fmt.Sprint(batch)}))
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			evs := make([]event.Event, batch)
			for n := 0; n < events; n += batch {
				for j := range evs {
					evs[j] = event.Event{Body: body}
				}
				if err := testutil.PutCommit(ch, evs); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(base, fmt.Sprintf("r%d-c%d", r, i))
			env := flow.Env{Agent: "a1", Name: "k1", Type: "hdfs", Metrics: reg, Logger: slog.New(slog.DiscardHandler), Channel: ch}
			s := c.build(env, dir)
			start := time.Now()
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			for ch.Len() > 0 {
				if _, err := s.Process(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			// Stop closes, renames or uploads every file: part of the work.
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			el := time.Since(start)
			ch.Stop(context.Background())
			results[i] = append(results[i], float64(events)*1024/(1<<20)/el.Seconds())
		}
	}
	med := func(x []float64) float64 { y := slices.Clone(x); slices.Sort(y); return y[len(y)/2] }
	ref := med(results[0])
	t.Logf("%d events of 1 KiB, batch %d, %d interleaved rounds; median MiB/s (min-max), ratio to file_roll:", events, batch, rounds)
	for i, c := range cases {
		m := med(results[i])
		t.Logf("  %-34s %7.1f MiB/s (%.1f-%.1f)  x%.2f", c.name, m, slices.Min(results[i]), slices.Max(results[i]), m/ref)
	}
}
