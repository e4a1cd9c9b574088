package avrosource

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestReceivedAtHeader checks that with receivedAtHeader an event's receive
// time comes from the header when it holds a positive number, and is the
// time of receipt otherwise; without the property the header is ignored.
func TestReceivedAtHeader(t *testing.T) {
	const h = "sluice.receivedAt"
	for _, tc := range []struct {
		name, prop, value string
		want              int64 // 0: the time of receipt
	}{
		{"from header", h, "1700000000123456789", 1700000000123456789},
		{"not a number", h, "soon", 0},
		{"negative", h, "-5", 0},
		{"property unset", "", "1700000000123456789", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 10, 10, 50*time.Millisecond)
			m := map[string]string{"bind": "127.0.0.1", "port": "0"}
			if tc.prop != "" {
				m["receivedAtHeader"] = tc.prop
			}
			p := config.FromMap("a1.sources.r1.", m)
			s, err := New(sourcetest.Env("r1", "avro"), p)
			p.Unused()
			if err != nil || p.Err() != nil {
				t.Fatal(err, p.Err())
			}
			if err := s.Start(context.Background(), pl.Processor); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
			c, err := avrorpc.Dial(context.Background(), s.(*Source).Addr().String(), avrorpc.ClientConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := time.Now().UnixNano()
			st, err := c.AppendBatch(context.Background(), []event.Event{{Headers: event.HeadersOf(map[string]string{h: tc.value}), Body: []byte("x")}})
			if err != nil || st != avrorpc.OK {
				t.Fatalf("appendBatch: %v %v", st, err)
			}
			got := pl.Drain(t, 1, 5*time.Second)
			if len(got) != 1 {
				t.Fatalf("got %d events", len(got))
			}
			if tc.want != 0 && got[0].ReceivedAt != tc.want {
				t.Errorf("ReceivedAt %d, want %d from the header", got[0].ReceivedAt, tc.want)
			}
			if tc.want == 0 && got[0].ReceivedAt < before {
				t.Errorf("ReceivedAt %d, want the time of receipt (>= %d)", got[0].ReceivedAt, before)
			}
			if got[0].Header(h) != tc.value {
				t.Errorf("the header became %q; it should stay for a further tier", got[0].Header(h))
			}
		})
	}
}
