package avrorpc

import (
	"bufio"
	"bytes"
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
)

// checker is a Handler that re-encodes what it gets and decodes it again,
// so the fuzzer also checks the codec round trip.
type checker struct{ t *testing.T }

func (c checker) Append(_ context.Context, e event.Event) Status {
	c.roundTrip([]event.Event{e})
	return OK
}

func (c checker) AppendBatch(_ context.Context, events []event.Event) Status {
	c.roundTrip(events)
	return Failed
}

func (c checker) roundTrip(evs []event.Event) {
	d := decoder{buf: appendEvents(nil, evs), budget: 1 << 30}
	got, err := d.events(nil, len(evs)+1)
	if err != nil {
		c.t.Fatalf("re-encoded events do not decode: %v", err)
	}
	if len(got) != len(evs) {
		c.t.Fatalf("round trip: %d events, want %d", len(got), len(evs))
	}
	for i := range got {
		if len(evs[i].Headers.Map()) != len(evs[i].Headers) {
			c.t.Fatalf("decoded event %d has a header key more than once: %v", i, evs[i].Headers)
		}
		if !bytes.Equal(got[i].Body, evs[i].Body) || len(got[i].Headers) != len(evs[i].Headers) {
			c.t.Fatalf("round trip of event %d differs", i)
		}
		for k, v := range evs[i].Headers.All() {
			if got[i].Headers.Value(k) != v {
				c.t.Fatalf("round trip of header %q differs", k)
			}
		}
	}
}

// FuzzDecodeRequest feeds a byte stream to the server side: framing, then
// handshake and call decoding, pack after pack, as one connection would.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(framed(1, javaFirstBatch, 8192))
	f.Add(cat(framed(1, javaFirstBatch, 7), framed(2, javaLaterBatch, 3)))
	f.Add(framed(1, cat(handshakeBoth, []byte{0, 0x0c}, []byte("append"), []byte{0x02, 0x02, 'a', 0x00, 0x00, 0x02, 'y'}), 8192))
	f.Add(framed(1, cat(md5Flume, []byte{2}, str(ProtocolJSON), make([]byte, 16), []byte{0}, []byte{0, 0}), 8192))
	f.Add(framed(1, cat(handshakeBoth, []byte{0, 0x16}, []byte("appendBatch"), appendLong(nil, -2), appendLong(nil, 4), []byte{0, 0, 0, 0, 0}), 8192))
	f.Add([]byte{0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxMessageBytes: 1 << 16, MaxBatchEvents: 1000}.withDefaults()
		c := serverConn{s: &Server{Handler: checker{t}}, lim: lim}
		r := bufio.NewReader(bytes.NewReader(data))
		var out []byte
		for {
			p, err := readPack(r, lim, nil)
			if err != nil {
				return
			}
			if len(p.msg) > lim.MaxMessageBytes {
				t.Fatalf("message of %d bytes over the limit", len(p.msg))
			}
			if out, err = c.handle(context.Background(), p.msg, out[:0]); err != nil {
				return
			}
		}
	})
}

// FuzzDecodeReply feeds a reply message to the client side's decoder.
func FuzzDecodeReply(f *testing.F) {
	f.Add(javaFirstReply, false)
	f.Add(javaLaterReply, true)
	f.Add(cat([]byte{0x02, 0x02}, str(ProtocolJSON), []byte{0x02}, md5Flume, []byte{0, 0, 1, 0}, str("boom")), false)
	f.Fuzz(func(t *testing.T, msg []byte, done bool) {
		c := &Client{done: done}
		d := decoder{buf: msg, budget: 1 << 20}
		if !done {
			if again, err := c.handshakeReply(&d); err != nil || again {
				return
			}
		}
		_, _ = replyStatus(&d)
	})
}

func FuzzDecodeFlumeEvent(f *testing.F) {
	f.Add(AppendFlumeEvent(nil, &event.Event{Headers: event.HeadersOf(map[string]string{"k": "v"}), Body: []byte("body")}))
	f.Add(AppendFlumeEvent(nil, &event.Event{}))
	f.Add([]byte{0x02, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeFlumeEvent(b)
		if err != nil {
			return
		}
		if len(e.Headers.Map()) != len(e.Headers) {
			t.Fatalf("decoded headers have a key more than once: %v", e.Headers)
		}
		again := AppendFlumeEvent(nil, &e)
		e2, err := DecodeFlumeEvent(again)
		if err != nil {
			t.Fatalf("re-decoding %x: %v", again, err)
		}
		if string(e2.Body) != string(e.Body) || len(e2.Headers) != len(e.Headers) {
			t.Fatalf("round trip changed the event: %+v vs %+v", e, e2)
		}
		for k, v := range e.Headers.All() {
			if e2.Headers.Value(k) != v {
				t.Fatalf("header %q: %q vs %q", k, e2.Headers.Value(k), v)
			}
		}
	})
}
