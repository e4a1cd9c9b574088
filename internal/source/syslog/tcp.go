package syslogsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

const (
	minReadBuffer = 64 << 10
	// maxReadBuffer bounds the large read buffer a batch limit asks for: a
	// batch is at most what one buffer holds, and with the file channel
	// each batch's commit waits for an fdatasync, so a busy connection
	// reads about 1000 messages of msgGuess bytes at a time. A batchSize
	// left at its default gets this size (its limit is known at Start).
	maxReadBuffer = 256 << 10
	msgGuess      = 256
	lookupTimeout = 2 * time.Second
	// Memory: a connection reads into a small buffer of its own; one that
	// needs more (a read filled it, or a message in progress outgrew it)
	// takes a large one from the source's budget, maxBytesInFlight (a
	// listener.ReadBuffer).
	DefaultMaxInFlight = 16 << 20
)

// Reasons the syslog sources flag or refuse input, each logged (throttled)
// and counted in the source's metrics. Flume delivers oversize and invalid
// messages tagged in flume.syslog.status, and so does sluice; the log and
// the counters make them visible without reading the events.
var (
	reasonOversize = listener.Reason{Counter: "OversizeMessageCount", Level: slog.LevelWarn,
		Msg: "syslog message longer than eventSize: cut there and tagged flume.syslog.status=Incomplete (raise eventSize to keep such messages whole)"}
	reasonInvalid = listener.Reason{Counter: "InvalidMessageCount", Level: slog.LevelWarn,
		Msg: "syslog message without a valid <PRI> header: tagged flume.syslog.status=Invalid"}
	reasonUnreadable = listener.Reason{Counter: "UnreadableMessageCount", Level: slog.LevelWarn,
		Msg: "syslog input that makes no event (no priority digits), dropped as Flume drops it"}
	reasonTruncated = listener.Reason{Counter: "TruncatedMessageCount", Level: slog.LevelWarn,
		Msg: "syslog connection ended in the middle of a message; the part received was delivered, tagged"}
	reasonOverBudget = listener.Reason{Counter: "OverBudgetCount", Level: slog.LevelWarn,
		Msg: "syslog source has no memory left for a long message (maxBytesInFlight reached); closed the connection"}
	reasonPutFailed = listener.Reason{Level: slog.LevelError,
		Msg: "syslog source dropped events it could not put"}
	reasonStopping = listener.Reason{Level: slog.LevelWarn,
		Msg: "syslog source stopped reading a connection: the agent is stopping; the messages read but not put are lost (syslog over TCP has no acknowledgement)"}
)

// buildFunc turns a frame into an event appended to the batch, with its
// body in slab. It reports whether the frame counts as a read failure.
type buildFunc func(fr frame, port int, slab []byte) (ev event.Event, out []byte, keep, readFail bool)

// tcpServer is what syslogtcp and multiport_syslogtcp share: listeners and
// connections (a listener.Group), framing, batching and backpressure.
type tcpServer struct {
	env         flow.Env
	kind        string // for messages: "syslogtcp", "multiport_syslogtcp"
	host        string
	ports       []int
	framer      framer
	batch       flow.Batching
	limit       int // the most messages in one batch, set by Start
	ipHeader    string
	hostHeader  string
	portHeader  string
	tls         tlsconf.Settings
	build       buildFunc
	counters    *metrics.SourceCounters
	hygiene     listener.Config
	maxInFlight int64
	budget      *listener.Budget     // max-bytes-in-flight; what it holds is BytesInFlight
	bigBufs     *listener.BigBuffers // room for the longest frame, at least minReadBuffer
	rejects     *listener.Rejects
	retry       *flow.Retry // puts a batch until the channel takes it

	mu       sync.Mutex // guards the fields below
	group    *listener.Group
	addrs    []net.Addr
	stopRead context.CancelFunc // ends reading
	stopProc context.CancelFunc // ends puts still waiting for the channel
}

