package thriftrpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/thriftrpc/flume"
)

// recorder is a Handler that keeps what it receives and replies status.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
	calls  []string
	status Status
}

func (r *recorder) Append(_ context.Context, e event.Event) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.calls = append(r.calls, "append")
	return r.status
}

func (r *recorder) AppendBatch(_ context.Context, events []event.Event) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, events...)
	r.calls = append(r.calls, fmt.Sprintf("appendBatch(%d)", len(events)))
	return r.status
}

func (r *recorder) got() ([]event.Event, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.events...), append([]string(nil), r.calls...)
}

// serve runs srv on a loopback listener; each connection's ServeConn result
// goes to the returned channel.
func serve(t testing.TB, srv *Server) (addr string, results <-chan error) {
	t.Helper()
	return testutil.ServeConns(t, srv.ServeConn)
}

func TestClientServerRoundTrip(t *testing.T) {
	for _, p := range []Protocol{Compact, Binary} {
		t.Run(p.String(), func(t *testing.T) {
			rec := &recorder{status: OK}
			addr, _ := serve(t, &Server{Handler: rec, Protocol: p})
			c, err := Dial(context.Background(), addr, ClientConfig{Protocol: p})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			batch := []event.Event{
				{Headers: event.HeadersOf(map[string]string{"k": "v", "ü": "\x00"}), Body: []byte("one")},
				{Body: nil},
				{Headers: event.HeadersOf(map[string]string{}), Body: []byte{0xff, 0x00, 0xfe}},
			}
			for range 2 {
				if st, err := c.AppendBatch(context.Background(), batch); err != nil || st != OK {
					t.Fatalf("appendBatch: %v %v", st, err)
				}
			}
			if st, err := c.Append(context.Background(), event.Event{Headers: event.HeadersOf(map[string]string{"a": "b"}), Body: []byte("single")}); err != nil || st != OK {
				t.Fatalf("append: %v %v", st, err)
			}
			got, calls := rec.got()
			if fmt.Sprint(calls) != "[appendBatch(3) appendBatch(3) append]" || len(got) != 7 {
				t.Fatalf("calls %v, %d events", calls, len(got))
			}
			for i, want := range append(append(batch, batch...), event.Event{Headers: event.HeadersOf(map[string]string{"a": "b"}), Body: []byte("single")}) {
				if !bytes.Equal(got[i].Body, want.Body) || fmt.Sprint(orEmpty(got[i].Headers)) != fmt.Sprint(orEmpty(want.Headers)) || len(got[i].Headers) != len(want.Headers) || got[i].ReceivedAt == 0 {
					t.Errorf("event %d: %q %v, want %q %v", i, got[i].Body, got[i].Headers, want.Body, want.Headers)
				}
			}
		})
	}
}

func orEmpty(h event.Headers) map[string]string {
	m := h.Map()
	if m == nil {
		return map[string]string{}
	}
	return m
}

func TestStatusReplies(t *testing.T) {
	for _, st := range []Status{OK, Failed, Error, Unknown} {
		rec := &recorder{status: st}
		addr, _ := serve(t, &Server{Handler: rec})
		c, err := Dial(context.Background(), addr, ClientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.AppendBatch(context.Background(), []event.Event{{Body: []byte("x")}}); err != nil || got != st {
			t.Errorf("reply %v %v, want %v", got, err, st)
		}
		c.Close()
	}
}

// rawCall encodes one call message of protocol p.
func rawCall(t testing.TB, p Protocol, name string, args thrift.TStruct) []byte {
	t.Helper()
	buf := thrift.NewTMemoryBuffer()
	pr := p.factory(&thrift.TConfiguration{}).GetProtocol(buf)
	ctx := context.Background()
	if err := pr.WriteMessageBegin(ctx, name, thrift.CALL, 7); err != nil {
		t.Fatal(err)
	}
	if err := args.Write(ctx, pr); err != nil {
		t.Fatal(err)
	}
	if err := pr.WriteMessageEnd(ctx); err != nil {
		t.Fatal(err)
	}
	_ = pr.Flush(ctx)
	return buf.Bytes()
}

func framed(msg []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(len(msg))) // followed by msg
}

func frame(msg []byte) []byte { return append(framed(msg), msg...) }

func batchArgs(n int) *flume.ThriftSourceProtocolAppendBatchArgs {
	a := &flume.ThriftSourceProtocolAppendBatchArgs{}
	for i := range n {
		a.Events = append(a.Events, &flume.ThriftFlumeEvent{Headers: map[string]string{"i": fmt.Sprint(i)}, Body: []byte("b")})
	}
	return a
}

// TestUnknownMethodKeepsConnection: a call of a method the service lacks
// gets Thrift's UNKNOWN_METHOD exception, and the connection goes on.
func TestUnknownMethodKeepsConnection(t *testing.T) {
	rec := &recorder{status: OK}
	addr, results := serve(t, &Server{Handler: rec})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(frame(rawCall(t, Compact, "appendSomething", batchArgs(1)))); err != nil {
		t.Fatal(err)
	}
	reply := readReply(t, c)
	pr := thrift.NewTCompactProtocolConf(&thrift.TMemoryBuffer{Buffer: bytes.NewBuffer(reply)}, nil)
	name, typ, seq, err := pr.ReadMessageBegin(context.Background())
	if err != nil || name != "appendSomething" || typ != thrift.EXCEPTION || seq != 7 {
		t.Fatalf("reply %q %v %d %v, want an exception", name, typ, seq, err)
	}
	if _, err := c.Write(frame(rawCall(t, Compact, "appendBatch", batchArgs(2)))); err != nil {
		t.Fatal(err)
	}
	readReply(t, c)
	if got, _ := rec.got(); len(got) != 2 {
		t.Fatalf("%d events after the unknown method, want 2", len(got))
	}
	c.Close()
	if err := testutil.NextResult(t, results, 5*time.Second); err != nil {
		t.Fatalf("ServeConn: %v", err)
	}
}

