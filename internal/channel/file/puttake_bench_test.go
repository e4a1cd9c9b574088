package filechannel

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

// BenchmarkPutTake is the put and take path of one event at a time, as at
// a low rate: a put transaction of one 1 KiB event, then a take
// transaction of it, each committed. The put commit waits for its
// fdatasync; the take commit for an earlier take record's (takesInFlight).
//
//	go test -run='^$' -bench=PutTake -benchmem -count=6 ./internal/channel/file/
func BenchmarkPutTake(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			c := start(b, newDirs(b), map[string]string{"capacity": "100000", "transactionCapacity": "1000",
				"maxFileSize": strconv.Itoa(wal.DefaultSegmentSize)})
			defer stop(b, c)
			body := make([]byte, 1024)
			evs := make([]event.Event, batch)
			dst := make([]event.Event, 0, batch)
			b.SetBytes(int64(1024 * batch))
			b.ReportAllocs()
			syncs := c.walStats().Syncs
			b.ResetTimer()
			for range b.N {
				for i := range evs {
					evs[i] = event.Event{Body: body}
				}
				if err := testutil.PutCommit(c, evs); err != nil {
					b.Fatal(err)
				}
				tx := c.Begin()
				got, err := tx.Take(context.Background(), dst[:0], batch)
				if err != nil || len(got) != batch {
					b.Fatalf("take: %d events, %v", len(got), err)
				}
				if err := tx.Commit(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(c.walStats().Syncs-syncs)/float64(b.N), "syncs/op")
		})
	}
}