// readLimits reads the connection hygiene and memory budget every syslog
// TCP source has (see internal/listener): maxConnections (1024),
// idleTimeout (600000 ms), progressTimeout (10000 ms), minBytesPerSecond
// (1024) and maxBytesInFlight (16 MiB); and registers the reasons it counts.
func (s *tcpServer) readLimits(p *config.Props) {
	s.hygiene = listener.ReadConfig(p, listener.CamelNames, listener.DefaultConfig)
	s.maxInFlight = listener.ReadBudget(p, listener.CamelNames, DefaultMaxInFlight, minReadBuffer)
	// Room for the longest frame, and for a batch of messages of about 256
	// bytes: a batch is at most what one buffer holds.
	want := maxReadBuffer
	if s.batch.Explicit() {
		want = min(maxReadBuffer, s.batch.Size()*msgGuess)
	}
	s.bigBufs = listener.NewBigBuffers(max(minReadBuffer, s.framer.maxSize+2*maxCountDigits+2, int(min(int64(want), s.maxInFlight))))
	if int64(s.bigBufs.Size()) > s.maxInFlight {
		p.Errorf(listener.CamelNames.MaxBytesInFlight, "%d bytes cannot hold one message of eventSize %d (up to %d bytes); raise it or lower eventSize",
			s.maxInFlight, s.framer.maxSize, s.bigBufs.Size())
	}
	s.counters = metrics.NewSourceCounters(s.env.Name, s.env.Type)
	s.rejects = listener.NewRejects(s.env.Name, s.env.Log(), s.counters.Set,
		slices.Concat([]listener.Reason{reasonOversize, reasonInvalid, reasonUnreadable, reasonTruncated, reasonOverBudget},
			listener.ConnReasons, listener.TLSReasons)...)
	s.budget = listener.NewBudget(s.maxInFlight)
	s.counters.Gauge("BytesInFlight", func() string { return strconv.FormatInt(s.inFlight(), 10) })
	s.retry = flow.NewRetry(s.env.Log(), s.kind, s.env.Name, s.counters, flow.FullBackoff, false)
}

// inFlight is what the source's budget holds now (its BytesInFlight).
func (s *tcpServer) inFlight() int64 { return s.budget.InUse() }

// BatchSize reports the most events put in one transaction.
func (s *tcpServer) BatchSize() int { return s.batch.Size() }

// Addrs returns the addresses the source listens on, once started.
func (s *tcpServer) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Addr(nil), s.addrs...)
}

// Start listens on every port and serves each connection in its own goroutine.
func (s *tcpServer) Start(_ context.Context, p flow.Processor) error {
	s.mu.Lock()
	started := s.group != nil
	s.mu.Unlock()
	if started {
		return fmt.Errorf("%s %s: already started", s.kind, s.env.Name)
	}
	tcfg, err := s.tls.ServerConfig()
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.kind, s.env.Name, err)
	}
	hostPorts := make([]string, len(s.ports))
	for i, port := range s.ports {
		hostPorts[i] = net.JoinHostPort(s.host, strconv.Itoa(port))
	}
	g, lns, err := listener.Open(s.hygiene, listener.Options{Source: s.env.Name, Log: s.env.Log(), Rejects: s.rejects, Open: s.counters.OpenConnection}, hostPorts...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.kind, s.env.Name, err)
	}
	addrs := make([]net.Addr, len(lns))
	for i, ln := range lns {
		addrs[i] = ln.Addr()
	}
	readCtx, stopRead := context.WithCancel(context.Background())
	procCtx, stopProc := context.WithCancel(context.Background())
	budget := s.budget
	s.mu.Lock()
	s.group, s.addrs = g, addrs
	s.stopRead, s.stopProc = stopRead, stopProc
	s.limit = s.batch.Limit(p)
	s.mu.Unlock()
	s.counters.Started()
	for _, ln := range lns {
		port := ln.Addr().(*net.TCPAddr).Port
		s.env.Log().Info(s.kind+" source listening", "source", s.env.Name, "addr", ln.Addr().String(), "tls", tcfg != nil)
		g.Serve(ln, func(c *listener.Conn) {
			var nc net.Conn = c
			if tcfg != nil {
				// A failed handshake is counted (TLSHandshakeFailCount) and
				// told there, throttled, like every other refusal.
				tc, err := listener.HandshakeTLS(readCtx, c, tcfg, s.rejects)
				if err != nil {
					return
				}
				nc = tc
			}
			h := s.newConn(nc, c, port, p, budget)
			defer h.Release()
			h.serve(readCtx, procCtx)
		})
	}
	return nil
}

