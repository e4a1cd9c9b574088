package avrorpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

// recorder is a Handler that keeps what it receives and replies status.
type recorder struct {
	mu      sync.Mutex
	batches [][]event.Event
	appends []event.Event
	status  Status
}

func (r *recorder) Append(_ context.Context, e event.Event) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.appends = append(r.appends, e)
	return r.status
}

func (r *recorder) AppendBatch(_ context.Context, events []event.Event) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, events)
	return r.status
}

func (r *recorder) events() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, b := range r.batches {
		out = append(out, b...)
	}
	return append(out, r.appends...)
}

// serve runs srv on a loopback listener; each connection's ServeConn result
// goes to the returned channel.
func serve(t testing.TB, srv *Server) (addr string, results <-chan error) {
	t.Helper()
	return testutil.ServeConns(t, srv.ServeConn)
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// framed returns msg as a pack of serial split into frames of at most
// frameSize bytes (Java splits at 8 KiB).
func framed(serial int32, msg []byte, frameSize int) []byte {
	var frames [][]byte
	for len(msg) > frameSize {
		frames = append(frames, msg[:frameSize])
		msg = msg[frameSize:]
	}
	frames = append(frames, msg)
	b := binary.BigEndian.AppendUint32(nil, uint32(serial))
	b = binary.BigEndian.AppendUint32(b, uint32(len(frames)))
	for _, f := range frames {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// readRawPack reads one pack from r and returns its serial and message.
func readRawPack(t *testing.T, r io.Reader) (int32, []byte) {
	t.Helper()
	p, err := readPack(bufio.NewReader(r), Limits{}.withDefaults(), nil)
	if err != nil {
		t.Fatalf("read pack: %v", err)
	}
	return p.serial, p.msg
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func str(s string) []byte { return appendString(nil, s) }
