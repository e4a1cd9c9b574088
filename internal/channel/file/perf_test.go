package filechannel

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

// BenchmarkPutCommit: 4 producers commit transactions of batch 1 KiB
// events; every Commit returns only after its fdatasync.
//
//	go test -run='^$' -bench=PutCommit -benchmem -benchtime=200000x ./internal/channel/file/
func BenchmarkPutCommit(b *testing.B) {
	for _, batch := range []int{1, 100, 512} {
		b.Run("producers=4/batch="+strconv.Itoa(batch), func(b *testing.B) {
			c := start(b, newDirs(b), map[string]string{"capacity": "100000000", "transactionCapacity": "1000",
				"maxFileSize": strconv.Itoa(wal.DefaultSegmentSize)})
			defer stop(b, c)
			body := make([]byte, 1024)
			b.SetBytes(1024)
			b.ReportAllocs()
			var left atomic.Int64
			left.Store(int64(b.N))
			b.ResetTimer()
			t0 := time.Now()
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					evs := make([]event.Event, batch)
					for left.Add(-int64(batch)) > -int64(batch) {
						for i := range evs {
							evs[i] = event.Event{Body: body}
						}
						if err := testutil.PutCommit(c, evs); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "events/s")
			st := c.walStats()
			b.ReportMetric(float64(st.Appends)/float64(max(st.Syncs, 1)), "appends/sync")
		})
	}
}

