package filechannel

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

// BenchmarkFlow is the channel in the shape of the peers harness (issue
// 27): 4 producers committing puts of 1000 events of 256 bytes, one
// consumer taking and committing 1000 at a time, capacity 20000. One op is
// one event through. Besides time it reports the process's CPU time per
// event (user+system, so a loaded machine's share of the CPU does not
// count), fdatasyncs per 1000 events and events per put commit's sync:
//
//	go test -run='^$' -bench=Flow -benchmem -count=6 ./internal/channel/file/ | tee new.txt
//	benchstat old.txt new.txt
func BenchmarkFlow(b *testing.B) {
	c := start(b, newDirs(b), map[string]string{"capacity": "20000", "transactionCapacity": "1000",
		"maxFileSize": "67108864"})
	defer stop(b, c)
	benchFlow(b, c, c.walStats)
}

func benchFlow(b *testing.B, ch flow.Channel, stats func() wal.Stats) {
	const producers, batch, size = 4, 1000, 256
	body := make([]byte, size-1)
	b.ReportAllocs()
	b.SetBytes(size)
	before := stats()
	cpu0 := testutil.CPUTime()
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := make([]event.Event, batch)
			for {
				n := left.Add(-batch)
				k := batch
				if n < 0 {
					k = batch + int(n)
				}
				if k <= 0 {
					return
				}
				now := event.Now()
				for i := range evs[:k] {
					evs[i] = event.Event{Body: body, ReceivedAt: now}
				}
				if err := testutil.PutCommit(ch, evs[:k]); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	dst := make([]event.Event, 0, batch)
	for got := 0; got < b.N; {
		tx := ch.Begin()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		evs, err := tx.Take(ctx, dst[:0], batch)
		cancel()
		if err != nil || len(evs) == 0 {
			tx.Rollback()
			b.Fatalf("take: %d events, %v", len(evs), err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			b.Fatal(err)
		}
		got += len(evs)
	}
	wg.Wait()
	b.StopTimer()
	after := stats()
	b.ReportMetric(float64(testutil.CPUTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(after.Syncs-before.Syncs)*1000/float64(b.N), "syncs/1000ops")
}

// BenchmarkFlowMemory is BenchmarkFlow with the memory channel, for scale.
func BenchmarkFlowMemory(b *testing.B) {
	p := config.FromMap("a1.channels.c1.", map[string]string{"capacity": "20000", "transactionCapacity": "1000", "byteCapacity": "0"})
	ch, err := memorychannel.New(flow.Env{Agent: "a1", Name: "c1", Type: "memory"}, p)
	if err != nil || p.Err() != nil {
		b.Fatal(err, p.Err())
	}
	if err := ch.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer ch.Stop(context.Background())
	benchFlow(b, ch, func() wal.Stats { return wal.Stats{} })
}
