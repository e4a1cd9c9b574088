package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend measures 1 KiB records appended by 4 goroutines, each
// Append durable (fdatasync'ed) before it returns, for several batch sizes
// (records per Append). In the same run it writes the same number of bytes
// to a plain file in 1 MiB write+fdatasync steps and reports that raw
// bandwidth and the ratio (wal/raw1M), and the ratio to a raw loop that
// syncs as often as the WAL did (wal/raw_same_sync_size), which isolates
// the WAL's own overhead from the cost of smaller syncs:
//
//	go test -run='^$' -bench=Append -benchmem -benchtime=200000x ./internal/wal/
func BenchmarkAppend(b *testing.B) {
	for _, batch := range []int{1, 64, 256, 512, 1024} {
		b.Run(fmt.Sprintf("producers=4/batch=%d", batch), func(b *testing.B) {
			benchAppend(b, 4, batch, 1024)
		})
	}
}

func benchAppend(b *testing.B, producers, batch, size int) {
	dir := b.TempDir()
	l := mustOpen(b, dir, quietOpts(0))
	defer l.Close()
	recs := make([][]byte, batch)
	for i := range recs {
		recs[i] = rec(i, size)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var left atomic.Int64
	left.Store(int64(b.N))
	before := l.Stats()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := left.Add(-int64(batch))
				if n <= -int64(batch) {
					return
				}
				k := batch
				if n < 0 {
					k = batch + int(n)
				}
				if _, err := l.Append(recs[:k]...); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	st := l.Stats()
	eps := float64(b.N) / elapsed.Seconds()
	walMBps := float64(b.N*size) / elapsed.Seconds() / 1e6
	total := int64(b.N) * FrameSize(size)
	syncs := max(st.Syncs-before.Syncs, 1)
	raw := rawWriteSync(b, filepath.Join(dir, "raw"), total, 1<<20)
	same := rawWriteSync(b, filepath.Join(dir, "raw"), total, int(max(total/int64(syncs), 4096)))
	b.ReportMetric(eps, "events/s")
	b.ReportMetric(float64(st.Appends-before.Appends)/float64(syncs), "appends/sync")
	b.ReportMetric(raw, "raw1M_MB/s")
	b.ReportMetric(walMBps/raw, "wal/raw1M")
	b.ReportMetric(walMBps/same, "wal/raw_same_sync_size")
}

// rawWriteSync writes total bytes to a new file in step-sized write +
// fdatasync pairs and returns the bandwidth in MB/s.
func rawWriteSync(tb testing.TB, path string, total int64, step int) float64 {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, step)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	for done := int64(0); done < total; {
		n := int64(step)
		if total-done < n {
			n = total - done
		}
		if _, err := f.Write(buf[:n]); err != nil {
			tb.Fatal(err)
		}
		if err := datasync(f); err != nil {
			tb.Fatal(err)
		}
		done += n
	}
	return float64(total) / time.Since(start).Seconds() / 1e6
}
