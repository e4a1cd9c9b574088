// Package netcat holds Flume's netcat sources: "netcat", which turns each
// line received on a TCP connection into an event and answers "OK" once the
// event is committed, and "netcatudp", which turns each UDP datagram into an
// event.
//
// The TCP source reads a connection in large blocks and puts every complete
// line it holds in one batch (up to batchSize), so batches are as big as the
// input allows and a lone line is not held back. When the channel is full it
// stops reading that connection, which pushes back on the sender through
// TCP, and retries the same batch until it commits or the source stops.
package netcat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

const (
	minReadBuffer = 64 << 10
	// Retry pacing while the channel is full. The channel itself already
	// waits up to its keep-alive before refusing a put, so these are short.
	minFullBackoff = 10 * time.Millisecond
	maxFullBackoff = 500 * time.Millisecond
)

// Source is the netcat (TCP) source. Build it with New.
type Source struct {
	env       flow.Env
	bind      string
	port      int
	maxLine   int  // max-line-length, in UTF-16 code units as Java counts chars, newline included
	ack       bool // ack-every-event
	batchSize int
	batchDur  time.Duration
	maxConns  int
	counters  *metrics.SourceCounters

	mu       sync.Mutex // guards the fields below
	ln       net.Listener
	conns    map[net.Conn]struct{}
	cancel   context.CancelFunc
	stopping bool
	wg       sync.WaitGroup
	okBuf    []byte // "OK\n" × batchSize, read-only once built
}

// New builds a netcat source from Flume's properties bind, port,
// max-line-length (512), ack-every-event (true) and encoding (utf-8 only),
// and sluice's batchSize (100), batchDurationMillis (1000) and
// max-connections (0, unlimited). A batch never waits for input (it holds the
// complete lines already read), so batchDurationMillis, the cap on how long a
// batch may gather, is always met; it is accepted for the common grammar.
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	s.bind = p.Required("bind")
	s.port = requiredPort(p)
	s.maxLine = p.IntRange("max-line-length", 512, 2, math.MaxInt32/8)
	s.ack = p.Bool("ack-every-event", true)
	s.batchSize = p.IntRange("batchSize", 100, 1, 1<<20)
	s.batchDur = time.Duration(p.IntRange("batchDurationMillis", 1000, 1, math.MaxInt32)) * time.Millisecond
	s.maxConns = p.IntRange("max-connections", 0, 0, math.MaxInt32)
	checkUTF8(p, "encoding")
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

func requiredPort(p *config.Props) int {
	if !p.Has("port") {
		p.Required("port")
		return 0
	}
	return p.IntRange("port", 0, 0, 65535)
}

// checkUTF8 accepts key when it names UTF-8 (or is unset): sluice moves the
// bytes as they come, which is what Flume does for UTF-8 input.
func checkUTF8(p *config.Props, key string) {
	v := p.String(key, "utf-8")
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "utf-8", "utf8":
	default:
		p.Errorf(key, "encoding %q is not supported; sluice's netcat sources read UTF-8 only (remove the property or set it to utf-8)", v)
	}
}

// BatchSize reports batchSize, so the agent can check it against the
// channels' transactionCapacity.
func (s *Source) BatchSize() int { return s.batchSize }

// Addr returns the address the source listens on, once started.
func (s *Source) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Start listens on bind:port and serves each connection in its own
// goroutine.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.Addr() != nil {
		return fmt.Errorf("netcat %s: already started", s.env.Name)
	}
	addr := net.JoinHostPort(s.bind, strconv.Itoa(s.port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("netcat %s: listen %s: %w", s.env.Name, addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.ln, s.cancel, s.stopping = ln, cancel, false
	s.conns = map[net.Conn]struct{}{}
	s.okBuf = bytes.Repeat([]byte("OK\n"), s.batchSize)
	s.mu.Unlock()
	s.counters.Started()
	s.env.Log().Info("netcat source listening", "source", s.env.Name, "addr", ln.Addr().String())
	s.wg.Add(1)
	go s.accept(ctx, ln, p)
	return nil
}

// Stop closes the listener and every connection and waits for their
// goroutines. Lines a connection had read but not committed are not
// acknowledged, so the sender still holds them.
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.ln == nil {
		s.mu.Unlock()
		return nil
	}
	s.stopping = true
	s.ln.Close()
	s.ln = nil
	s.cancel()
	now := time.Now()
	for c := range s.conns {
		c.SetDeadline(now) // wakes a blocked read or write; the handler then closes it
	}
	s.mu.Unlock()
	defer s.counters.Stopped()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		<-done
		return fmt.Errorf("netcat %s: stop: %w", s.env.Name, ctx.Err())
	}
}

