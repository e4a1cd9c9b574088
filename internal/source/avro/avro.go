// Package avrosource is Flume's Avro source ("avro"): it receives events
// from Flume agents' Avro sinks and Flume's RPC clients (append and
// appendBatch of Flume's AvroSourceProtocol, see internal/avrorpc) and puts
// them into its channels. Each call is answered OK only after every required
// channel committed its events, and FAILED when they could not be put (a
// full channel), so the sender keeps them and retries.
//
// Each connection is served by its own goroutine, in order, as Flume's Netty
// server does; whatever one connection sends (malformed data, absurd
// lengths, a stall in the middle of a frame) closes only that connection,
// with a logged reason. Memory per connection is bounded by
// max-message-bytes, and the number of connections by max-connections.
package avrosource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Defaults of sluice's own properties.
const (
	DefaultMaxConnections = 1024
	tlsHandshakeTimeout   = 10 * time.Second
	logEvery              = 10 * time.Second
)

// Source is the Avro source. Build it with New.
type Source struct {
	env      flow.Env
	addr     string
	srv      avrorpc.Server
	tls      tlsconf.Settings
	rules    []ipRule
	maxConns int
	counters *metrics.SourceCounters
	// receivedAtHeader names the header an upstream avro sink put the
	// first tier's receive time in (see receivedat.go); "" ignores it.
	receivedAtHeader string

	proc     flow.Processor
	hardCtx  context.Context // ends in-flight Process calls (Stop timed out)
	hardStop context.CancelFunc

	mu     sync.Mutex
	ln     net.Listener
	cancel context.CancelFunc // stops intake
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	open   atomic.Int64

	logMu sync.Mutex
	logs  map[string]*throttle // by message
}

type throttle struct {
	last       time.Time
	suppressed int
}

// New builds an Avro source from its properties: bind and port (required),
// compression-type (none | deflate), threads (accepted, unused: each
// connection has its own goroutine), ssl with keystore, keystore-password,
// keystore-type (PKCS12 | PEM), include-/exclude-protocols,
// include-/exclude-cipher-suites, ipFilter (false) and ipFilterRules; and
// sluice's max-connections (1024), max-message-bytes (64 MiB, the largest
// request accepted), max-batch-events (100000) and stall-timeout (30000 ms,
// how long a request may stop arriving part way) and receivedAtHeader
// (unset: the header whose Unix-nanosecond value, when an event has it,
// replaces the time of receipt, so latency spans tiers).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	bind := p.Required("bind")
	port := 0
	if p.Has("port") {
		port = p.IntRange("port", 0, 0, 65535)
	} else {
		p.Required("port")
	}
	s.addr = net.JoinHostPort(bind, strconv.Itoa(port))
	s.srv.Deflate = p.Enum("compression-type", "none", "none", "deflate") == "deflate"
	p.Int("threads", 0)
	s.tls = tlsconf.ReadServer(p)
	if p.Bool("ipFilter", false) {
		text := p.String("ipFilterRules", "")
		if text == "" {
			p.Errorf("ipFilterRules", "ipFilter is true but no rules are set; set ipFilterRules, such as allow:ip:127.*,deny:ip:*")
		} else if rules, err := parseIPRules(text); err != nil {
			p.Errorf("ipFilterRules", "%v", err)
		} else {
			s.rules = rules
		}
	} else {
		p.String("ipFilterRules", "")
	}
	s.maxConns = p.IntRange("max-connections", DefaultMaxConnections, 1, math.MaxInt32)
	s.srv.Limits.MaxMessageBytes = p.IntRange("max-message-bytes", avrorpc.DefaultMaxMessageBytes, 1024, math.MaxInt32)
	s.srv.Limits.MaxBatchEvents = p.IntRange("max-batch-events", avrorpc.DefaultMaxBatchEvents, 1, math.MaxInt32)
	s.srv.StallTimeout = time.Duration(p.IntRange("stall-timeout", int(avrorpc.DefaultStallTimeout/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	s.srv.Handler = handler{s}
	s.receivedAtHeader = p.String("receivedAtHeader", "")

	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(s.counters.Set)
	return s, nil
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
		return fmt.Errorf("avro source %s: already started", s.env.Name)
	}
	tcfg, err := s.tls.ServerConfig()
	if err != nil {
		return fmt.Errorf("avro source %s: %w", s.env.Name, err)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("avro source %s: listen %s: %w", s.env.Name, s.addr, err)
	}
	if tcfg != nil {
		ln = tls.NewListener(ln, tcfg)
	}
	s.ln, s.proc = ln, p
	s.conns = map[net.Conn]struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.hardCtx, s.hardStop = context.WithCancel(context.Background())
	s.counters.Started()
	s.open.Store(0)
	s.wg.Add(1)
	go s.accept(ctx, ln)
	s.env.Log().Info("avro source listening", "source", s.env.Name, "addr", ln.Addr().String(),
		"compression", map[bool]string{true: "deflate", false: "none"}[s.srv.Deflate], "ssl", tcfg != nil)
	return nil
}

// Stop closes the listener, lets every connection finish the call it is
// handling (replying to it), then closes the connections. If ctx ends first,
// calls still putting events are cancelled (their senders get FAILED or a
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
	cancel()
	_ = ln.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
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
	return fmt.Errorf("avro source %s: stop: %w", s.env.Name, ctx.Err())
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
			s.warn("avro source: accept failed", "err", err, "retry_in", backoff)
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
			s.warn("avro source: refusing a connection: max-connections reached", "peer", c.RemoteAddr().String(), "max-connections", s.maxConns)
			_ = c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.counters.OpenConnection.Store(int64(len(s.conns)))
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(ctx, c)
	}
}

