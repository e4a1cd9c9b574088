// Package thriftsource is Flume's Thrift source ("thrift",
// org.apache.flume.source.ThriftSource): it receives events from Flume
// agents' Thrift sinks and from applications using Flume's Thrift RPC
// (append and appendBatch of ThriftSourceProtocol, see internal/thriftrpc),
// framed, in the compact or binary protocol, optionally over TLS, and puts
// them into its channels. Each call is answered OK only after every required
// channel committed its events; FAILED when the channels were full and ERROR
// when they refused the events otherwise, so the sender keeps them and
// retries.
//
// Each connection is served by its own goroutine, one call after another;
// whatever one connection sends (malformed data, a frame over
// max-frame-size, a stall in the middle of a frame) closes only that
// connection, with a logged reason. Memory per connection is bounded by
// max-frame-size, and the number of connections by max-connections.
package thriftsource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/thriftrpc"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Defaults of sluice's own properties.
const (
	DefaultMaxConnections = 1024
	tlsHandshakeTimeout   = 10 * time.Second
)

// Source is the Thrift source. Build it with New.
type Source struct {
	env      flow.Env
	guard    string // a connection goroutine's name for panics.Guard
	addr     string
	srv      thriftrpc.Server
	tls      tlsconf.Settings
	maxConns int
	counters *metrics.SourceCounters
	logs     *logthrottle.Throttle
	rejects  *listener.Rejects   // failed TLS handshakes
	puts     *logthrottle.Streak // refused puts
	tcfg     *tls.Config         // nil: plain

	proc     flow.Processor
	hardCtx  context.Context // ends in-flight Process calls (Stop timed out)
	hardStop context.CancelFunc

	mu     sync.Mutex
	ln     net.Listener
	cancel context.CancelFunc // stops intake
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New builds a Thrift source from its properties: bind and port (required),
// protocol (compact | binary, Flume's default compact), threads (accepted,
// unused: each connection has its own goroutine), ssl with keystore,
// keystore-password, keystore-type (PKCS12 | PEM), include-/exclude-protocols,
// include-/exclude-cipher-suites; kerberos (only false: SASL/GSSAPI is not
// provided), agent-principal and agent-keytab (read, unused without
// kerberos); and sluice's max-connections (1024), max-frame-size (16384000
// bytes, Thrift's default: the largest request accepted), max-batch-events
// (100000) and stall-timeout (30000 ms, how long a request may stop arriving
// part way).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env, guard: "thrift source " + env.Name + ": connection", logs: logthrottle.New(10*time.Second, 3)}
	bind := p.Required("bind")
	s.addr = net.JoinHostPort(bind, strconv.Itoa(listener.ReadPort(p, "port")))
	proto, err := thriftrpc.ParseProtocol(p.String("protocol", "compact"))
	if err != nil {
		p.Errorf("protocol", "%v; Flume's thrift source speaks compact (the default) or binary", err)
	}
	s.srv.Protocol = proto
	p.Int("threads", 0)
	s.tls = tlsconf.ReadServer(p)
	readKerberos(p, "agent-principal", "agent-keytab")
	s.maxConns = p.IntRange("max-connections", DefaultMaxConnections, 1, math.MaxInt32)
	s.srv.MaxFrameSize = p.IntRange("max-frame-size", thriftrpc.DefaultMaxFrameSize, 1024, math.MaxInt32)
	s.srv.MaxBatchEvents = p.IntRange("max-batch-events", thriftrpc.DefaultMaxBatchEvents, 1, math.MaxInt32)
	s.srv.StallTimeout = time.Duration(p.IntRange("stall-timeout", int(thriftrpc.DefaultStallTimeout/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	s.srv.Handler = handler{s}

	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.rejects = listener.NewRejects(env.Name, env.Log(), s.counters.Set, listener.TLSReasons...)
	s.puts = flow.PutStreak(env.Log(), "thrift source: could not put events; the sender keeps them and retries", "thrift source: puts events again")
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// readKerberos reads Flume's kerberos switch and its principal and keytab
// properties, and refuses kerberos = true.
func readKerberos(p *config.Props, keys ...string) {
	for _, k := range keys {
		p.String(k, "")
	}
	if p.Bool("kerberos", false) {
		p.Errorf("kerberos", "%s", thriftrpc.KerberosRefused)
	}
}

// Addr is the address the source listens on once started (with the port
// the system chose when port is 0), or nil.
func (s *Source) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Start loads the TLS key material, listens and accepts connections in a
// goroutine that Stop ends.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return fmt.Errorf("thrift source %s: already started", s.env.Name)
	}
	tcfg, err := s.tls.ServerConfig()
	if err != nil {
		return fmt.Errorf("thrift source %s: %w", s.env.Name, err)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("thrift source %s: listen %s: %w", s.env.Name, s.addr, err)
	}
	s.ln, s.proc, s.tcfg = ln, p, tcfg
	s.conns = map[net.Conn]struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.hardCtx, s.hardStop = context.WithCancel(context.Background())
	s.counters.Started()
	s.wg.Add(1)
	panics.Go("thrift source "+s.env.Name+": accept", func() { s.accept(ctx, ln) })
	s.env.Log().Info("thrift source listening", "source", s.env.Name, "addr", ln.Addr().String(),
		"protocol", s.srv.Protocol.String(), "ssl", tcfg != nil)
	return nil
}

// Stop closes the listener, lets every connection finish the call it is
// handling (replying to it), then closes the connections. If ctx ends first,
// calls still putting events are cancelled (their senders get ERROR or a
// closed connection and resend).
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	ln, cancel := s.ln, s.cancel
	s.ln = nil
	s.mu.Unlock()
	if ln == nil {
		return nil
	}
	defer s.counters.Stopped()
	defer s.rejects.Flush()
	defer s.puts.Stop()
	defer s.logs.Flush() // after the connections are closed, before "stopped"
	cancel()
	_ = ln.Close()
	done := make(chan struct{})
	panics.Go("thrift source "+s.env.Name+": stop", func() { s.wg.Wait(); close(done) })
	select {
	case <-done:
		s.hardStop()
		return nil
	case <-ctx.Done():
	}
	s.hardStop()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	<-done
	return fmt.Errorf("thrift source %s: stop: %w", s.env.Name, ctx.Err())
}

func (s *Source) accept(ctx context.Context, ln net.Listener) {
	defer s.wg.Done()
	backoff := time.Duration(0)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait and go on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.warn("thrift source: accept failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		s.mu.Lock()
		if len(s.conns) >= s.maxConns {
			s.mu.Unlock()
			s.warn("thrift source: refusing a connection: max-connections reached", "peer", c.RemoteAddr().String(), "max-connections", s.maxConns)
			_ = c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.counters.OpenConnection.Store(int64(len(s.conns)))
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(ctx, c) // guarded by serve
	}
}

func (s *Source) serve(ctx context.Context, c net.Conn) {
	defer panics.Guard(s.guard)
	defer s.wg.Done()
	defer func() {
		_ = c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.counters.OpenConnection.Store(int64(len(s.conns)))
		s.mu.Unlock()
	}()
	log := s.env.Log()
	peer := c.RemoteAddr().String()
	nc := net.Conn(c) // c stays the key of s.conns, closed by the defer
	if s.tcfg != nil {
		// A failed handshake is counted (TLSHandshakeFailCount) and told
		// there, throttled, as the listener sources do.
		tc, err := listener.HandshakeTLSTimeout(ctx, c, s.tcfg, s.rejects, tlsHandshakeTimeout)
		if err != nil {
			return
		}
		defer func() { _ = tc.Close() }() // before c: it says close_notify
		nc = tc
	}
	log.Debug("thrift source: connection opened", "source", s.env.Name, "peer", peer)
	err := s.srv.ServeConn(ctx, nc)
	switch {
	case err == nil || ctx.Err() != nil:
		log.Debug("thrift source: connection closed", "source", s.env.Name, "peer", peer)
	case thriftrpc.IsPeerError(err):
		s.counters.EventReadFail.Add(1)
		s.warn("thrift source: closing a connection that sent bad data", "peer", peer, "protocol", s.srv.Protocol.String(), "err", err)
	default:
		s.warn("thrift source: connection failed", "peer", peer, "err", err)
	}
}

// warn logs through the throttle, keyed by msg, so a misbehaving peer
// cannot flood the log.
func (s *Source) warn(msg string, args ...any) {
	args = append(args, "source", s.env.Name)
	s.logs.Log(s.env.Log(), slog.LevelWarn, msg, msg, args...)
}

// handler turns calls into Process calls and counts them as Flume does.
type handler struct{ s *Source }

func (h handler) Append(_ context.Context, e event.Event) thriftrpc.Status {
	c := h.s.counters
	c.AppendReceived.Add(1)
	c.EventReceived.Add(1)
	if st := h.process([]event.Event{e}); st != thriftrpc.OK {
		return st
	}
	c.AppendAccepted.Add(1)
	c.EventAccepted.Add(1)
	return thriftrpc.OK
}

func (h handler) AppendBatch(_ context.Context, events []event.Event) thriftrpc.Status {
	c := h.s.counters
	n := int64(len(events))
	c.AppendBatchReceived.Add(1)
	c.EventReceived.Add(n)
	if st := h.process(events); st != thriftrpc.OK {
		return st
	}
	c.AppendBatchAccepted.Add(1)
	c.EventAccepted.Add(n)
	return thriftrpc.OK
}

// process puts events and returns OK once every required channel
// committed them; FAILED when a channel was full (Flume's reply to a
// ChannelException), ERROR for any other refusal.
func (h handler) process(events []event.Event) thriftrpc.Status {
	if len(events) == 0 {
		return thriftrpc.OK
	}
	err := h.s.proc.Process(h.s.hardCtx, events)
	if err == nil {
		h.s.puts.Ok("source", h.s.env.Name)
		return thriftrpc.OK
	}
	h.s.counters.ChannelWriteFail.Add(1)
	st := thriftrpc.Error
	if errors.Is(err, flow.ErrChannelFull) {
		st = thriftrpc.Failed
	}
	h.s.puts.Fail(err, "source", h.s.env.Name, "events", len(events), "reply", st.String())
	return st
}
