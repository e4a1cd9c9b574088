package avrorpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

func testEvents(n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = event.Event{Body: []byte(fmt.Sprintf("event %d %s", i, strings.Repeat("x", i%300)))}
		if i%3 != 0 {
			out[i].Headers = event.HeadersOf(map[string]string{"i": fmt.Sprint(i), "host": "h", "empty": ""})
		}
	}
	out[0].Body = []byte{} // an empty body travels too
	return out
}

func sameEvents(t *testing.T, got, want []event.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Body, want[i].Body) || !(len(got[i].Headers) == 0 && len(want[i].Headers) == 0 || want[i].Headers.Equal(got[i].Headers)) {
			t.Fatalf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestClientServerRoundTrip(t *testing.T) {
	for _, deflate := range []bool{false, true} {
		t.Run(fmt.Sprintf("deflate=%v", deflate), func(t *testing.T) {
			rec := &recorder{status: OK}
			addr, results := serve(t, &Server{Handler: rec, Deflate: deflate})
			cl, err := Dial(context.Background(), addr, ClientConfig{Deflate: deflate, DeflateLevel: 1})
			if err != nil {
				t.Fatal(err)
			}
			var want []event.Event
			for i := range 20 {
				evs := testEvents(1 + i*7)
				st, err := cl.AppendBatch(context.Background(), evs)
				if err != nil || st != OK {
					t.Fatalf("batch %d: %v %v", i, st, err)
				}
				want = append(want, evs...)
			}
			one := event.Event{Headers: event.HeadersOf(map[string]string{"a": "b"}), Body: bytes.Repeat([]byte("big"), 100000)}
			if st, err := cl.Append(context.Background(), one); err != nil || st != OK {
				t.Fatalf("append: %v %v", st, err)
			}
			want = append(want, one)
			cl.Close()
			if err := testutil.NextResult(t, results, 10*time.Second); err != nil {
				t.Fatalf("ServeConn: %v", err)
			}
			sameEvents(t, rec.events(), want)
		})
	}
}

func TestClientRequestTimeout(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	h := blockingHandler{block}
	addr, _ := serve(t, &Server{Handler: h})
	cl, err := Dial(context.Background(), addr, ClientConfig{ConnectTimeout: 200 * time.Millisecond, RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now()
	_, err = cl.AppendBatch(context.Background(), testEvents(1))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("call against a stalled server: %v after %v", err, time.Since(start))
	}
	if _, err2 := cl.AppendBatch(context.Background(), testEvents(1)); err2 == nil {
		t.Fatal("a client that failed must stay broken")
	}
}

type blockingHandler struct{ block chan struct{} }

func (b blockingHandler) Append(context.Context, event.Event) Status { <-b.block; return OK }
func (b blockingHandler) AppendBatch(context.Context, []event.Event) Status {
	<-b.block
	return OK
}

var handshakeBoth = cat(md5Flume, []byte{0}, md5Flume, []byte{2, 0})

// TestServerBadInput: each kind of bad input closes that connection with a
// reason; the server keeps serving a good connection meanwhile.
func TestServerBadInput(t *testing.T) {
	hdr := func(serial, count int32) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(serial))
		return binary.BigEndian.AppendUint32(b, uint32(count))
	}
	u32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	batchCall := cat([]byte{0, 0x16}, []byte("appendBatch"))
	var unknown MD5
	copy(unknown[:], bytes.Repeat([]byte{0x11}, 16))
	unknownHS := cat(unknown[:], []byte{0}, md5Flume, []byte{2, 0}, batchCall, []byte{0})

	tests := []struct {
		name  string
		send  []byte
		close bool   // close the write side after sending
		want  string // in the error ServeConn returns
	}{
		{"truncated frame", cat(hdr(1, 1), u32(100), []byte("short")), true, "unexpected EOF"},
		{"truncated header", []byte{0, 0, 0, 1, 0}, true, "unexpected EOF"},
		{"absurd frame count", hdr(1, 0x7fffffff), false, "frame count"},
		{"negative frame count", hdr(1, -1), false, "frame count"},
		{"absurd frame length", cat(hdr(1, 1), u32(0x7fffffff)), false, "larger than"},
		{"frames adding up past the limit", cat(hdr(1, 2), u32(600<<10), make([]byte, 600<<10), u32(600<<10)), false, "larger than"},
		{"absurd array count", framed(1, cat(handshakeBoth, batchCall, appendLong(nil, 1<<60)), 8192), false, "block of"},
		{"absurd string length", framed(1, cat(handshakeBoth, batchCall, []byte{2, 2}, appendLong(nil, 1<<40)), 8192), false, "length"},
		{"absurd map count", framed(1, cat(handshakeBoth, batchCall, []byte{2}, appendLong(nil, -(1<<50)), appendLong(nil, 10)), 8192), false, "block"},
		{"absurd bytes length", framed(1, cat(handshakeBoth, batchCall, []byte{2, 0}, appendLong(nil, 1<<33)), 8192), false, "length"},
		{"too many events", framed(1, cat(handshakeBoth, batchCall, appendLong(nil, 200), bytes.Repeat([]byte{0, 0}, 200), []byte{0}), 8192), false, "batch of more than"},
		{"wrong protocol hash", cat(framed(1, unknownHS, 8192), framed(2, unknownHS, 8192), framed(3, unknownHS, 8192)), false, "unknown protocol hash"},
		{"incompatible protocol", framed(1, cat(unknown[:], []byte{2}, str(`{"protocol":"X","messages":{"appendBatch":{"request":[{"name":"s","type":"string"}],"response":"string"}}}`), md5Flume, []byte{2, 0}, batchCall, []byte{0}), 8192), false, "takes"},
		{"garbage after the handshake", framed(1, cat(handshakeBoth, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), 8192), false, "varint"},
		{"garbage instead of a handshake", framed(1, []byte("GET / HTTP/1.1\r\n"), 8192), false, "handshake"},
		{"unknown message", framed(1, cat(handshakeBoth, []byte{0}, str("drop"), []byte{0}), 8192), false, "no message named"},
		{"trailing bytes", framed(1, cat(handshakeBoth, batchCall, []byte{0, 0}), 8192), false, "after the events"},
		{"stall mid-frame", cat(hdr(1, 1), u32(100), []byte("part")), false, "timeout"},
	}
	rec := &recorder{status: OK}
	srv := &Server{Handler: rec, StallTimeout: 200 * time.Millisecond, Limits: Limits{MaxMessageBytes: 1 << 20, MaxBatchEvents: 100}}
	addr, results := serve(t, srv)

	good, err := Dial(context.Background(), addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			if _, err := c.Write(tt.send); err != nil {
				t.Fatal(err)
			}
			if tt.close {
				_ = c.(interface{ CloseWrite() error }).CloseWrite()
			}
			err := testutil.NextResult(t, results, 10*time.Second)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ServeConn = %v, want an error containing %q", err, tt.want)
			}
			// The other connection is unaffected.
			if st, err := good.AppendBatch(context.Background(), testEvents(2)); err != nil || st != OK {
				t.Fatalf("good connection after %s: %v %v", tt.name, st, err)
			}
		})
	}
}

