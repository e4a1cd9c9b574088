package wal

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// The tests in this file measure the machine and take tens of seconds, so
// they run only when asked:
//
//	SLUICE_PERF=1 go test -run=Perf -v ./internal/wal/

// TestPerfThroughput: 1 KiB records, 4 producers, each Append durable
// before it returns; compared with raw 1 MiB write+fdatasync of the same
// size in the same run. Target: >= 300,000 events/s and >= 75% of raw.
func TestPerfThroughput(t *testing.T) {
	testutil.RequirePerf(t)
	const size, producers, batch, perProducer = 1024, 4, 512, 256 * 512
	dir := t.TempDir()
	l := mustOpen(t, dir, quietOpts(0))
	defer l.Close()
	recs := make([][]byte, batch)
	for i := range recs {
		recs[i] = rec(i, size)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perProducer / batch {
				if _, err := l.Append(recs...); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	events := producers * perProducer
	eps := float64(events) / el.Seconds()
	walMB := float64(events*size) / el.Seconds() / 1e6
	raw := rawWriteSync(t, filepath.Join(dir, "raw"), int64(events)*FrameSize(size), 1<<20)
	st := l.Stats()
	t.Logf("wal: %d events in %v: %.0f events/s, %.0f MB/s, %.1f appends/sync", events, el, eps, walMB,
		float64(st.Appends)/float64(st.Syncs))
	t.Logf("raw 1 MiB write+fdatasync: %.0f MB/s; wal/raw = %.2f", raw, walMB/raw)
	if eps < 300000 || walMB < 0.75*raw {
		t.Errorf("below target: %.0f events/s (want >= 300000), %.2f of raw (want >= 0.75)", eps, walMB/raw)
	}
}

// TestPerfLatency: at 200 single-record Appends per second, the P99 of an
// Append must be at most twice the disk's single 1 KiB write+fdatasync
// latency, measured interleaved with the Appends (same load, same moment)
// at the same percentile.
func TestPerfLatency(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := mustOpen(t, dir, quietOpts(0))
	defer l.Close()
	buf := make([]byte, 1033)
	var raw, lat []time.Duration
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := range 2000 {
		<-tick.C
		s := time.Now()
		if i%2 == 0 {
			f.Write(buf)
			if err := datasync(f); err != nil {
				t.Fatal(err)
			}
			raw = append(raw, time.Since(s))
			continue
		}
		if _, err := l.Append(buf[:1024]); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(s))
	}
	slices.Sort(raw)
	slices.Sort(lat)
	q := func(d []time.Duration, p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	t.Logf("raw write+fdatasync: p50 %v p99 %v; wal Append at 200/s: p50 %v p99 %v",
		q(raw, .5), q(raw, .99), q(lat, .5), q(lat, .99))
	if q(lat, .99) > 2*q(raw, .99) {
		t.Errorf("append p99 %v > 2 x fdatasync p99 %v", q(lat, .99), q(raw, .99))
	}
}

// TestPerfWriteback compares, round by round on the same disk, the log
// with and without starting writeback after each write pass, and raw 8 MiB
// write+fdatasync: 1 KiB records, 4 producers, 1000 records per Append.
func TestPerfWriteback(t *testing.T) {
	testutil.RequirePerf(t)
	const size, producers, batch, total = 1024, 4, 1000, 400000
	recs := make([][]byte, batch)
	for i := range recs {
		recs[i] = rec(i, size)
	}
	run := func(noWB bool) float64 {
		opts := quietOpts(0)
		opts.noWriteback = noWB
		l := mustOpen(t, t.TempDir(), opts)
		defer l.Close()
		start := time.Now()
		var wg sync.WaitGroup
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range total / producers / batch {
					if _, err := l.Append(recs...); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(total*size) / time.Since(start).Seconds() / 1e6
	}
	for round := range 4 {
		raw := rawWriteSync(t, filepath.Join(t.TempDir(), "raw"), total*FrameSize(size), 8<<20)
		var with, without float64
		if round%2 == 0 {
			with, without = run(false), run(true)
		} else {
			without, with = run(true), run(false)
		}
		t.Logf("round %d: MB/s of records: writeback %.0f, without %.0f; raw 8 MiB %.0f; ratios %.2f / %.2f",
			round+1, with, without, raw, with/raw, without/raw)
	}
}