// Stop closes the listeners, stops reading every connection, lets the
// messages already read reach the channel (for as long as ctx allows) and
// waits for every goroutine. A partial message still being received is lost,
// as in Flume: syslog over TCP has no acknowledgement to withhold.
func (s *tcpServer) Stop(ctx context.Context) error {
	s.mu.Lock()
	g, stopRead, stopProc := s.group, s.stopRead, s.stopProc
	s.group, s.addrs = nil, nil
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	defer s.counters.Stopped()
	defer s.retry.Stop()
	defer stopProc()
	stopRead()
	err := g.Shutdown(ctx)
	if err != nil {
		stopProc()
		err = fmt.Errorf("%s %s: stop: %w", s.kind, s.env.Name, err)
	}
	return err
}

// conn serves one connection. Unread input is Buf[R:W] of its read buffer;
// bodies are copied out of it into a slab per batch, since the pipeline
// owns them after a put.
type conn struct {
	*listener.ReadBuffer
	s      *tcpServer
	c      net.Conn       // what is read: lc, or TLS over it
	lc     *listener.Conn // the connection the group tracks
	p      flow.Processor
	port   int
	skip   int    // bytes of an oversized octet-counted frame still to discard
	ip     string // clientIPHeader value
	host   string // clientHostnameHeader value
	events []event.Event
	bad    badCounts // what the last collect flagged
}

// badCounts are the frames of one batch that are flagged or dropped.
type badCounts struct {
	oversize, invalid, unreadable, truncated int
}

func (s *tcpServer) newConn(c net.Conn, lc *listener.Conn, port int, p flow.Processor, b *listener.Budget) *conn {
	h := &conn{
		ReadBuffer: listener.NewReadBuffer(lc, s.bigBufs, b),
		s:          s,
		c:          c,
		lc:         lc,
		p:          p,
		port:       port,
		events:     make([]event.Event, 0, min(s.limit, flow.DefaultBatchSize)),
	}
	if s.ipHeader != "" || s.hostHeader != "" {
		ap := remoteAddrPort(lc.RemoteAddr())
		h.ip = javaHostAddress(ap.Addr())
		if s.hostHeader != "" {
			h.host = lookupHostname(ap.Addr())
		}
	}
	return h
}

func remoteAddrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// lookupHostname resolves ip as Java's InetSocketAddress.getHostName does:
// the reverse name when it maps back to ip, else ip's text.
func lookupHostname(ip netip.Addr) string {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	lit := javaHostAddress(ip)
	names, err := net.DefaultResolver.LookupAddr(ctx, ip.Unmap().String())
	if err != nil || len(names) == 0 {
		return lit
	}
	name := names[0]
	if n := len(name); n > 1 && name[n-1] == '.' {
		name = name[:n-1]
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return lit
	}
	for _, a := range addrs {
		if a.Unmap() == ip.Unmap() {
			return name
		}
	}
	return lit
}

func (h *conn) serve(readCtx, procCtx context.Context) {
	log := h.s.env.Log()
	remote := h.lc.Peer()
	need := h.s.framer.maxSize + 2*maxCountDigits + 2 // the longest frame, with its count
	for {
		if !h.Prepare(readCtx, need) {
			// A message in progress needs the large buffer and the budget
			// has none for it.
			if readCtx.Err() == nil {
				h.s.rejects.Add(reasonOverBudget, remote, "maxBytesInFlight", h.s.maxInFlight, "message_bytes", h.W)
			}
			return
		}
		_, rerr := h.Fill(h.c)
		// At the end of the stream what is left is a final message, unless
		// the source is stopping: then only complete messages go in.
		eof := rerr != nil && readCtx.Err() == nil && h.lc.ClosedBy() == ""
		if err := h.drain(procCtx, eof); err != nil {
			log.Debug(h.s.kind+" connection ended", "source", h.s.env.Name, "remote", remote, "err", err)
			return
		}
		if rerr != nil {
			if readCtx.Err() == nil && !errors.Is(rerr, net.ErrClosed) && rerr.Error() != "EOF" {
				log.Debug(h.s.kind+" connection read failed", "source", h.s.env.Name, "remote", remote, "err", rerr)
			}
			return
		}
	}
}