// TestReadPackAllocatesWhatArrives: a frame that announces 60 MB and
// delivers 1 KB costs about a chunk, not 60 MB.
func TestReadPackAllocatesWhatArrives(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, 1)
	in = binary.BigEndian.AppendUint32(in, 1)
	in = binary.BigEndian.AppendUint32(in, 60<<20)
	in = append(in, make([]byte, 1024)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readPack(bufio.NewReader(bytes.NewReader(in)), Limits{}.withDefaults(), nil)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("truncated pack decoded")
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("reading a truncated 60 MB frame allocated %d bytes", d)
	}
}

// TestDecodeBudget: a message of many tiny events cannot make decoding
// allocate far more than the message.
func TestDecodeBudget(t *testing.T) {
	n := 50000
	msg := cat(appendLong(nil, int64(n)), bytes.Repeat([]byte{0, 0}, n), []byte{0})
	d := decoder{buf: msg, budget: 1 << 20}
	_, err := d.events(nil, 1<<30)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("events over budget: %v", err)
	}
	d = decoder{buf: msg, budget: 64 << 20}
	evs, err := d.events(nil, 1<<30)
	if err != nil || len(evs) != n {
		t.Fatalf("events within budget: %d, %v", len(evs), err)
	}
}

const flumeEventSchema = `{"type":"array","items":{"type":"record","name":"AvroFlumeEvent","namespace":"org.apache.flume.source.avro",
 "fields":[{"name":"headers","type":{"type":"map","values":"string"}},{"name":"body","type":"bytes"}]}}`

