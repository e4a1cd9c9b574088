package flow_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// atomicCounter is a Writer that counts events and signals when it has seen
// target of them.
type atomicCounter struct {
	n      atomic.Int64
	target int64
	done   chan struct{}
}

func (c *atomicCounter) Write(_ context.Context, evs []event.Event) error {
	if c.n.Add(int64(len(evs))) >= c.target && c.target > 0 {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
	return nil
}

// BenchmarkPipeline moves events producer → ChannelProcessor → memory
// channel → BatchSink (driven by a SinkRunner) → counting Writer, with
// 16-byte bodies, one header, latency histograms on. One op is one event.
//
//	go test -run '^$' -bench BenchmarkPipeline -benchmem ./internal/flow/
func BenchmarkPipeline(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			reg := metrics.NewRegistry("a1")
			ch := newMem(b, "c1", 100000, batch, "3")
			p := config.FromMap("a1.sources.r1.selector.", nil)
			sel, err := flow.NewSelector(p, map[string]flow.Channel{"c1": ch}, []string{"c1"})
			if err != nil {
				b.Fatal(err)
			}
			proc := flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Metrics: reg, Logger: quietLog})
			w := &atomicCounter{target: int64(b.N), done: make(chan struct{})}
			sink := flow.NewBatchSink(flow.Env{Agent: "a1", Name: "k1", Type: "count", Metrics: reg, Channel: ch}, w, batch, nil)
			runner := flow.NewSinkRunner("k1", sink, quietLog)

			src := make([]event.Event, batch)
			for i := range src {
				src[i] = event.Event{Headers: event.HeadersOf(map[string]string{"host": "web-1"}), Body: []byte("0123456789abcdef")}
			}
			in := make([]event.Event, batch)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			runner.Start()
			for sent := 0; sent < b.N; {
				n := min(batch, b.N-sent)
				now := event.Now()
				copy(in, src[:n])
				for i := range in[:n] {
					in[i].ReceivedAt = now
				}
				if err := proc.Process(context.Background(), in[:n]); err != nil {
					continue // channel full: retry, as a source would
				}
				sent += n
			}
			<-w.done
			elapsed := time.Since(start)
			b.StopTimer()
			_ = runner.Stop(context.Background())
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
		})
	}
}
