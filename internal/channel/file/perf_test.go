package file

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
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
	if os.Getenv("SLUICE_PERF") == "" {
		t.Skip("set SLUICE_PERF=1 to run")
	}
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
