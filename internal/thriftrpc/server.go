package thriftrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/thriftrpc/flume"
)

// Handler takes the events of each call a connection receives and returns
// the Status to reply. It is called from the connection's goroutine, one
// call at a time per connection, so calls on one connection are handled in
// order. The events belong to the handler.
type Handler interface {
	Append(ctx context.Context, e event.Event) Status
	AppendBatch(ctx context.Context, events []event.Event) Status
}

// Server speaks the server side of Flume's Thrift RPC on connections a
// caller accepted: framed transport, the configured protocol. One Server
// serves many connections at once.
type Server struct {
	Handler  Handler
	Protocol Protocol
	// MaxFrameSize bounds one request frame. Default DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxBatchEvents bounds the events of one appendBatch and the headers
	// of one event. Default DefaultMaxBatchEvents.
	MaxBatchEvents int
	// StallTimeout bounds how long a frame that has started may go without
	// a byte arriving. Between frames a connection may idle for ever, as
	// Flume's clients keep connections open. Default 30 s.
	StallTimeout time.Duration
	// WriteTimeout bounds writing a reply. Default 30 s.
	WriteTimeout time.Duration
}

// Default timeouts of a Server.
const (
	DefaultStallTimeout = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
)

// ErrMalformed is wrapped by errors about what a peer sent: bytes that are
// not a framed Thrift call of this protocol, or one that breaks a limit.
var ErrMalformed = errors.New("malformed thrift request")

// IsPeerError reports whether err, returned by ServeConn, was caused by
// what the peer sent (as opposed to the network or a stop).
func IsPeerError(err error) bool { return errors.Is(err, ErrMalformed) }

// ErrUnknownMethod is returned by a frame handled with a reply that names a
// method ThriftSourceProtocol does not have; the connection stays usable.
var ErrUnknownMethod = errors.New("unknown method")

func (s *Server) config() *thrift.TConfiguration {
	maxFrame := s.MaxFrameSize
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	maxEvents := s.MaxBatchEvents
	if maxEvents <= 0 {
		maxEvents = DefaultMaxBatchEvents
	}
	return &thrift.TConfiguration{
		MaxFrameSize:     int32(maxFrame),
		MaxMessageSize:   int32(maxFrame),
		MaxContainerSize: int32(maxEvents),
	}
}