func (s *Source) serve(ctx context.Context, c net.Conn) {
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
	if len(s.rules) > 0 {
		if ok, rule := allowed(ctx, s.rules, c.RemoteAddr()); !ok {
			s.warn("avro source: connection denied by ipFilterRules", "peer", peer, "rule", rule)
			return
		}
	}
	if tc, ok := c.(*tls.Conn); ok {
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			s.warn("avro source: TLS handshake failed", "peer", peer, "err", err)
			return
		}
	}
	log.Debug("avro source: connection opened", "source", s.env.Name, "peer", peer)
	err := s.srv.ServeConn(ctx, c)
	switch {
	case err == nil || ctx.Err() != nil:
		log.Debug("avro source: connection closed", "source", s.env.Name, "peer", peer)
	case avrorpc.IsPeerError(err):
		s.counters.EventReadFail.Add(1)
		s.warn("avro source: closing a connection that sent bad data", "peer", peer, "err", err)
	default:
		s.warn("avro source: connection failed", "peer", peer, "err", err)
	}
}

// warn logs at most one warning with the same msg per logEvery, counting
// the rest, so a misbehaving peer cannot flood the log.
func (s *Source) warn(msg string, args ...any) {
	s.logMu.Lock()
	if s.logs == nil {
		s.logs = map[string]*throttle{}
	}
	t := s.logs[msg]
	if t == nil {
		t = &throttle{}
		s.logs[msg] = t
	}
	now := time.Now()
	if now.Sub(t.last) < logEvery {
		t.suppressed++
		s.logMu.Unlock()
		return
	}
	n := t.suppressed
	t.last, t.suppressed = now, 0
	s.logMu.Unlock()
	args = append(args, "source", s.env.Name)
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	s.env.Log().Warn(msg, args...)
}

// handler turns calls into Process calls and counts them as Flume does.
type handler struct{ s *Source }

func (h handler) Append(_ context.Context, e event.Event) avrorpc.Status {
	c := h.s.counters
	c.AppendReceived.Add(1)
	c.EventReceived.Add(1)
	e.ReceivedAt = event.Now()
	events := []event.Event{e}
	h.s.receivedAt(events)
	if !h.process(events) {
		return avrorpc.Failed
	}
	c.AppendAccepted.Add(1)
	c.EventAccepted.Add(1)
	return avrorpc.OK
}

func (h handler) AppendBatch(_ context.Context, events []event.Event) avrorpc.Status {
	c := h.s.counters
	n := int64(len(events))
	c.AppendBatchReceived.Add(1)
	c.EventReceived.Add(n)
	now := event.Now()
	for i := range events {
		events[i].ReceivedAt = now
	}
	h.s.receivedAt(events)
	if !h.process(events) {
		return avrorpc.Failed
	}
	c.AppendBatchAccepted.Add(1)
	c.EventAccepted.Add(n)
	return avrorpc.OK
}

func (h handler) process(events []event.Event) bool {
	err := h.s.proc.Process(h.s.hardCtx, events)
	if err == nil {
		return true
	}
	h.s.counters.ChannelWriteFail.Add(1)
	h.s.warn("avro source: could not put events; replying FAILED so the sender retries", "events", len(events), "err", err)
	return false
}
