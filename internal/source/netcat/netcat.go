// Package netcatsource holds Flume's netcat sources: "netcat", which turns each
// line received on a TCP connection into an event and answers "OK" once the
// event is committed, and "netcatudp", which turns each UDP datagram into an
// event.
//
// The TCP source reads a connection in large blocks and puts every complete
// line it holds in one batch, up to the batch limit (flow.Batching: batchSize
// when set, else the channels' transactionCapacity), so batches are as big
// as the input allows and a lone line is not held back. When the channel is
// full it stops reading that connection, which pushes back on the sender
// through TCP, and retries the same batch until it commits or the source
// stops.
package netcatsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
)

const (
	minReadBuffer = 64 << 10
	// maxReadBuffer bounds the large read buffer a batch limit asks for.
	// A batch is what one read brought in, so a larger buffer means fewer,
	// larger commits: with the file channel each commit waits for an
	// fdatasync, and 256 KiB (about 1000 lines of 256 bytes) instead of
	// 64 KiB doubled its throughput end to end (issue 17). A batchSize left
	// at its default gets this size, as its limit is only known at Start.
	maxReadBuffer = 256 << 10
	// lineGuess is the line length the buffer is sized for.
	lineGuess = 256
)

// Reasons the netcat sources refuse input, each logged (throttled) and
// counted in the source's metrics.
var (
	reasonLineTooLong = listener.Reason{Counter: "LineTooLongCount", Level: slog.LevelWarn,
		Msg: "netcat client sent a line longer than max-line-length; answered FAILED and closed the connection"}
	reasonPartialLine = listener.Reason{Counter: "PartialLineCount", Level: slog.LevelWarn,
		Msg: "netcat client disconnected in the middle of a line; the partial line is dropped"}
	reasonOverBudget = listener.Reason{Counter: "OverBudgetCount", Level: slog.LevelWarn,
		Msg: "netcat source has no memory left for a long line (max-bytes-in-flight reached); closed the connection, the sender should retry"}
	reasonPutFailed = listener.Reason{Level: slog.LevelWarn,
		Msg: "netcat source could not put a batch; answered FAILED"}
	reasonStopping = listener.Reason{Level: slog.LevelInfo,
		Msg: "netcat source refused lines: the agent is stopping; answered FAILED and closed the connection"}
)

// Memory: a connection reads into a small buffer of its own; one that
// needs more (a read filled it, or a line in progress outgrew it) takes a
// large one from the source's budget, max-bytes-in-flight, and gives it back
// once it has read everything it was sent (a listener.ReadBuffer).
const (
	DefaultMaxInFlight = 16 << 20
	writeTimeout       = 30 * time.Second
)

// Source is the netcat (TCP) source. Build it with New.
type Source struct {
	env         flow.Env
	bind        string
	port        int
	maxLine     int  // max-line-length, in UTF-16 code units as Java counts chars, newline included
	ack         bool // ack-every-event
	batch       flow.Batching
	limit       int // the most lines in one batch, set by Start (batch.Limit)
	batchDur    time.Duration
	hygiene     listener.Config
	maxInFlight int64
	budget      *listener.Budget     // max-bytes-in-flight; what it holds is BytesInFlight
	bigBufs     *listener.BigBuffers // room for the longest line, and at least minReadBuffer
	counters    *metrics.SourceCounters
	rejects     *listener.Rejects
	retry       *flow.Retry // puts a batch until the channel takes it

	mu     sync.Mutex // guards the fields below
	group  *listener.Group
	addr   net.Addr
	cancel context.CancelFunc
	okBuf  []byte // "OK\n" × limit, read-only once built
}

