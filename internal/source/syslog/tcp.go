package syslog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

const (
	minReadBuffer = 64 << 10
	// Retry pacing while the channel is full; the channel itself already
	// waited its keep-alive before refusing.
	minFullBackoff = 10 * time.Millisecond
	maxFullBackoff = 500 * time.Millisecond
	lookupTimeout  = 2 * time.Second
)

// buildFunc turns a frame into an event appended to the batch, with its
// body in slab. It reports whether the frame counts as a read failure.
type buildFunc func(fr frame, port int, slab []byte) (ev event.Event, out []byte, keep, readFail bool)

// tcpServer is what syslogtcp and multiport_syslogtcp share: listeners, one
// goroutine per connection, framing, batching and backpressure.
type tcpServer struct {
	env        flow.Env
	kind       string // for messages: "syslogtcp", "multiport_syslogtcp"
	host       string
	ports      []int
	framer     framer
	batchSize  int
	ipHeader   string
	hostHeader string
	portHeader string
	tls        tlsconf.Settings
	build      buildFunc
	counters   *metrics.SourceCounters

	mu       sync.Mutex // guards the fields below
	lns      []net.Listener
	conns    map[net.Conn]struct{}
	stopRead context.CancelFunc // ends reading
	stopProc context.CancelFunc // ends puts still waiting for the channel
	started  bool
	wg       sync.WaitGroup
}

// BatchSize reports the most events put in one transaction.
func (s *tcpServer) BatchSize() int { return s.batchSize }

// Addrs returns the addresses the source listens on, once started.
func (s *tcpServer) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []net.Addr
	for _, ln := range s.lns {
		out = append(out, ln.Addr())
	}
	return out
}

// Start listens on every port and serves each connection in its own goroutine.
func (s *tcpServer) Start(_ context.Context, p flow.Processor) error {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		return fmt.Errorf("%s %s: already started", s.kind, s.env.Name)
	}
	tcfg, err := s.tls.ServerConfig()
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.kind, s.env.Name, err)
	}
	var lns []net.Listener
	for _, port := range s.ports {
		addr := net.JoinHostPort(s.host, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("%s %s: listen %s: %w", s.kind, s.env.Name, addr, err)
		}
		lns = append(lns, ln)
	}
	readCtx, stopRead := context.WithCancel(context.Background())
	procCtx, stopProc := context.WithCancel(context.Background())
	s.mu.Lock()
	s.lns, s.conns, s.started = lns, map[net.Conn]struct{}{}, true
	s.stopRead, s.stopProc = stopRead, stopProc
	s.mu.Unlock()
	s.counters.Started()
	for i, ln := range lns {
		port := ln.Addr().(*net.TCPAddr).Port
		s.env.Log().Info(s.kind+" source listening", "source", s.env.Name, "addr", ln.Addr().String(), "tls", tcfg != nil)
		if tcfg != nil {
			ln = tls.NewListener(ln, tcfg)
		}
		s.wg.Add(1)
		go s.accept(readCtx, procCtx, ln, s.ports[i], port, p)
	}
	return nil
}

// Stop closes the listeners, stops reading every connection, lets the
// messages already read reach the channel (for as long as ctx allows) and
// waits for every goroutine. A partial message still being received is lost,
// as in Flume: syslog over TCP has no acknowledgement to withhold.
func (s *tcpServer) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.lns == nil {
		s.mu.Unlock()
		return nil
	}
	for _, ln := range s.lns {
		ln.Close()
	}
	s.lns = nil
	s.stopRead()
	now := time.Now()
	for c := range s.conns {
		c.SetReadDeadline(now)
	}
	stopProc := s.stopProc
	s.mu.Unlock()
	defer s.counters.Stopped()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		stopProc()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		<-done
		err = fmt.Errorf("%s %s: stop: %w", s.kind, s.env.Name, ctx.Err())
	}
	stopProc()
	s.mu.Lock()
	s.started = false
	s.mu.Unlock()
	return err
}

func (s *tcpServer) accept(readCtx, procCtx context.Context, ln net.Listener, cfgPort, port int, p flow.Processor) {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if readCtx.Err() != nil {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.env.Log().Warn(s.kind+" source could not accept a connection", "source", s.env.Name, "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-readCtx.Done():
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
			h := s.newConn(c, port, p)
			h.serve(readCtx, procCtx)
		}()
	}
}

func (s *tcpServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lns == nil {
		return false
	}
	s.conns[c] = struct{}{}
	s.counters.OpenConnection.Store(int64(len(s.conns)))
	return true
}

