package avrorpc

import (
	"bytes"
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
)

func benchBatch(n, body int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{
			Headers: event.HeadersOf(map[string]string{"host": "web-01", "timestamp": "1700000000000", "topic": "logs"}),
			Body:    bytes.Repeat([]byte{'x'}, body),
		}
	}
	return evs
}

type nopHandler struct{}

func (nopHandler) Append(context.Context, event.Event) Status        { return OK }
func (nopHandler) AppendBatch(context.Context, []event.Event) Status { return OK }

// BenchmarkDecodeBatch: the server side's decoding of one appendBatch of
// 100 events with 3 headers and 256-byte bodies.
func BenchmarkDecodeBatch(b *testing.B) {
	msg := cat([]byte{0}, str(msgAppendBatch), appendEvents(nil, benchBatch(100, 256)))
	c := serverConn{s: &Server{Handler: nopHandler{}}, lim: Limits{}.withDefaults(), done: true}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	var out []byte
	for b.Loop() {
		var err error
		if out, err = c.handle(context.Background(), msg, out[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendBatch: client to server over loopback, one call at a time.
func BenchmarkAppendBatch(b *testing.B) {
	for _, deflate := range []bool{false, true} {
		name := "plain"
		if deflate {
			name = "deflate"
		}
		b.Run(name, func(b *testing.B) {
			addr, _ := serve(b, &Server{Handler: nopHandler{}, Deflate: deflate})
			cl, err := Dial(context.Background(), addr, ClientConfig{Deflate: deflate, DeflateLevel: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			evs := benchBatch(100, 256)
			b.ReportAllocs()
			for b.Loop() {
				if st, err := cl.AppendBatch(context.Background(), evs); err != nil || st != OK {
					b.Fatal(st, err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
