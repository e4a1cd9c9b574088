package avrosink

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/avro"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestReceivedAtSpansTiers sends events over a real hop (this sink to an
// avro source) with receivedAtHeader on both ends, and checks that the next
// tier's events carry the first tier's receive time, that an event without
// one gets the next tier's, and that the sink left the taken events' header
// maps alone.
func TestReceivedAtSpansTiers(t *testing.T) {
	const h = "sluice.receivedAt"
	dst := sourcetest.NewPipeline(t, 100, 100, 50*time.Millisecond)
	sp := config.FromMap("a2.sources.r1.", map[string]string{"bind": "127.0.0.1", "port": "0", "receivedAtHeader": h})
	src, err := avrosource.New(sourcetest.Env("r1", "avro"), sp)
	sp.Unused()
	if err != nil || sp.Err() != nil {
		t.Fatal(err, sp.Err())
	}
	if err := src.Start(context.Background(), dst.Processor); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Stop(context.Background()) })
	_, port, _ := net.SplitHostPort(src.(*avrosource.Source).Addr().String())

	kp := config.FromMap("a1.sinks.k1.", map[string]string{"hostname": "127.0.0.1", "port": port, "receivedAtHeader": h})
	env := sourcetest.Env("k1", "avro")
	upstream := sourcetest.NewPipeline(t, 100, 100, 50*time.Millisecond)
	env.Channel = upstream.Channel
	k, err := New(env, kp)
	kp.Unused()
	if err != nil || kp.Err() != nil {
		t.Fatal(err, kp.Err())
	}
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })

	first := time.Now().Add(-5 * time.Second).UnixNano() // received upstream 5 s ago
	// Spare capacity, so a sink that appended to the taken events' headers
	// in place would write where both events can see it.
	shared := append(make(event.Headers, 0, 4), event.Header{Key: "app", Value: "x"})
	events := []event.Event{
		{Headers: shared, Body: []byte("a"), ReceivedAt: first},
		{Headers: shared, Body: []byte("b")}, // receive time unknown upstream
		{Body: []byte("c"), ReceivedAt: first + 1},
	}
	if err := upstream.Processor.Process(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixNano()
	if st, err := k.Process(context.Background()); err != nil || st != flow.Ready {
		t.Fatalf("process: %v %v", st, err)
	}
	got := dst.Drain(t, 3, 5*time.Second)
	if len(got) != 3 {
		t.Fatalf("got %d events, want 3", len(got))
	}
	byBody := map[string]event.Event{}
	for _, e := range got {
		byBody[string(e.Body)] = e
	}
	if e := byBody["a"]; e.ReceivedAt != first || e.Header(h) != strconv.FormatInt(first, 10) || e.Header("app") != "x" {
		t.Errorf("a: ReceivedAt %d header %q app %q, want %d", e.ReceivedAt, e.Header(h), e.Header("app"), first)
	}
	if e := byBody["b"]; e.ReceivedAt < before || e.Header(h) != "" {
		t.Errorf("b (no upstream time): ReceivedAt %d (want the next tier's, >= %d), header %q", e.ReceivedAt, before, e.Header(h))
	}
	if e := byBody["c"]; e.ReceivedAt != first+1 {
		t.Errorf("c: ReceivedAt %d, want %d", e.ReceivedAt, first+1)
	}
	if shared[:cap(shared)].Has(h) || len(shared) != 1 || shared.Value("app") != "x" {
		t.Errorf("the sink changed a taken event's header map: %v", shared)
	}
}

// TestReceivedAtStampedDoesNotAllocate checks that stamping reuses its maps.
func TestReceivedAtStampedDoesNotAllocate(t *testing.T) {
	var s stamped
	events := []event.Event{{ReceivedAt: 1}, {ReceivedAt: 0}, {ReceivedAt: 3, Headers: event.HeadersOf(map[string]string{"k": "v"})}}
	s.with(events, "h")
	allocs := testing.AllocsPerRun(100, func() { s.with(events, "h") })
	// strconv.FormatInt of a small number does not allocate; real times
	// need one string each.
	if allocs > 0 {
		t.Errorf("%.0f allocations per batch after the first", allocs)
	}
	out := s.with(events, "h")
	if out[0].Header("h") != "1" || out[1].Headers != nil || out[2].Header("h") != "3" || out[2].Header("k") != "v" {
		t.Errorf("stamped %+v", out)
	}
}
