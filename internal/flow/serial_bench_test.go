package flow_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// BenchmarkSerialPutTake is one source's put (ChannelProcessor into a memory
// channel) and one sink's take (BatchSink.Process with a Writer that only
// counts) in turn on one goroutine: the path both tap points sit on,
// without the scheduling noise of BenchmarkPipeline's two goroutines, so a
// few nanoseconds more per batch show. One op is one event.
//
//	go test -run '^$' -bench BenchmarkSerialPutTake -benchmem -count 10 ./internal/flow/
func BenchmarkSerialPutTake(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			reg := metrics.NewRegistry("a1")
			ch := newMem(b, "c1", 10000, batch, "3")
			sel, err := flow.NewSelector(config.FromMap("a1.sources.r1.selector.", nil), map[string]flow.Channel{"c1": ch}, []string{"c1"})
			if err != nil {
				b.Fatal(err)
			}
			proc := flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Metrics: reg, Logger: quietLog})
			w := &atomicCounter{done: make(chan struct{})}
			sink := flow.NewBatchSink(flow.Env{Agent: "a1", Name: "k1", Type: "count", Metrics: reg, Channel: ch}, w, batch, nil)
			src := make([]event.Event, batch)
			for i := range src {
				src[i] = event.Event{Headers: event.HeadersOf(map[string]string{"host": "web-1"}), Body: []byte("0123456789abcdef")}
			}
			in := make([]event.Event, batch)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += batch {
				copy(in, src)
				if err := proc.Process(ctx, in); err != nil {
					b.Fatal(err)
				}
				if _, err := sink.Process(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