func (s *Source) accept(ctx context.Context, ln net.Listener, p flow.Processor) {
	defer s.wg.Done()
	log := s.env.Log()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isStopping() {
				return
			}
			// Out of file descriptors and the like: wait a little, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			log.Warn("netcat source could not accept a connection", "source", s.env.Name, "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return
			}
			continue
		}
		delay = 0
		if !s.track(c) {
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			h := newHandler(s, c, p)
			h.serve(ctx)
		}()
	}
}

func (s *Source) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// track registers c, or reports false when the source is stopping or at
// max-connections.
func (s *Source) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	if s.maxConns > 0 && len(s.conns) >= s.maxConns {
		s.env.Log().Warn("netcat source refused a connection: max-connections reached",
			"source", s.env.Name, "remote", c.RemoteAddr().String(), "max", s.maxConns)
		return false
	}
	s.conns[c] = struct{}{}
	s.counters.OpenConnection.Store(int64(len(s.conns)))
	return true
}

func (s *Source) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.counters.OpenConnection.Store(int64(len(s.conns)))
	s.mu.Unlock()
}

// handler serves one connection. It owns buf; bodies are copied out of it
// into a slab per batch, because once handed to Process they belong to the
// pipeline.
type handler struct {
	s    *Source
	c    net.Conn
	p    flow.Processor
	buf  []byte
	r, w int // unread input is buf[r:w]

	events []event.Event // the batch being put; rebuilt from its slab for a retry
}

func newHandler(s *Source, c net.Conn, p flow.Processor) *handler {
	// A line of maxLine UTF-16 units takes at most 3 bytes per unit in UTF-8.
	size := max(minReadBuffer, 3*s.maxLine+8)
	return &handler{
		s:      s,
		c:      c,
		p:      p,
		buf:    make([]byte, size),
		events: make([]event.Event, 0, s.batchSize),
	}
}

// errOverlong ends a connection whose line exceeded max-line-length, as
// Flume's netcat source does after answering FAILED.
var errOverlong = errors.New("line exceeds max-line-length")

func (h *handler) serve(ctx context.Context) {
	log := h.s.env.Log()
	for {
		if h.w == len(h.buf) {
			// Only a partial line (shorter than the limit) is left: move it
			// to the front.
			h.w = copy(h.buf, h.buf[h.r:h.w])
			h.r = 0
		}
		n, rerr := h.c.Read(h.buf[h.w:])
		h.w += n
		if err := h.drain(ctx); err != nil {
			if errors.Is(err, errOverlong) {
				log.Warn("netcat client sent a line longer than max-line-length; closing the connection",
					"source", h.s.env.Name, "remote", h.c.RemoteAddr().String(), "max-line-length", h.s.maxLine)
			} else if ctx.Err() == nil {
				log.Debug("netcat connection ended", "source", h.s.env.Name, "remote", h.c.RemoteAddr().String(), "err", err)
			}
			return
		}
		if rerr != nil {
			if h.r < h.w && ctx.Err() == nil {
				// The client went away in the middle of a line: Flume drops
				// that partial line too. Count it so the loss is visible.
				h.s.counters.EventReadFail.Add(1)
				log.Warn("netcat client disconnected in the middle of a line; the partial line is dropped",
					"source", h.s.env.Name, "remote", h.c.RemoteAddr().String(), "bytes", h.w-h.r)
			}
			return
		}
	}
}