// ServeConn speaks the protocol on conn until the peer closes it (then it
// returns nil), the peer sends something it must refuse (an error for which
// IsPeerError is true; when the bytes were a call, the peer is sent a
// Thrift exception first), or ctx is done (then the call in progress, if
// any, is finished and replied first, and ServeConn returns nil). The caller
// closes conn.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn) error {
	stall, wto := s.StallTimeout, s.WriteTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	if wto <= 0 {
		wto = DefaultWriteTimeout
	}
	c := &serverConn{
		s:    s,
		cfg:  s.config(),
		proc: flume.NewThriftSourceProtocolProcessor(callHandler{s.Handler}),
		in:   &deadlineReader{conn: conn, stall: stall},
		write: func(b []byte) error {
			_ = conn.SetWriteDeadline(time.Now().Add(wto))
			_, err := conn.Write(b)
			return err
		},
	}
	r := bufio.NewReaderSize(c.in, 32<<10)
	stopWatch := panics.AfterFunc(ctx, "thrift server: connection stop", c.in.stop)
	defer stopWatch()
	hctx := context.WithoutCancel(ctx) // a call that has arrived is finished

	for {
		frame, err := readFrame(r, int(c.cfg.GetMaxFrameSize()), &c.frameBuf, func() { c.in.arm(true) })
		c.in.arm(false)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := c.serveFrame(hctx, frame); err != nil && !errors.Is(err, ErrUnknownMethod) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// serverConn is one connection's state.
type serverConn struct {
	s        *Server
	cfg      *thrift.TConfiguration
	proc     *flume.ThriftSourceProtocolProcessor
	in       *deadlineReader
	write    func([]byte) error
	frameBuf []byte
	out      bytes.Buffer
}

// serveFrame handles one request frame and writes its reply, if any.
func (c *serverConn) serveFrame(ctx context.Context, frame []byte) error {
	reply, err := c.handleFrame(ctx, frame)
	if len(reply) > 0 {
		if werr := c.write(reply); werr != nil && err == nil {
			err = fmt.Errorf("write reply: %w", werr)
		}
	}
	return err
}

// handleFrame decodes one request frame, calls the handler and returns the
// reply frame (length prefix included), which may hold a Thrift exception
// when err is not nil, or be empty when the bytes were no call at all.
func (c *serverConn) handleFrame(ctx context.Context, frame []byte) ([]byte, error) {
	pf := c.s.Protocol.factory(c.cfg)
	in := &thrift.TMemoryBuffer{Buffer: bytes.NewBuffer(frame)}
	c.out.Reset()
	c.out.Write([]byte{0, 0, 0, 0}) // the length, set below
	out := &thrift.TMemoryBuffer{Buffer: &c.out}
	_, terr := c.proc.Process(ctx, pf.GetProtocol(in), pf.GetProtocol(out))
	reply := c.out.Bytes()
	if len(reply) == 4 {
		reply = nil
	} else {
		binary.BigEndian.PutUint32(reply, uint32(len(reply)-4))
	}
	if terr == nil {
		return reply, nil
	}
	var ae thrift.TApplicationException
	if errors.As(terr, &ae) && ae.TypeId() == thrift.UNKNOWN_METHOD {
		return reply, fmt.Errorf("%w: %s", ErrUnknownMethod, ae.Error())
	}
	return reply, fmt.Errorf("%w: %v%s", ErrMalformed, terr, c.s.Protocol.hint(frame))
}

// hint guesses, from the first bytes of a frame this protocol could not
// read, what the peer is misconfigured to do.
func (p Protocol) hint(frame []byte) string {
	if len(frame) == 0 {
		return ""
	}
	switch {
	case p == Compact && frame[0] == 0x80:
		return " (the client speaks the binary protocol: set protocol = binary)"
	case p == Binary && frame[0] == 0x82:
		return " (the client speaks the compact protocol: set protocol = compact, Flume's default)"
	}
	return ""
}

// readFrame reads one frame (a big-endian int32 length, then that many
// bytes) into *buf and returns it. started is called once the first byte
// has arrived. The buffer grows as bytes arrive, so a peer that announces a
// large frame and sends nothing makes this side allocate nothing. io.EOF
// means the peer closed the connection between frames.
func readFrame(r *bufio.Reader, maxSize int, buf *[]byte, started func()) ([]byte, error) {
	if _, err := r.Peek(1); err != nil {
		return nil, err
	}
	if started != nil {
		started()
	}
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: frame header: %v", ErrMalformed, unexpected(err))
	}
	size := int32(binary.BigEndian.Uint32(hdr[:]))
	switch {
	case hdr[0] == 0x80 || hdr[0] == 0x82:
		return nil, fmt.Errorf("%w: the request is not framed (it starts %x, a Thrift message, not a frame length): set the client to the framed transport", ErrMalformed, hdr)
	case size < 0 || int(size) > maxSize:
		return nil, fmt.Errorf("%w: a frame of %d bytes is larger than max-frame-size %d", ErrMalformed, uint32(size), maxSize)
	case size == 0:
		return nil, fmt.Errorf("%w: an empty frame", ErrMalformed)
	}
	b := (*buf)[:0]
	for len(b) < int(size) {
		chunk := min(int(size)-len(b), 64<<10)
		if cap(b)-len(b) < chunk {
			b = append(b, make([]byte, chunk)...)[:len(b)]
		}
		n, err := io.ReadFull(r, b[len(b):len(b)+chunk])
		b = b[:len(b)+n]
		if err != nil {
			*buf = b
			return nil, fmt.Errorf("%w: frame of %d bytes ended after %d: %v", ErrMalformed, size, len(b), unexpected(err))
		}
	}
	// Keep a large buffer only while it is in use: a connection that sent
	// one huge frame should not hold its memory while idle.
	if cap(b) <= 1<<20 {
		*buf = b
	} else {
		*buf = nil
	}
	return b, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// callHandler adapts a Handler to the generated service interface.
type callHandler struct{ h Handler }

func (c callHandler) Append(ctx context.Context, e *flume.ThriftFlumeEvent) (Status, error) {
	if e == nil {
		// The call named no event (field 1 missing): there is nothing to
		// take, and nothing the client could resend that would work.
		return Error, nil
	}
	return c.h.Append(ctx, event.Event{Headers: event.HeadersOf(e.Headers), Body: e.Body, ReceivedAt: event.Now()}), nil
}

func (c callHandler) AppendBatch(ctx context.Context, events []*flume.ThriftFlumeEvent) (Status, error) {
	return c.h.AppendBatch(ctx, toEvents(events, event.Now())), nil
}

// deadlineReader reads a connection with a stall deadline armed while a
// frame is in flight, and fails at once after stop.
type deadlineReader struct {
	conn  net.Conn
	stall time.Duration

	mu       sync.Mutex
	armed    bool
	stopping bool
}

var longAgo = time.Unix(1, 0)

func (d *deadlineReader) Read(p []byte) (int, error) {
	d.mu.Lock()
	switch {
	case d.stopping:
		_ = d.conn.SetReadDeadline(longAgo)
	case d.armed:
		_ = d.conn.SetReadDeadline(time.Now().Add(d.stall))
	default:
		_ = d.conn.SetReadDeadline(time.Time{})
	}
	d.mu.Unlock()
	return d.conn.Read(p)
}

func (d *deadlineReader) arm(on bool) {
	d.mu.Lock()
	d.armed = on
	d.mu.Unlock()
}

func (d *deadlineReader) stop() {
	d.mu.Lock()
	d.stopping = true
	_ = d.conn.SetReadDeadline(longAgo)
	d.mu.Unlock()
}