type avroEvent struct {
	Headers map[string]string `avro:"headers"`
	Body    []byte            `avro:"body"`
}

// TestCodecAgainstHamba checks the hand-written event codec against
// hamba/avro's schema codec both ways (hamba writes blocks with negative
// counts and byte sizes, which the decoder must accept).
func TestCodecAgainstHamba(t *testing.T) {
	schema := avro.MustParse(flumeEventSchema)
	evs := testEvents(50)

	var theirs []avroEvent
	if err := avro.Unmarshal(schema, appendEvents(nil, evs), &theirs); err != nil {
		t.Fatalf("hamba cannot decode our encoding: %v", err)
	}
	back := make([]event.Event, len(theirs))
	for i, e := range theirs {
		back[i] = event.Event{Headers: event.HeadersOf(e.Headers), Body: e.Body}
	}
	sameEvents(t, back, evs)

	mine := make([]avroEvent, len(evs))
	for i, e := range evs {
		mine[i] = avroEvent{Headers: e.Headers.Map(), Body: e.Body}
		if mine[i].Headers == nil {
			mine[i].Headers = map[string]string{}
		}
	}
	b, err := avro.Marshal(schema, mine)
	if err != nil {
		t.Fatal(err)
	}
	d := decoder{buf: b, budget: 1 << 30}
	got, err := d.events(nil, 1000)
	if err != nil {
		t.Fatalf("decode hamba's encoding: %v", err)
	}
	if d.remaining() != 0 {
		t.Fatalf("%d bytes left", d.remaining())
	}
	sameEvents(t, got, evs)
}

// TestDecodeRepeatedHeaderKey: an Avro map on the wire may repeat a key
// (in one block or across blocks); the event has the key once, with the
// last value, as Java's HashMap and a Go map keep it.
func TestDecodeRepeatedHeaderKey(t *testing.T) {
	pair := func(b []byte, k, v string) []byte { return appendString(appendString(b, k), v) }
	oneBlock := pair(pair(pair(appendLong(nil, 3), "k", "1"), "j", "x"), "k", "2")
	twoBlocks := pair(pair(appendLong(nil, 2), "k", "1"), "j", "x")
	twoBlocks = pair(appendLong(twoBlocks, 1), "k", "2")
	many := pair(appendLong(nil, 42), "k", "1")
	for i := range 40 {
		many = pair(many, fmt.Sprintf("h%02d", i), "v")
	}
	many = pair(many, "k", "2")
	for _, c := range []struct {
		name    string
		headers []byte
		n       int // distinct keys
	}{{"one block", oneBlock, 2}, {"two blocks", twoBlocks, 2}, {"42 headers", many, 41}} {
		e, err := DecodeFlumeEvent(appendBytes(append(c.headers, 0), []byte("body")))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(e.Body) != "body" || e.Headers.Value("k") != "2" || len(e.Headers) != c.n || len(e.Headers.Map()) != c.n {
			t.Errorf("%s: %q %v, want %d headers, each once, k 2", c.name, e.Body, e.Headers, c.n)
		}
	}
}