// drain puts every complete line in buf[r:w] into the channel, in batches
// of at most batchSize, acknowledging each batch after its commit.
func (h *handler) drain(ctx context.Context) error {
	for {
		data := h.buf[h.r:h.w]
		end, nlines, overlong := h.scan(data)
		if nlines > 0 {
			// One slab holds every body of the batch.
			slab := make([]byte, end)
			copy(slab, data[:end])
			if err := h.put(ctx, slab); err != nil {
				return err
			}
			h.r += end
			continue
		}
		if overlong {
			h.s.counters.EventReadFail.Add(1)
			msg := "FAILED: Event exceeds the maximum length (" + strconv.Itoa(h.s.maxLine) + " chars, including newline)\n"
			h.c.Write([]byte(msg))
			h.linger()
			return errOverlong
		}
		if h.r == h.w {
			h.r, h.w = 0, 0
		}
		return nil
	}
}

// linger half-closes the connection and discards what the client still
// sends for a moment, so that closing it does not reset it (a close with
// unread input sends RST) before the client has read the FAILED answer.
func (h *handler) linger() {
	tc, ok := h.c.(*net.TCPConn)
	if !ok {
		return
	}
	tc.CloseWrite()
	tc.SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, tc, 1<<20)
}

// scan finds the complete lines at the start of data, up to batchSize of
// them, and returns the offset just past the last one's newline and how many
// there are. When the first line (complete or not) is longer than
// max-line-length it returns overlong and no lines.
func (h *handler) scan(data []byte) (end, nlines int, overlong bool) {
	for nlines < h.s.batchSize {
		i := bytes.IndexByte(data[end:], '\n')
		if i < 0 {
			// A partial line: too long already when it fills Flume's buffer.
			rest := data[end:]
			if nlines == 0 && len(rest) >= h.s.maxLine && javaChars(rest) >= h.s.maxLine {
				return 0, 0, true
			}
			return end, nlines, false
		}
		// Bytes bound chars from above, so only long lines need counting.
		if i+1 > h.s.maxLine && javaChars(data[end:end+i])+1 > h.s.maxLine {
			if nlines == 0 {
				return 0, 0, true
			}
			return end, nlines, false
		}
		end += i + 1
		nlines++
	}
	return end, nlines, false
}

// javaChars counts b as Java counts a string's chars (UTF-16 code units);
// an invalid byte counts as one replacement char.
func javaChars(b []byte) int {
	n := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 && !utf8.FullRune(b) {
			break // an incomplete sequence at the end of a partial line
		}
		b = b[size:]
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// fill sets h.events to the lines of slab, each ending in '\n'.
func (h *handler) fill(slab []byte, now int64) {
	h.events = h.events[:0]
	for off := 0; off < len(slab); {
		i := bytes.IndexByte(slab[off:], '\n')
		h.events = append(h.events, event.Event{Body: slab[off : off+i : off+i], ReceivedAt: now})
		off += i + 1
	}
}

// put commits the lines of slab, retrying while the channel is full (the
// connection is not read meanwhile, which pushes back on the sender), then
// answers OK for each event when ack-every-event is set. A failed Process
// may have rewritten or reordered the events (interceptors), so a retry
// builds them again from the slab, whose bytes nobody changes.
func (h *handler) put(ctx context.Context, slab []byte) error {
	c := h.s.counters
	now := event.Now()
	h.fill(slab, now)
	n := len(h.events)
	c.AppendBatchReceived.Add(1)
	c.EventReceived.Add(int64(n))
	backoff := time.Duration(0)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			h.fill(slab, now)
		}
		err := h.p.Process(ctx, h.events)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.ChannelWriteFail.Add(1)
		if !errors.Is(err, flow.ErrChannelFull) {
			// Flume answers a failed put with FAILED and goes on.
			h.s.env.Log().Warn("netcat source could not put a batch", "source", h.s.env.Name, "events", n, "err", err)
			line := "FAILED: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
			_, werr := h.c.Write([]byte(strings.Repeat(line, n)))
			return werr
		}
		backoff = min(max(2*backoff, minFullBackoff), maxFullBackoff)
		if backoff == maxFullBackoff {
			h.s.env.Log().Debug("netcat source waiting for channel space", "source", h.s.env.Name, "events", n)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	c.EventAccepted.Add(int64(n))
	c.AppendBatchAccepted.Add(1)
	if h.s.ack {
		if _, err := h.c.Write(h.s.okBuf[:3*n]); err != nil {
			return err
		}
	}
	return nil
}
