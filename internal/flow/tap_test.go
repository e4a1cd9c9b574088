package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// tapProcessor returns a processor of source r1 into a fresh memory
// channel c1, with tap as its output's tap point.
func tapProcessor(t *testing.T, tap *flow.Tap) (*flow.ChannelProcessor, flow.Channel) {
	t.Helper()
	ch := newMem(t, "c1", 10000, 1000, "0.1")
	sel, err := flow.NewSelector(config.FromMap("a1.sources.r1.selector.", nil), map[string]flow.Channel{"c1": ch}, []string{"c1"})
	if err != nil {
		t.Fatal(err)
	}
	return flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Logger: quietLog, Tap: tap}), ch
}

// bodyEvents returns one event per body.
func bodyEvents(bodies ...string) []event.Event {
	out := make([]event.Event, len(bodies))
	for i, b := range bodies {
		out[i] = event.Event{Body: []byte(b)}
	}
	return out
}

func recv(t *testing.T, r *flow.TapReader) event.Event {
	t.Helper()
	select {
	case e := <-r.Events():
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event reached the tap")
		return event.Event{}
	}
}

func TestTapShowsSourceOutputAsCopies(t *testing.T) {
	taps := flow.NewTaps()
	tap := taps.Point("source", "r1")
	if taps.Point("source", "r1") != tap || taps.Point("channel", "r1") == tap {
		t.Fatal("Point must return one tap per kind and name")
	}
	proc, _ := tapProcessor(t, tap)
	r := tap.Watch(1000, 100)
	defer r.Close()
	evs := bodyEvents("a", "b", "c")
	evs[1].Headers = event.HeadersOf(map[string]string{"host": "web-1"})
	if err := proc.Process(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		got = append(got, string(recv(t, r).Body))
	}
	if got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("tap got %q, want a b c", got)
	}
	// The copies are the tap's own: the pipeline reusing its buffers does
	// not change what the tap shows.
	evs2 := bodyEvents("x")
	evs2[0].Headers = event.HeadersOf(map[string]string{"k": "v"})
	if err := proc.Process(context.Background(), evs2); err != nil {
		t.Fatal(err)
	}
	evs2[0].Body[0] = 'y'
	evs2[0].Headers.Set("k", "changed")
	e := recv(t, r)
	if string(e.Body) != "x" || e.Headers.Value("k") != "v" {
		t.Fatalf("tap copy changed with the original: body %q headers %v", e.Body, e.Headers)
	}
}