// New builds a netcat source from Flume's properties bind, port,
// max-line-length (512), ack-every-event (true) and encoding (utf-8 only),
// and sluice's batchSize (100; when not set, batches grow to the channels'
// transactionCapacity: flow.Batching), batchDurationMillis (1000), max-connections
// (1024; 0: no limit), idle-timeout (600000 ms), progress-timeout
// (10000 ms), min-bytes-per-second (1024) and max-bytes-in-flight (16 MiB):
// see internal/listener for what they do. A batch never waits for input (it
// holds the complete lines already read), so batchDurationMillis, the cap on
// how long a batch may gather, is always met; it is accepted for the common
// grammar.
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	s.bind = p.Required("bind")
	s.port = listener.ReadPort(p, "port")
	s.maxLine = p.IntRange("max-line-length", 512, 2, math.MaxInt32/8)
	s.ack = p.Bool("ack-every-event", true)
	s.batch = flow.ReadBatching(p, "batchSize", flow.DefaultBatchSize)
	s.batchDur = time.Duration(p.IntRange("batchDurationMillis", 1000, 1, math.MaxInt32)) * time.Millisecond
	s.hygiene = listener.ReadConfig(p, listener.DashNames, listener.DefaultConfig)
	s.maxInFlight = listener.ReadBudget(p, listener.DashNames, DefaultMaxInFlight, minReadBuffer)
	// A line of maxLine UTF-16 units takes at most 3 bytes per unit in UTF-8.
	lineBuf := max(minReadBuffer, 3*s.maxLine+8)
	if int64(lineBuf) > s.maxInFlight {
		p.Errorf(listener.DashNames.MaxBytesInFlight, "%d bytes cannot hold one line of max-line-length %d (up to %d bytes); raise it or lower max-line-length",
			s.maxInFlight, s.maxLine, lineBuf)
	}
	// Room for a batch of batchSize lines of about 256 bytes too, up to
	// 256 KiB, as far as the budget allows.
	want := maxReadBuffer
	if s.batch.Explicit() {
		want = min(maxReadBuffer, s.batch.Size()*lineGuess)
	}
	s.bigBufs = listener.NewBigBuffers(max(lineBuf, int(min(int64(want), s.maxInFlight))))
	checkUTF8(p, "encoding")
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.rejects = listener.NewRejects(env.Name, env.Log(), s.counters.Set,
		append([]listener.Reason{reasonLineTooLong, reasonPartialLine, reasonOverBudget}, listener.ConnReasons...)...)
	s.budget = listener.NewBudget(s.maxInFlight)
	s.counters.Gauge("BytesInFlight", func() string { return strconv.FormatInt(s.inFlight(), 10) })
	s.retry = flow.NewRetry(env.Log(), "netcat", env.Name, s.counters, flow.FullBackoff, false)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// inFlight is what the source's budget holds now (its BytesInFlight).
func (s *Source) inFlight() int64 { return s.budget.InUse() }

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
func (s *Source) BatchSize() int { return s.batch.Size() }

// Addr returns the address the source listens on, once started.
func (s *Source) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Start listens on bind:port and serves each connection in its own
// goroutine.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.Addr() != nil {
		return fmt.Errorf("netcat %s: already started", s.env.Name)
	}
	g, lns, err := listener.Open(s.hygiene, listener.Options{Source: s.env.Name, Log: s.env.Log(), Rejects: s.rejects, Open: s.counters.OpenConnection},
		net.JoinHostPort(s.bind, strconv.Itoa(s.port)))
	if err != nil {
		return fmt.Errorf("netcat %s: %w", s.env.Name, err)
	}
	ln := lns[0]
	ctx, cancel := context.WithCancel(context.Background())
	budget := s.budget
	s.mu.Lock()
	s.group, s.addr, s.cancel = g, ln.Addr(), cancel
	s.limit = s.batch.Limit(p)
	s.okBuf = bytes.Repeat([]byte("OK\n"), s.limit)
	s.mu.Unlock()
	s.counters.Started()
	s.env.Log().Info("netcat source listening", "source", s.env.Name, "addr", ln.Addr().String())
	g.Serve(ln, func(c *listener.Conn) {
		h := newHandler(s, c, p, budget)
		defer h.Release()
		h.serve(ctx)
	})
	return nil
}

// Stop closes the listener and every connection and waits for their
// goroutines. Lines a connection had read but not committed are not
// acknowledged, so the sender still holds them.
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	g, cancel := s.group, s.cancel
	s.group, s.addr, s.cancel = nil, nil, nil
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	defer s.counters.Stopped()
	defer s.retry.Stop()
	cancel() // ends puts waiting for channel space
	if err := g.Shutdown(ctx); err != nil {
		return fmt.Errorf("netcat %s: stop: %w", s.env.Name, err)
	}
	return nil
}

// handler serves one connection. It owns its read buffer (unread input is
// Buf[R:W]); bodies are copied out of it into a slab per batch, because
// once handed to Process they belong to the pipeline.
type handler struct {
	*listener.ReadBuffer
	s *Source
	c *listener.Conn
	p flow.Processor

	events []event.Event // the batch being put; rebuilt from its slab for a retry
}

func newHandler(s *Source, c *listener.Conn, p flow.Processor, b *listener.Budget) *handler {
	return &handler{
		ReadBuffer: listener.NewReadBuffer(c, s.bigBufs, b),
		s:          s,
		c:          c,
		p:          p,
		events:     make([]event.Event, 0, min(s.limit, flow.DefaultBatchSize)),
	}
}

// errOverlong ends a connection whose line exceeded max-line-length, as
// Flume's netcat source does after answering FAILED.
var errOverlong = errors.New("line exceeds max-line-length")

