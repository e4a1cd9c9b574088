package avrorpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/panics"
)

// Handler takes the events of each call a server connection receives and
// returns the Status to reply. It is called from the connection's
// goroutine, one call at a time per connection, so calls on one connection
// are handled in order, as Flume's Netty server does. The events (their
// headers and bodies alias the request buffer) belong to the handler.
type Handler interface {
	Append(ctx context.Context, e event.Event) Status
	AppendBatch(ctx context.Context, events []event.Event) Status
}

// Server speaks the server side of Flume's Avro RPC on connections a caller
// accepted. One Server serves many connections at once; each connection is
// stateful: it carries a handshake only until one succeeds.
type Server struct {
	Handler Handler
	Limits  Limits
	// Deflate wraps each connection's stream in zlib both ways
	// (compression-type = deflate); Flume's source compresses at level 6.
	Deflate bool
	// StallTimeout bounds how long a pack that has started may go without
	// a byte arriving. Between packs a connection may idle for ever, as
	// Flume's clients keep connections open. Default 30 s.
	StallTimeout time.Duration
	// WriteTimeout bounds writing a reply. Default 30 s.
	WriteTimeout time.Duration
	// Memory, when set, is a byte budget shared by every connection: a
	// request's buffer grows, and its decoding allocates, only with bytes
	// taken from it, all given back once the call is answered. The first
	// bytes of a request wait for it (up to 5 s, or StallTimeout if less;
	// the connection is not read meanwhile, which pushes back); later ones
	// must be free at once, else the request fails with ErrBusy (so two
	// half-read requests never wait for each other).
	Memory Memory
	// Busy and Idle, when set, are called with the connection once a
	// request has been read (the handler runs) and once its reply is
	// written: where the connection is, for idle and progress timeouts.
	Busy, Idle func(net.Conn)

	mu     sync.Mutex
	remote map[MD5]bool // protocol hashes clients declared and we checked
}

// Memory is a byte budget (see Server.Memory); *listener.Budget is one.
type Memory interface {
	TryAcquire(n int64) bool
	Acquire(ctx context.Context, n int64) error
	Release(n int64)
	Limit() int64 // 0: unlimited
}

// ErrBusy is wrapped by the error that ends a connection whose request
// found Server.Memory spent: the server, not the peer, is short; the
// sender should retry.
var ErrBusy = errors.New("server busy: memory budget spent")

// maxMemoryWait bounds how long a request waits for its first bytes of
// Server.Memory before the connection is closed with ErrBusy.
const maxMemoryWait = 5 * time.Second

// memHold is what one request took from a Server's Memory.
type memHold struct {
	m     Memory
	ctx   context.Context
	stall time.Duration
	n     int64
}

// reserve takes n bytes, or gives -n back.
func (h *memHold) reserve(n int) error {
	if h.m == nil || n == 0 {
		return nil
	}
	if n < 0 {
		back := min(int64(-n), h.n)
		h.m.Release(back)
		h.n -= back
		return nil
	}
	want := int64(n)
	if lim := h.m.Limit(); lim > 0 && h.n+want > lim {
		return fmt.Errorf("%w: the request needs more than %d bytes to read and decode, the whole memory budget", ErrTooLarge, lim)
	}
	if h.n == 0 {
		wait := min(h.stall, maxMemoryWait)
		ctx, cancel := context.WithTimeout(h.ctx, wait)
		err := h.m.Acquire(ctx, want)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: waited %v for %d bytes", ErrBusy, wait, want)
		}
	} else if !h.m.TryAcquire(want) {
		return fmt.Errorf("%w: %d more bytes for a request holding %d", ErrBusy, want, h.n)
	}
	h.n += want
	return nil
}

func (h *memHold) release() {
	if h.m != nil && h.n > 0 {
		h.m.Release(h.n)
	}
	h.n = 0
}

// Default timeouts of a Server.
const (
	DefaultStallTimeout = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
)

// maxRemoteProtocols bounds the cache of client protocol hashes.
const maxRemoteProtocols = 64

// maxNoneReplies is how many handshakes in a row may end in NONE before the
// connection is closed: a client that does not resend its protocol after a
// NONE never will.
const maxNoneReplies = 3

