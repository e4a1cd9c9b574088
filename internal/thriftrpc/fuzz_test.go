package thriftrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/thriftrpc/flume"
)

// countingHandler checks what reaches the handler stays within the limits.
type countingHandler struct {
	t     *testing.T
	limit int
	calls int
}

func (h *countingHandler) Append(ctx context.Context, e event.Event) Status {
	return h.AppendBatch(ctx, []event.Event{e})
}

func (h *countingHandler) AppendBatch(_ context.Context, events []event.Event) Status {
	h.calls++
	if len(events) > h.limit {
		h.t.Fatalf("a batch of %d events passed the limit %d", len(events), h.limit)
	}
	for _, e := range events {
		if len(e.Headers) > h.limit {
			h.t.Fatalf("an event with %d headers passed the limit %d", len(e.Headers), h.limit)
		}
	}
	return OK
}

// FuzzServeStream feeds arbitrary bytes to the source's request handling
// (frames, then calls, in either protocol): it must never panic, must stop
// at the first malformed request, keep within its limits, and answer every
// frame it accepted with a well-formed reply.
func FuzzServeStream(f *testing.F) {
	ctx := context.Background()
	for _, p := range []Protocol{Compact, Binary} {
		enc := func(name string, args thrift.TStruct) []byte {
			buf := thrift.NewTMemoryBuffer()
			pr := p.factory(&thrift.TConfiguration{}).GetProtocol(buf)
			_ = pr.WriteMessageBegin(ctx, name, thrift.CALL, 1)
			_ = args.Write(ctx, pr)
			_ = pr.WriteMessageEnd(ctx)
			return buf.Bytes()
		}
		batch := enc("appendBatch", batchArgs(3))
		one := enc("append", &flume.ThriftSourceProtocolAppendArgs{Event: &flume.ThriftFlumeEvent{Headers: map[string]string{"k": "v"}, Body: []byte("b")}})
		f.Add(byte(p), append(frame(batch), frame(one)...))
		f.Add(byte(p), frame(enc("nosuch", batchArgs(1))))
		f.Add(byte(p), frame(batch[:len(batch)/2]))
		f.Add(byte(p), frame(enc("append", &flume.ThriftSourceProtocolAppendArgs{})))
		f.Add(byte(p), batch)
	}
	f.Add(byte(0), []byte{0x7f, 0xff, 0xff, 0xff})
	f.Add(byte(0), []byte{0, 0, 0, 3, 0x19, 0xfc, 0xff})
	f.Fuzz(func(t *testing.T, proto byte, data []byte) {
		const limit = 64
		h := &countingHandler{t: t, limit: limit}
		srv := &Server{Handler: h, Protocol: Protocol(proto % 2), MaxFrameSize: 1 << 16, MaxBatchEvents: limit}
		c := &serverConn{s: srv, cfg: srv.config(), proc: flume.NewThriftSourceProtocolProcessor(callHandler{h})}
		r := bufio.NewReader(bytes.NewReader(data))
		for frames := 0; ; frames++ {
			fr, err := readFrame(r, int(c.cfg.GetMaxFrameSize()), &c.frameBuf, nil)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				if !IsPeerError(err) {
					t.Fatalf("frame %d: %v is not a peer error", frames, err)
				}
				return
			}
			reply, err := c.handleFrame(ctx, fr)
			if len(reply) > 0 {
				checkReply(t, srv.Protocol, reply)
			}
			if err != nil && !errors.Is(err, ErrUnknownMethod) {
				if !IsPeerError(err) {
					t.Fatalf("frame %d: %v is not a peer error", frames, err)
				}
				return
			}
			if err == nil && len(reply) == 0 {
				t.Fatalf("frame %d was accepted without a reply", frames)
			}
		}
	})
}

// checkReply decodes a reply frame: a REPLY with a Status or an EXCEPTION.
func checkReply(t *testing.T, p Protocol, reply []byte) {
	t.Helper()
	ctx := context.Background()
	pr := p.factory(&thrift.TConfiguration{}).GetProtocol(&thrift.TMemoryBuffer{Buffer: bytes.NewBuffer(reply[4:])})
	_, typ, _, err := pr.ReadMessageBegin(ctx)
	if err != nil {
		t.Fatalf("reply %x: %v", reply, err)
	}
	switch typ {
	case thrift.REPLY:
		var r flume.ThriftSourceProtocolAppendBatchResult
		if err := r.Read(ctx, pr); err != nil || !r.IsSetSuccess() {
			t.Fatalf("reply %x: %v", reply, err)
		}
	case thrift.EXCEPTION:
		ae := thrift.NewTApplicationException(0, "")
		if err := ae.Read(ctx, pr); err != nil {
			t.Fatalf("exception reply %x: %v", reply, err)
		}
	default:
		t.Fatalf("reply of type %v", typ)
	}
}