func (h *handler) serve(ctx context.Context) {
	log := h.s.env.Log()
	peer := h.c.Peer()
	for {
		// When only a partial line (shorter than the limit) is left at the
		// end of the buffer, it moves to the front.
		if !h.Prepare(ctx, 1) {
			// A line in progress needs the large buffer and the budget has
			// none for it.
			if ctx.Err() == nil {
				h.s.rejects.Add(reasonOverBudget, peer, "max-bytes-in-flight", h.s.maxInFlight, "line_bytes", h.W)
			}
			return
		}
		_, rerr := h.Fill(h.c)
		if err := h.drain(ctx); err != nil {
			if !errors.Is(err, errOverlong) && ctx.Err() == nil {
				log.Debug("netcat connection ended", "source", h.s.env.Name, "remote", peer, "err", err)
			}
			return
		}
		if rerr != nil {
			if h.R < h.W && ctx.Err() == nil && h.c.ClosedBy() == "" {
				// The client went away in the middle of a line: Flume drops
				// that partial line too. Count it so the loss is visible.
				h.s.counters.EventReadFail.Add(1)
				h.s.rejects.Add(reasonPartialLine, peer, "bytes", h.W-h.R)
			}
			return
		}
	}
}

// drain puts every complete line in buf[r:w] into the channel, in batches
// of at most the limit, acknowledging each batch after its commit.
func (h *handler) drain(ctx context.Context) error {
	put := false
	defer func() {
		switch {
		case h.R == h.W:
			h.c.Idle()
		case put:
			h.c.Receiving() // the next line has begun: its own clock
		}
	}()
	for {
		data := h.Buf[h.R:h.W]
		end, nlines, overlong := h.scan(data)
		if nlines > 0 && nlines < h.s.limit && h.FillNow() {
			// Input that arrived meanwhile joins this batch; the unread
			// bytes may have moved even if none came: look again.
			continue
		}
		if nlines > 0 {
			// One slab holds every body of the batch (copied, not
			// cleared first: append allocates without zeroing).
			slab := append([]byte(nil), data[:end]...)
			h.c.Busy()
			put = true
			if err := h.put(ctx, slab); err != nil {
				return err
			}
			h.R += end
			continue
		}
		if overlong {
			h.s.counters.EventReadFail.Add(1)
			h.s.rejects.Add(reasonLineTooLong, h.c.Peer(), "max-line-length", h.s.maxLine)
			msg := "FAILED: Event exceeds the maximum length (" + strconv.Itoa(h.s.maxLine) + " chars, including newline)\n"
			_ = h.write([]byte(msg)) // the connection is closed next either way
			h.linger()
			return errOverlong
		}
		return nil
	}
}

// write writes b, bounded by writeTimeout so a client that never reads its
// answers cannot hold the connection for ever.
func (h *handler) write(b []byte) error {
	_ = h.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := h.c.Write(b)
	return err
}

// linger half-closes the connection and discards what the client still
// sends for a moment, so that closing it does not reset it (a close with
// unread input sends RST) before the client has read the FAILED answer.
func (h *handler) linger() {
	tc, ok := h.c.Conn.(*net.TCPConn)
	if !ok {
		return
	}
	// Best effort: the connection is closed next whatever these return.
	_ = tc.CloseWrite()
	_ = tc.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, tc, 1<<20)
}

// scan finds the complete lines at the start of data, up to the limit of
// them, and returns the offset just past the last one's newline and how many
// there are. When the first line (complete or not) is longer than
// max-line-length it returns overlong and no lines.
func (h *handler) scan(data []byte) (end, nlines int, overlong bool) {
	for nlines < h.s.limit {
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
	again := false
	err := h.s.retry.Put(ctx, h.p, func() []event.Event {
		if again {
			h.fill(slab, now)
		}
		again = true
		return h.events
	}, func() []any { return []any{"remote", h.c.Peer()} })
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, flow.ErrStopping):
		// Nothing will be put any more: tell the sender and close, so it
		// stops sending here and resends elsewhere or later.
		h.s.rejects.Add(reasonStopping, h.c.Peer(), "events", n)
		if h.s.ack {
			_ = h.write([]byte(strings.Repeat("FAILED: agent is stopping; nothing was kept, send again\n", n)))
		}
		return err
	default:
		// Flume answers a failed put with FAILED and goes on.
		h.s.rejects.Add(reasonPutFailed, h.c.Peer(), "events", n, "err", err)
		line := "FAILED: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
		return h.write([]byte(strings.Repeat(line, n)))
	}
	c.EventAccepted.Add(int64(n))
	c.AppendBatchAccepted.Add(1)
	if h.s.ack {
		if err := h.write(h.s.okBuf[:3*n]); err != nil {
			return err
		}
	}
	return nil
}