// ServeConn speaks the protocol on conn until the peer closes it (then it
// returns nil), the peer sends something it must refuse, or ctx is done
// (then the call in progress, if any, is finished and replied first). It
// returns the reason the connection ended. The caller closes conn.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn) error {
	lim := s.Limits.withDefaults()
	stall, wto := s.StallTimeout, s.WriteTimeout
	if stall == 0 {
		stall = DefaultStallTimeout
	}
	if wto == 0 {
		wto = DefaultWriteTimeout
	}
	st := newStream(conn, s.Deflate, 6, stall)
	stopWatch := panics.AfterFunc(ctx, "avro server: connection stop", st.stop)
	defer stopWatch()
	hctx := context.WithoutCancel(ctx)

	c := serverConn{s: s, lim: lim}
	mem := &memHold{m: s.Memory, ctx: ctx, stall: stall}
	defer mem.release()
	var reserve func(int) error
	if s.Memory != nil {
		reserve = mem.reserve
		c.reserve = reserve
	}
	var msgBuf, packBuf []byte
	for {
		p, err := readPackMem(st.r, lim, func() { st.arm(true) }, reserve)
		st.arm(false)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if s.Busy != nil {
			s.Busy(conn)
		}
		msgBuf, err = c.handle(hctx, p.msg, msgBuf[:0])
		if err != nil {
			return err
		}
		packBuf = appendPack(packBuf[:0], p.serial, msgBuf)
		if err := st.writePack(packBuf, wto); err != nil {
			return fmt.Errorf("write reply: %w", err)
		}
		mem.release()
		if s.Idle != nil {
			s.Idle(conn)
		}
		if c.nones >= maxNoneReplies {
			return fmt.Errorf("client sent an unknown protocol hash %d times without its protocol", c.nones)
		}
	}
}

// serverConn is the handshake state of one connection.
type serverConn struct {
	s       *Server
	lim     Limits
	reserve func(int) error // takes decoding's bytes from Server.Memory; nil without one
	done    bool            // a handshake succeeded
	nones   int
}

var (
	serverProtocol = ProtocolJSON
	serverHash     = ProtocolHash
)

// handle decodes one request and appends the reply message to out.
func (c *serverConn) handle(ctx context.Context, msg []byte, out []byte) ([]byte, error) {
	d := decoder{buf: msg, budget: c.lim.decodeBudget(), reserve: c.reserve}
	if !c.done {
		hr, err := d.handshakeRequest()
		if err != nil {
			return nil, fmt.Errorf("handshake: %w", err)
		}
		known, err := c.s.knownClient(hr)
		if err != nil {
			return nil, fmt.Errorf("handshake: client protocol %s: %w", hr.clientHash, err)
		}
		resp := handshakeResponse{match: MatchBoth}
		switch {
		case !known:
			resp.match = MatchNone
		case hr.serverHash != serverHash:
			resp.match = MatchClient
		}
		if resp.match != MatchBoth {
			resp.serverProtocol, resp.serverHash = &serverProtocol, &serverHash
		}
		out = appendHandshakeResponse(out, resp)
		if resp.match == MatchNone {
			c.nones++
			return out, nil // the client resends with its protocol
		}
		c.done, c.nones = true, 0
	}
	if err := d.skipBytesMap(); err != nil {
		return nil, fmt.Errorf("call metadata: %w", err)
	}
	name, err := d.str()
	if err != nil {
		return nil, fmt.Errorf("message name: %w", err)
	}
	var status Status
	switch name {
	case "": // a handshake ping: the reply is the handshake alone
		if d.remaining() != 0 {
			return nil, malformed("%d bytes after a handshake ping", d.remaining())
		}
		return out, nil
	case msgAppend:
		var e event.Event
		if err := d.charge(eventCost); err != nil {
			return nil, err
		}
		if err := d.event(&e); err != nil {
			return nil, fmt.Errorf("append: %w", err)
		}
		if d.remaining() != 0 {
			return nil, malformed("append: %d bytes after the event", d.remaining())
		}
		status = c.s.Handler.Append(ctx, e)
	case msgAppendBatch:
		events, err := d.events(nil, c.lim.MaxBatchEvents)
		if err != nil {
			return nil, fmt.Errorf("appendBatch: %w", err)
		}
		if d.remaining() != 0 {
			return nil, malformed("appendBatch: %d bytes after the events", d.remaining())
		}
		status = c.s.Handler.AppendBatch(ctx, events)
	default:
		return nil, fmt.Errorf("%w: no message named %q in AvroSourceProtocol", ErrMalformed, truncate(name, 64))
	}
	out = append(out, 0, 0) // empty response metadata, no error
	return appendLong(out, int64(status)), nil
}

// knownClient reports whether the client's protocol is known (by hash, or
// by the text it sent, which is checked and then remembered).
func (s *Server) knownClient(hr handshakeRequest) (bool, error) {
	if knownHashes[hr.clientHash] {
		return true, nil
	}
	s.mu.Lock()
	ok := s.remote[hr.clientHash]
	s.mu.Unlock()
	if ok {
		return true, nil
	}
	if hr.clientProtocol == nil {
		return false, nil
	}
	if err := checkRemoteProtocol(*hr.clientProtocol); err != nil {
		return false, err
	}
	s.mu.Lock()
	if s.remote == nil || len(s.remote) >= maxRemoteProtocols {
		s.remote = map[MD5]bool{}
	}
	s.remote[hr.clientHash] = true
	s.mu.Unlock()
	return true, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// IsPeerError reports whether err (from ServeConn) is about what the peer
// sent (malformed data, a limit) rather than the network.
func IsPeerError(err error) bool {
	return errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrCompressionMismatch)
}