// TestPerfReopenMillion fills a channel with 1,000,000 events of 1 KiB and
// times a restart from the checkpoint and one with no checkpoint (full
// replay):
//
//	SLUICE_PERF=1 go test -run=PerfReopen -v ./internal/channel/file/
func TestPerfReopenMillion(t *testing.T) {
	testutil.RequirePerf(t)
	d := newDirs(t)
	extra := map[string]string{"transactionCapacity": "1000", "maxFileSize": strconv.Itoa(wal.DefaultSegmentSize)}
	c := start(t, d, extra)
	body := make([]byte, 1024)
	evs := make([]event.Event, 1000)
	t0 := time.Now()
	for range 1000 {
		for i := range evs {
			evs[i] = event.Event{Body: body}
		}
		if err := testutil.PutCommit(c, evs); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("put 1,000,000 events (one producer, 1000 per commit) in %v", time.Since(t0))
	stop(t, c)

	for _, tc := range []struct {
		name   string
		before func()
	}{
		{"from checkpoint", func() {}},
		{"without checkpoint (full replay)", func() { os.Remove(filepath.Join(d.ck, wal.CheckpointFile)) }},
	} {
		tc.before()
		c, _ := build(t, d, extra)
		t0 := time.Now()
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if c.Len() != 1000000 {
			t.Fatalf("%s: Len = %d", tc.name, c.Len())
		}
		t.Logf("reopen %s: %v", tc.name, took)
		if took > 10*time.Second {
			t.Errorf("reopen %s took %v, want seconds", tc.name, took)
		}
		stop(t, c)
	}
}

// The perf tests below measure the machine against itself and take about a
// minute, so they run only when asked:
//
//	SLUICE_PERF=1 go test -run='Perf(Throughput|Latency|MemoryVsFile)' -v ./internal/channel/file/
//
// SLUICE_PERF_BATCH sets the events per put transaction (default 1000).

// putLoad has producers commit n 1 KiB events, batch per transaction, and
// returns events/s. A consumer, when take is set, takes and commits
// batches of 1000 at the same time.
func putLoad(tb testing.TB, c flow.Channel, producers, batch, n int, take bool) float64 {
	body := make([]byte, 1024)
	var left atomic.Int64
	left.Store(int64(n))
	t0 := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := make([]event.Event, batch)
			for left.Add(-int64(batch)) > -int64(batch) {
				for i := range evs {
					evs[i] = event.Event{Body: body}
				}
				if err := testutil.PutCommit(c, evs); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	if take {
		got := 0
		for got < n && !tb.Failed() {
			evs, err := testutil.TakeCommit(c, 1000, 2*time.Second)
			if err != nil {
				tb.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			got += len(evs)
		}
	}
	wg.Wait()
	return float64(n) / time.Since(t0).Seconds()
}

func perfChannel(tb testing.TB, extra map[string]string) *Channel {
	m := map[string]string{"capacity": "100000000", "transactionCapacity": "10000",
		"maxFileSize": strconv.Itoa(wal.DefaultSegmentSize), "minimumRequiredSpace": "0"}
	for k, v := range extra {
		m[k] = v
	}
	return start(tb, newDirs(tb), m)
}

// TestPerfThroughput: 1 KiB events, 4 producers, every put transaction
// durable (fdatasync'ed) before its commit returns, against the raw disk:
// the same bytes written sequentially with write+fdatasync in 8 MiB steps
// (near the disk's best), and, for the log's own overhead, in steps of as
// many bytes as the channel put in one fdatasync. This disk's own speed
// moves by 3-5x from one second to the next, so the three run in short
// interleaved slices (order rotated every slice) on one open channel and
// two raw files, and each side's MB/s is its total bytes over its total
// time. Target: >= 300,000 events/s and >= 75% of raw.
func TestPerfThroughput(t *testing.T) {
	testutil.RequirePerf(t)
	const producers = 4
	per := testutil.EnvInt("SLUICE_PERF_EVENTS", 50000) // events per slice
	nslices := testutil.EnvInt("SLUICE_PERF_SLICES", 30)
	batch := testutil.EnvInt("SLUICE_PERF_BATCH", 1000)
	c := perfChannel(t, nil)
	defer stop(t, c)
	dir := t.TempDir()
	raw8, same := newRawFile(t, dir), newRawFile(t, dir)
	var chanSecs, raw8Secs, sameSecs float64
	var ratios []float64
	bytes := int64(per) * 1024
	step := 1 << 20 // the channel's bytes per fdatasync in its last slice
	for i := range nslices {
		var ch, r8, rs float64
		for k := range 3 {
			switch (i + k) % 3 {
			case 0:
				before := c.walStats()
				ch = float64(per) / putLoad(t, c, producers, batch, per, false)
				after := c.walStats()
				if syncs := after.Syncs - before.Syncs; syncs > 0 {
					step = max(int((after.BytesWritten-before.BytesWritten)/syncs), 64<<10)
				}
			case 1:
				r8 = raw8.write(t, bytes, 8<<20)
			case 2:
				rs = same.write(t, bytes, step)
			}
		}
		chanSecs, raw8Secs, sameSecs = chanSecs+ch, raw8Secs+r8, sameSecs+rs
		ratios = append(ratios, r8/ch)
	}
	st := c.walStats()
	total := float64(bytes) * float64(nslices) / 1e6
	chMB, r8MB, sameMB := total/chanSecs, total/raw8Secs, total/sameSecs
	slices.Sort(ratios)
	t.Logf("%d slices of %d events (%d producers, %d events per transaction; %.1f commits and %.2f MB per fdatasync)",
		nslices, per, producers, batch, float64(st.Appends)/float64(max(st.Syncs, 1)), float64(st.BytesWritten)/float64(max(st.Syncs, 1))/1e6)
	t.Logf("file channel: %.0f events/s = %.0f MB/s of events; raw write+fdatasync: 8 MiB steps %.0f MB/s, same bytes per fdatasync %.0f MB/s",
		float64(per*nslices)/chanSecs, chMB, r8MB, sameMB)
	t.Logf("channel / raw 8 MiB = %.2f (per slice %.2f-%.2f, median %.2f); channel / raw same step = %.2f",
		chMB/r8MB, ratios[0], ratios[len(ratios)-1], ratios[len(ratios)/2], chMB/sameMB)
	if chMB/r8MB < 0.75 {
		t.Errorf("below target: %.2f of raw (want >= 0.75)", chMB/r8MB)
	}
	// 300,000 events/s of 1 KiB is 307 MB/s: a disk slower than that at
	// the moment cannot show it, and the ratio above is then the figure.
	const need = 300000 * 1024 / 1e6
	switch eps := float64(per*nslices) / chanSecs; {
	case eps >= 300000:
	case r8MB < need:
		t.Logf("300,000 events/s not measurable in this run: the disk itself wrote %.0f MB/s raw, the target needs %.0f", r8MB, need)
	default:
		t.Errorf("below target: %.0f events/s (want >= 300000) on a disk that wrote %.0f MB/s raw", eps, r8MB)
	}
}

// rawFile is a file written sequentially with write+fdatasync: what the
// disk gives a plain writer that syncs.
type rawFile struct {
	f   *os.File
	buf []byte
}

func newRawFile(tb testing.TB, dir string) *rawFile {
	f, err := os.CreateTemp(dir, "raw")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return &rawFile{f: f}
}

// write appends total bytes, step bytes per write(2) each followed by
// fdatasync(2), and returns the seconds it took.
func (r *rawFile) write(tb testing.TB, total int64, step int) float64 {
	if len(r.buf) < step {
		r.buf = make([]byte, step)
		for i := range r.buf {
			r.buf[i] = byte(i)
		}
	}
	t0 := time.Now()
	for done := int64(0); done < total; done += int64(step) {
		if _, err := r.f.Write(r.buf[:min(int64(step), total-done)]); err != nil {
			tb.Fatal(err)
		}
		if err := syscall.Fdatasync(int(r.f.Fd())); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(t0).Seconds()
}

// TestPerfLatency: one producer commits one 1 KiB event every 10 ms and,
// 5 ms after each, the same goroutine times a raw 1 KiB write+fdatasync
// on a file in the same dir: 200 operations a second in all, half of them
// channel commits. A commit's P99 must be at most twice the raw P99.
func TestPerfLatency(t *testing.T) {
	testutil.RequirePerf(t)
	c := perfChannel(t, nil)
	defer stop(t, c)
	f, err := os.CreateTemp(c.dataDirs[0], "raw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1024)
	var raw, lat []time.Duration
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := range 3000 {
		<-tick.C
		t0 := time.Now()
		if i%2 == 0 {
			f.Write(buf)
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				t.Fatal(err)
			}
			raw = append(raw, time.Since(t0))
			continue
		}
		if err := testutil.PutCommit(c, []event.Event{{Body: buf}}); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if i%200 == 1 {
			testutil.TakeAll(t, c, 100, 100, time.Second) // a sink keeps it short
		}
	}
	slices.Sort(raw)
	slices.Sort(lat)
	q := func(d []time.Duration, p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	t.Logf("raw 1 KiB write+fdatasync: p50 %v p99 %v; file channel commit of 1 event at 100/s (+100 raw/s): p50 %v p99 %v; p99 ratio %.2f",
		q(raw, .5), q(raw, .99), q(lat, .5), q(lat, .99), float64(q(lat, .99))/float64(q(raw, .99)))
	if q(lat, .99) > 2*q(raw, .99) {
		t.Errorf("commit p99 %v > 2 x fdatasync p99 %v", q(lat, .99), q(raw, .99))
	}
}

// TestPerfMemoryVsFile: the same workload through the memory channel and
// the file channel: 4 producers commit 1 KiB events in transactions of
// 100, one consumer takes and commits batches of 1000 at the same time.
func TestPerfMemoryVsFile(t *testing.T) {
	testutil.RequirePerf(t)
	const n = 400000
	for _, batch := range []int{100, testutil.EnvInt("SLUICE_PERF_BATCH", 1000)} {
		for round := range 2 {
			p := config.FromMap("a1.channels.m.", map[string]string{"capacity": "1000000", "transactionCapacity": "10000"})
			mc, err := memorychannel.New(flow.Env{Name: "m", Type: "memory", Logger: quiet}, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := mc.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			mem := putLoad(t, mc, 4, batch, n, true)
			mc.Stop(context.Background())
			fc := perfChannel(t, nil)
			file := putLoad(t, fc, 4, batch, n, true)
			stop(t, fc)
			t.Logf("| %d | %d | %.0f | %.0f | %.2f |", batch, round+1, mem, file, file/mem)
		}
	}
}