// drain puts every message buf holds in batches of at most the limit: a
// batch is cut when no further complete message is buffered or has arrived
// (flow.Batching).
func (h *conn) drain(ctx context.Context, eof bool) error {
	put := false
	defer func() {
		switch {
		case h.R == h.W && h.skip == 0:
			h.lc.Idle()
		case put:
			h.lc.Receiving() // the next message has begun: its own clock
		}
	}()
	for {
		h.discard()
		if h.skip > 0 || h.R == h.W {
			return nil
		}
		end, skip, n, readFails := h.collect(eof)
		if n > 0 && n < h.s.limit && skip == 0 && !eof && h.c == net.Conn(h.lc) && h.FillNow() {
			// Input that arrived meanwhile joins this batch; the unread
			// bytes may have moved even if none came: collect again.
			continue
		}
		h.report()
		c := h.s.counters
		c.EventReadFail.Add(int64(readFails))
		if n == 0 {
			h.R, h.skip = end, skip
			if h.R == h.W {
				h.R, h.W = 0, 0
			}
			return nil
		}
		c.EventReceived.Add(int64(n))
		h.lc.Busy()
		put = true
		committed, err := h.put(ctx, eof)
		if err != nil {
			return err
		}
		if committed {
			c.EventAccepted.Add(int64(n))
		}
		h.R, h.skip = end, skip
	}
}

// report logs and counts what the last collect flagged (once per batch: a
// retry collects the same frames again).
func (h *conn) report() {
	b := h.bad
	if b == (badCounts{}) {
		return
	}
	peer := h.lc.Peer()
	r := h.s.rejects
	if b.oversize > 0 {
		r.AddN(reasonOversize, int64(b.oversize), peer, "eventSize", h.s.framer.maxSize)
	}
	if b.invalid > 0 {
		r.AddN(reasonInvalid, int64(b.invalid), peer)
	}
	if b.unreadable > 0 {
		r.AddN(reasonUnreadable, int64(b.unreadable), peer)
	}
	if b.truncated > 0 {
		r.AddN(reasonTruncated, int64(b.truncated), peer)
	}
}

// discard drops the bytes of an oversized octet-counted frame.
func (h *conn) discard() {
	if h.skip > 0 {
		d := min(h.skip, h.W-h.R)
		h.R += d
		h.skip -= d
	}
}

// collect builds h.events from the messages at buf[r:]: it returns where
// the batch ends, the bytes still to skip after it, how many events it made
// and how many frames count as read failures. It reads only buf, so a retry
// can build the same batch again.
func (h *conn) collect(eof bool) (end, skip, n, readFails int) {
	h.events = h.events[:0]
	h.bad = badCounts{}
	end = h.R
	var slab []byte
	for len(h.events) < h.s.limit && end < h.W {
		fr, used, sk, ok := h.s.framer.next(h.Buf[end:h.W], eof)
		end += used
		if !ok {
			break
		}
		if slab == nil {
			slab = make([]byte, 0, h.W-h.R+64*min(h.s.limit, 1000))
		}
		ev, out, keep, rf := h.s.build(fr, h.port, slab)
		slab = out
		if rf {
			readFails++
		}
		switch {
		case fr.truncated:
			h.bad.truncated++
		case fr.incomplete || sk > 0:
			h.bad.oversize++
		case !keep:
			h.bad.unreadable++
		case rf:
			h.bad.invalid++
		}
		if keep {
			ev.ReceivedAt = event.Now()
			if h.s.ipHeader != "" {
				ev.Headers.Set(h.s.ipHeader, h.ip)
			}
			if h.s.hostHeader != "" {
				ev.Headers.Set(h.s.hostHeader, h.host)
			}
			h.events = append(h.events, ev)
		}
		if sk > 0 {
			d := min(sk, h.W-end)
			end += d
			skip = sk - d
			if skip > 0 {
				break
			}
		}
	}
	return end, skip, len(h.events), readFails
}

// put commits h.events, retrying while the channel is full; meanwhile the
// connection is not read, which pushes back on the sender through TCP. A
// failed Process may have changed the events (interceptors), so a retry
// builds them again from the buffer, which nothing touches meanwhile.
func (h *conn) put(ctx context.Context, eof bool) (committed bool, err error) {
	n := len(h.events)
	again := false
	err = h.s.retry.Put(ctx, h.p, func() []event.Event {
		if again {
			h.collect(eof)
		}
		again = true
		return h.events
	}, func() []any { return []any{"remote", h.lc.Peer()} })
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, flow.ErrStopping):
		// Nothing will be put any more: stop reading and close, so the
		// sender keeps what it has not sent yet.
		h.s.rejects.AddN(reasonStopping, int64(n), h.lc.Peer())
		return false, err
	default:
		// Not a matter of space: Flume drops the events and logs it.
		h.s.rejects.Add(reasonPutFailed, h.lc.Peer(), "events", n, "err", err)
		return false, nil
	}
}