func TestTapShowsChannelTake(t *testing.T) {
	taps := flow.NewTaps()
	proc, ch := tapProcessor(t, nil)
	if err := proc.Process(context.Background(), bodyEvents("one", "two")); err != nil {
		t.Fatal(err)
	}
	w := &atomicCounter{target: 2, done: make(chan struct{})}
	sink := flow.NewBatchSink(flow.Env{Agent: "a1", Name: "k1", Type: "count", Channel: ch,
		ChannelTap: taps.Point("channel", "c1")}, w, 100, nil)
	r := taps.Point("channel", "c1").Watch(1000, 10)
	defer r.Close()
	if _, err := sink.Process(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a, b := recv(t, r), recv(t, r); string(a.Body) != "one" || string(b.Body) != "two" {
		t.Fatalf("tap got %q %q, want one two", a.Body, b.Body)
	}
}

// A reader that never reads must not slow the pipeline: samples beyond
// its buffer are dropped and counted.
func TestTapSlowReaderNeverBlocks(t *testing.T) {
	tap := &flow.Tap{}
	proc, ch := tapProcessor(t, tap)
	r := tap.Watch(1e9, 4)
	defer r.Close()
	start := time.Now()
	const batches = 50
	for range batches {
		if err := proc.Process(context.Background(), bodyEvents("0123456789", "a", "b", "c", "d", "e", "f", "g", "h", "i")); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("500 events took %s with a stuck tap reader", d)
	}
	if n := ch.Len(); n != batches*10 {
		t.Fatalf("channel holds %d events, want %d", n, batches*10)
	}
	if got := len(r.Events()); got != 4 {
		t.Fatalf("reader buffered %d samples, want its buffer of 4", got)
	}
	// The first offer is limited by the bucket's initial tokens (the buffer
	// size, 4), so every later batch's samples go to the full buffer.
	if d := r.Dropped(); d < batches*10-50 {
		t.Fatalf("dropped %d samples, want most of the %d offered", d, batches*10)
	}
	if r.Dropped() != 0 {
		t.Fatal("Dropped must reset the count")
	}
}

func TestTapRateBoundsSamples(t *testing.T) {
	tap := &flow.Tap{}
	proc, _ := tapProcessor(t, tap)
	r := tap.Watch(20, 1000)
	defer r.Close()
	deadline := time.Now().Add(500 * time.Millisecond)
	offered := 0
	for time.Now().Before(deadline) {
		if err := proc.Process(context.Background(), bodyEvents("a", "b", "c", "d", "e", "f", "g", "h")); err != nil {
			t.Fatal(err)
		}
		offered += 8
		time.Sleep(time.Millisecond)
	}
	// 20/s for 0.5 s plus the first second's tokens (20): at most 30, and
	// the reader did get some.
	got := len(r.Events())
	if got == 0 || got > 31 {
		t.Fatalf("tap sampled %d of %d events at 20/s over 0.5 s; want 1..31", got, offered)
	}
	if r.Dropped() != 0 {
		t.Fatal("nothing should drop while the buffer has room")
	}
}

func TestTapCloseStopsWatching(t *testing.T) {
	tap := &flow.Tap{}
	if tap.Watching() {
		t.Fatal("a new tap is not watched")
	}
	r1, r2 := tap.Watch(100, 10), tap.Watch(100, 10)
	r1.Close()
	if !tap.Watching() {
		t.Fatal("r2 still watches")
	}
	r2.Close()
	r2.Close() // twice is fine
	if tap.Watching() {
		t.Fatal("no reader left, yet the tap is watched")
	}
	tap.Offer(bodyEvents("a"))
	if len(r1.Events())+len(r2.Events()) != 0 {
		t.Fatal("closed readers got events")
	}
	var nilTap *flow.Tap
	nilTap.Offer(bodyEvents("a")) // a nil tap is valid
	if nilTap.Watching() || (*flow.Taps)(nil).Point("source", "r1") != nil {
		t.Fatal("nil taps are never watched")
	}
}

// With nobody watching, Offer allocates nothing (and is one atomic load).
func TestTapUnwatchedAllocatesNothing(t *testing.T) {
	tap := &flow.Tap{}
	evs := bodyEvents("a", "b")
	if n := testing.AllocsPerRun(1000, func() { tap.Offer(evs) }); n != 0 {
		t.Fatalf("unwatched Offer allocates %v times", n)
	}
}

// BenchmarkTapOffer is the cost Offer adds to every batch: nobody watching
// (the hot path's one atomic load), and one reader sampling 10 events a second.
func BenchmarkTapOffer(b *testing.B) {
	evs := bodyEvents("0123456789abcdef", "0123456789abcdef", "0123456789abcdef", "0123456789abcdef")
	b.Run("unwatched", func(b *testing.B) {
		tap := &flow.Tap{}
		b.ReportAllocs()
		for b.Loop() {
			tap.Offer(evs)
		}
	})
	b.Run("watched", func(b *testing.B) {
		tap := &flow.Tap{}
		r := tap.Watch(10, 100)
		defer r.Close()
		go func() {
			for range r.Events() {
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			tap.Offer(evs)
		}
	})
}

// BenchmarkPipelineTapped is BenchmarkPipeline's batch=1000 case with a tap
// reader on the source's output and the channel's take, sampling 10 events
// a second each: the cost of `sluice tap` on the hot path.
func BenchmarkPipelineTapped(b *testing.B) {
	const batch = 1000
	taps := flow.NewTaps()
	reg := metrics.NewRegistry("a1")
	ch := newMem(b, "c1", 100000, batch, "3")
	sel, err := flow.NewSelector(config.FromMap("a1.sources.r1.selector.", nil), map[string]flow.Channel{"c1": ch}, []string{"c1"})
	if err != nil {
		b.Fatal(err)
	}
	proc := flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Metrics: reg, Logger: quietLog,
		Tap: taps.Point("source", "r1")})
	for _, p := range []*flow.Tap{taps.Point("source", "r1"), taps.Point("channel", "c1")} {
		r := p.Watch(10, 100)
		defer r.Close()
		go func() {
			for range r.Events() {
			}
		}()
	}
	w := &atomicCounter{target: int64(b.N), done: make(chan struct{})}
	sink := flow.NewBatchSink(flow.Env{Agent: "a1", Name: "k1", Type: "count", Metrics: reg, Channel: ch,
		ChannelTap: taps.Point("channel", "c1")}, w, batch, nil)
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
			continue
		}
		sent += n
	}
	<-w.done
	elapsed := time.Since(start)
	b.StopTimer()
	_ = runner.Stop(context.Background())
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