func readReply(t testing.TB, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("read reply: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read reply: %v", err)
	}
	return b
}

// TestBadInputClosesConnection: each kind of bad input ends its connection
// with a peer error that says what was wrong, without calling the handler.
func TestBadInputClosesConnection(t *testing.T) {
	good := rawCall(t, Compact, "appendBatch", batchArgs(3))
	binaryCall := rawCall(t, Binary, "appendBatch", batchArgs(3))
	tests := []struct {
		name  string
		srv   Server
		send  []byte
		close bool   // the client closes after sending
		want  string // in the error
	}{
		{"binary into compact", Server{}, frame(binaryCall), false, "set protocol = binary"},
		{"compact into binary", Server{Protocol: Binary}, frame(good), false, "set protocol = compact"},
		{"unframed binary", Server{Protocol: Binary}, binaryCall, false, "not framed"},
		{"unframed compact", Server{}, good, false, "not framed"},
		{"frame over the limit", Server{MaxFrameSize: 1024}, frame(rawCall(t, Compact, "appendBatch", batchArgs(200))), false, "larger than max-frame-size 1024"},
		{"too many events", Server{MaxBatchEvents: 2}, frame(good), false, "exceeds the limit of 2"},
		{"empty frame", Server{}, []byte{0, 0, 0, 0}, false, "empty frame"},
		{"truncated message", Server{}, frame(good[:len(good)-3]), false, "EOF"},
		{"frame cut short", Server{}, framed(good), true, "ended after 0"},
		{"stall in a frame", Server{StallTimeout: 100 * time.Millisecond}, append(framed(good), good[:5]...), false, "timeout"},
		{"garbage", Server{}, frame([]byte("GET / HTTP/1.1\r\n\r\n")), false, "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{status: OK}
			srv := tc.srv
			srv.Handler = rec
			addr, results := serve(t, &srv)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.close {
				c.(*net.TCPConn).CloseWrite()
			}
			err = testutil.NextResult(t, results, 5*time.Second)
			if !IsPeerError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ServeConn: %v, want a peer error with %q", err, tc.want)
			}
			if got, _ := rec.got(); len(got) != 0 {
				t.Fatalf("the handler got %d events", len(got))
			}
		})
	}
}

// TestIdleConnectionStaysOpen: no stall timeout between frames.
func TestIdleConnectionStaysOpen(t *testing.T) {
	rec := &recorder{status: OK}
	addr, results := serve(t, &Server{Handler: rec, StallTimeout: 50 * time.Millisecond})
	c, err := Dial(context.Background(), addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		if st, err := c.AppendBatch(context.Background(), []event.Event{{Body: []byte("x")}}); err != nil || st != OK {
			t.Fatalf("appendBatch: %v %v", st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case err := <-results:
		t.Fatalf("an idle connection ended: %v", err)
	default:
	}
}

// TestStopFinishesTheCallInProgress: ServeConn's ctx ending while a call
// is in the handler lets the call finish and be replied, then returns nil.
func TestStopFinishesTheCallInProgress(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	h := &blockingHandler{entered: entered, release: release}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- (&Server{Handler: h}).ServeConn(ctx, c)
	}()
	cl, err := Dial(context.Background(), ln.Addr().String(), ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	reply := make(chan error, 1)
	go func() {
		st, err := cl.AppendBatch(context.Background(), []event.Event{{Body: []byte("x")}})
		if err == nil && st != OK {
			err = fmt.Errorf("status %v", st)
		}
		reply <- err
	}()
	<-entered
	cancel()
	close(release)
	if err := <-reply; err != nil {
		t.Fatalf("the call in progress at stop: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("ServeConn after stop: %v", err)
	}
}

type blockingHandler struct {
	entered, release chan struct{}
}

func (b *blockingHandler) Append(ctx context.Context, e event.Event) Status {
	return b.AppendBatch(ctx, []event.Event{e})
}

func (b *blockingHandler) AppendBatch(ctx context.Context, _ []event.Event) Status {
	close(b.entered)
	<-b.release
	if ctx.Err() != nil {
		return Error
	}
	return OK
}

func TestClientRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c) // never replies
		}
	}()
	c, err := Dial(context.Background(), ln.Addr().String(), ClientConfig{RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.AppendBatch(context.Background(), []event.Event{{Body: []byte("x")}})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want a deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the call took %v", d)
	}
	if _, err2 := c.AppendBatch(context.Background(), nil); err2 == nil {
		t.Fatal("a broken client made a call")
	}
}

func TestParseProtocol(t *testing.T) {
	for in, want := range map[string]Protocol{"compact": Compact, "": Compact, "BINARY": Binary, " Compact ": Compact} {
		if got, err := ParseProtocol(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseProtocol("json"); err == nil {
		t.Error("json accepted")
	}
}