func (s *tcpServer) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.counters.OpenConnection.Store(int64(len(s.conns)))
	s.mu.Unlock()
}

// conn serves one connection. Unread input is buf[r:w]; bodies are copied
// out of it into a slab per batch, since the pipeline owns them after a put.
type conn struct {
	s      *tcpServer
	c      net.Conn
	p      flow.Processor
	port   int
	buf    []byte
	r, w   int
	skip   int    // bytes of an oversized octet-counted frame still to discard
	ip     string // clientIPHeader value
	host   string // clientHostnameHeader value
	events []event.Event
}

func (s *tcpServer) newConn(c net.Conn, port int, p flow.Processor) *conn {
	h := &conn{
		s:      s,
		c:      c,
		p:      p,
		port:   port,
		buf:    make([]byte, max(minReadBuffer, s.framer.maxSize+2*maxCountDigits)),
		events: make([]event.Event, 0, s.batchSize),
	}
	if s.ipHeader != "" || s.hostHeader != "" {
		ap := remoteAddrPort(c.RemoteAddr())
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
	remote := h.c.RemoteAddr().String()
	for {
		if h.r > 0 && len(h.buf)-h.w < h.s.framer.maxSize+2*maxCountDigits {
			h.w = copy(h.buf, h.buf[h.r:h.w])
			h.r = 0
		}
		n, rerr := h.c.Read(h.buf[h.w:])
		h.w += n
		// At the end of the stream what is left is a final message, unless
		// the source is stopping: then only complete messages go in.
		eof := rerr != nil && readCtx.Err() == nil
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

// drain puts every message buf holds in batches of at most batchSize: a
// batch is cut when no further complete message is buffered.
func (h *conn) drain(ctx context.Context, eof bool) error {
	for {
		h.discard()
		if h.skip > 0 || h.r == h.w {
			return nil
		}
		end, skip, n, readFails := h.collect(eof)
		c := h.s.counters
		c.EventReadFail.Add(int64(readFails))
		if n == 0 {
			h.r, h.skip = end, skip
			if h.r == h.w {
				h.r, h.w = 0, 0
			}
			return nil
		}
		c.EventReceived.Add(int64(n))
		committed, err := h.put(ctx, eof)
		if err != nil {
			return err
		}
		if committed {
			c.EventAccepted.Add(int64(n))
		}
		h.r, h.skip = end, skip
	}
}

// discard drops the bytes of an oversized octet-counted frame.
func (h *conn) discard() {
	if h.skip > 0 {
		d := min(h.skip, h.w-h.r)
		h.r += d
		h.skip -= d
	}
}

// collect builds h.events from the messages at buf[r:]: it returns where
// the batch ends, the bytes still to skip after it, how many events it made
// and how many frames count as read failures. It reads only buf, so a retry
// can build the same batch again.
func (h *conn) collect(eof bool) (end, skip, n, readFails int) {
	h.events = h.events[:0]
	end = h.r
	var slab []byte
	for len(h.events) < h.s.batchSize && end < h.w {
		fr, used, sk, ok := h.s.framer.next(h.buf[end:h.w], eof)
		end += used
		if !ok {
			break
		}
		if slab == nil {
			slab = make([]byte, 0, h.w-h.r+64*h.s.batchSize)
		}
		ev, out, keep, rf := h.s.build(fr, h.port, slab)
		slab = out
		if rf {
			readFails++
		}
		if keep {
			ev.ReceivedAt = event.Now()
			if h.s.ipHeader != "" {
				ev.Headers[h.s.ipHeader] = h.ip
			}
			if h.s.hostHeader != "" {
				ev.Headers[h.s.hostHeader] = h.host
			}
			h.events = append(h.events, ev)
		}
		if sk > 0 {
			d := min(sk, h.w-end)
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
	c := h.s.counters
	backoff := time.Duration(0)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			h.collect(eof)
		}
		err := h.p.Process(ctx, h.events)
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		c.ChannelWriteFail.Add(1)
		if !errors.Is(err, flow.ErrChannelFull) {
			// Not a matter of space: Flume drops the events and logs it.
			h.s.env.Log().Error(h.s.kind+" source dropped events it could not put", "source", h.s.env.Name, "events", len(h.events), "err", err)
			return false, nil
		}
		backoff = min(max(2*backoff, minFullBackoff), maxFullBackoff)
		if backoff == maxFullBackoff {
			h.s.env.Log().Debug(h.s.kind+" source waiting for channel space", "source", h.s.env.Name, "events", len(h.events))
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		}
	}
}
