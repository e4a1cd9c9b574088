// Package avrosource is Flume's Avro source ("avro"): it receives events
// from Flume agents' Avro sinks and Flume's RPC clients (append and
// appendBatch of Flume's AvroSourceProtocol, see internal/avrorpc) and puts
// them into its channels. Each call is answered OK only after every required
// channel committed its events, and FAILED when they could not be put (a
// full channel, or the agent stopping), so the sender keeps them and retries.
//
// Each connection is served by its own goroutine, in order, as Flume's Netty
// server does; whatever one connection sends (malformed data, absurd
// lengths, a stall in the middle of a frame) closes only that connection,
// with a logged reason (throttled) and a counter. What all connections
// together can make the source hold is bounded: max-message-bytes per
// request, max-bytes-in-flight over every request being read and decoded,
// max-connections with the longest-idle connection closed to admit a new
// one, and idle and progress timeouts (internal/listener).
package avrosource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Defaults of sluice's own properties.
const (
	DefaultMaxConnections = listener.DefaultMaxConns
	// DefaultMaxMessageBytes is the largest request the source reads: a
	// batch of 100 events of 300 KiB, or 10,000 of 3 KiB.
	DefaultMaxMessageBytes = 32 << 20
	// DefaultMaxInFlight bounds the bytes every request being read and
	// decoded holds at once. A request's buffer grows by doubling, so
	// reading one of max-message-bytes takes 1.5 times that at the last
	// step: the default fits one largest request.
	DefaultMaxInFlight  = 48 << 20
	tlsHandshakeTimeout = 10 * time.Second
)

// Reasons the source refuses input or closes a connection, each logged
// (throttled) with the peer and counted in the source's metrics.
var (
	reasonBadData = listener.Reason{Counter: "BadDataCount", Level: slog.LevelWarn,
		Msg: "avro source: closing a connection that sent bad data"}
	reasonOverBudget = listener.Reason{Counter: "OverBudgetCount", Level: slog.LevelWarn,
		Msg: "avro source: closing a connection: no memory left for its request (max-bytes-in-flight reached); the sender will retry"}
	reasonDenied = listener.Reason{Counter: "DeniedConnectionCount", Level: slog.LevelWarn,
		Msg: "avro source: connection denied by ipFilterRules"}
	reasonConnFailed = listener.Reason{Level: slog.LevelWarn,
		Msg: "avro source: connection failed"}
	reasonPutFailed = listener.Reason{Level: slog.LevelWarn,
		Msg:       "avro source: could not put events; replying FAILED so the sender retries",
		Recovered: "avro source: puts events again"}
	reasonStopping = listener.Reason{Level: slog.LevelInfo,
		Msg: "avro source: the agent is stopping; replying FAILED so the sender retries elsewhere or later"}
)

// Source is the Avro source. Build it with New.
type Source struct {
	env         flow.Env
	addr        string
	srv         avrorpc.Server
	tls         tlsconf.Settings
	rules       []ipRule
	hygiene     listener.Config
	maxInFlight int64
	budget      *listener.Budget // the bytes in flight allowed; what it holds is BytesInFlight
	counters    *metrics.SourceCounters
	rejects     *listener.Rejects
	// receivedAtHeader names the header an upstream avro sink put the
	// first tier's receive time in (see receivedat.go); "" ignores it.
	receivedAtHeader string

	proc flow.Processor
	// puts is the ctx of every Process call: it ends when Stop's ctx does,
	// so a put still waiting for channel space gives up and its sender is
	// answered FAILED. (The ctx avrorpc gives a handler outlives a stop on
	// purpose: a call in progress is finished and replied.)
	puts     context.Context
	stopPuts context.CancelFunc

	mu     sync.Mutex
	group  *listener.Group
	ln     net.Addr
	cancel context.CancelFunc // stops intake
}

// New builds an Avro source from its properties: bind and port (required),
// compression-type (none | deflate), threads (accepted, unused: each
// connection has its own goroutine), ssl with keystore, keystore-password,
// keystore-type (PKCS12 | PEM), include-/exclude-protocols,
// include-/exclude-cipher-suites, ipFilter (false) and ipFilterRules; and
// sluice's max-connections (1024), max-message-bytes (32 MiB, the largest
// request accepted), max-batch-events (100000), max-bytes-in-flight (48 MiB,
// what all requests being read and decoded may hold at once), idle-timeout
// (600000 ms), progress-timeout (10000 ms) and min-bytes-per-second (1024)
// (see internal/listener), stall-timeout (30000 ms, how long a request may
// stop arriving part way) and receivedAtHeader (unset: the header whose
// Unix-nanosecond value, when an event has it, replaces the time of receipt,
// so latency spans tiers).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	bind := p.Required("bind")
	s.addr = net.JoinHostPort(bind, strconv.Itoa(listener.ReadPort(p, "port")))
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
	s.hygiene = listener.ReadConfig(p, listener.DashNames, listener.DefaultConfig)
	s.srv.Limits.MaxMessageBytes = p.IntRange("max-message-bytes", DefaultMaxMessageBytes, 1024, math.MaxInt32)
	s.srv.Limits.MaxBatchEvents = p.IntRange("max-batch-events", avrorpc.DefaultMaxBatchEvents, 1, math.MaxInt32)
	s.maxInFlight = listener.ReadBudget(p, listener.DashNames, DefaultMaxInFlight, 1<<20)
	if need := int64(s.srv.Limits.MaxMessageBytes) * 3 / 2; s.maxInFlight < need {
		p.Errorf(listener.DashNames.MaxBytesInFlight, "%d is less than 1.5 × max-message-bytes (%d), so the largest request could never be read; raise it to %d or lower max-message-bytes",
			s.maxInFlight, s.srv.Limits.MaxMessageBytes, need)
	}
	s.srv.StallTimeout = time.Duration(p.IntRange("stall-timeout", int(avrorpc.DefaultStallTimeout/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	s.srv.Handler = handler{s}
	s.srv.Busy = func(c net.Conn) {
		if lc := listener.Of(c); lc != nil {
			lc.Busy()
		}
	}
	s.srv.Idle = func(c net.Conn) {
		if lc := listener.Of(c); lc != nil {
			lc.Idle()
		}
	}
	s.receivedAtHeader = p.String("receivedAtHeader", "")

	s.budget = listener.NewBudget(s.maxInFlight)
	s.srv.Memory = s.budget
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.rejects = listener.NewRejects(env.Name, env.Log(), s.counters.Set,
		slices.Concat([]listener.Reason{reasonBadData, reasonOverBudget, reasonDenied}, listener.ConnReasons, listener.TLSReasons)...)
	s.counters.Gauge("BytesInFlight", func() string { return strconv.FormatInt(s.inFlight(), 10) })
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// inFlight is what the source's budget holds now (its BytesInFlight).
func (s *Source) inFlight() int64 { return s.budget.InUse() }

// Addr is the address the source listens on once started (with the port
// the system chose when port is 0), or nil.
func (s *Source) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln
}

// Start loads the TLS key material, listens and accepts connections in a
// goroutine that Stop ends.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.group != nil {
		return fmt.Errorf("avro source %s: already started", s.env.Name)
	}
	tcfg, err := s.tls.ServerConfig()
	if err != nil {
		return fmt.Errorf("avro source %s: %w", s.env.Name, err)
	}
	g, lns, err := listener.Open(s.hygiene, listener.Options{Source: s.env.Name, Log: s.env.Log(), Rejects: s.rejects, Open: s.counters.OpenConnection}, s.addr)
	if err != nil {
		return fmt.Errorf("avro source %s: %w", s.env.Name, err)
	}
	ln := lns[0]
	s.group, s.ln, s.proc = g, ln.Addr(), p
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.puts, s.stopPuts = context.WithCancel(context.Background())
	s.counters.Started()
	g.Serve(ln, func(c *listener.Conn) { s.serve(ctx, c, tcfg) })
	s.env.Log().Info("avro source listening", "source", s.env.Name, "addr", ln.Addr().String(),
		"compression", map[bool]string{true: "deflate", false: "none"}[s.srv.Deflate], "ssl", tcfg != nil)
	return nil
}

// Stop closes the listener and every connection not in the middle of a
// call at once, lets a call in progress finish and reply (FAILED once the
// agent closed intake), then closes its connection. If ctx ends first,
// calls still putting events are cancelled (their senders get FAILED or a
// closed connection and resend).
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	g, cancel := s.group, s.cancel
	s.group, s.ln = nil, nil
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	defer s.counters.Stopped()
	cancel()
	unwatch := panics.AfterFunc(ctx, "avro source "+s.env.Name+": stop puts", s.stopPuts)
	err := g.Shutdown(ctx)
	unwatch()
	s.stopPuts()
	if err != nil {
		return fmt.Errorf("avro source %s: stop: %w", s.env.Name, err)
	}
	return nil
}

func (s *Source) serve(ctx context.Context, lc *listener.Conn, tcfg *tls.Config) {
	log := s.env.Log()
	peer := lc.Peer()
	if len(s.rules) > 0 {
		if ok, rule := allowed(ctx, s.rules, lc.RemoteAddr()); !ok {
			s.rejects.Add(reasonDenied, peer, "rule", rule)
			return
		}
	}
	var c net.Conn = lc
	if tcfg != nil {
		tc, err := listener.HandshakeTLSTimeout(ctx, lc, tcfg, s.rejects, tlsHandshakeTimeout) // counted and told there
		if err != nil {
			return
		}
		c = tc
	}
	log.Debug("avro source: connection opened", "source", s.env.Name, "peer", peer)
	err := s.srv.ServeConn(ctx, c)
	switch {
	case err == nil || ctx.Err() != nil || lc.ClosedBy() != "":
		log.Debug("avro source: connection closed", "source", s.env.Name, "peer", peer, "by", lc.ClosedBy())
	case errors.Is(err, avrorpc.ErrBusy):
		s.rejects.Add(reasonOverBudget, peer, "err", err, "max-bytes-in-flight", s.maxInFlight)
	case avrorpc.IsPeerError(err):
		s.counters.EventReadFail.Add(1)
		s.rejects.Add(reasonBadData, peer, "err", err)
	default:
		s.rejects.Add(reasonConnFailed, peer, "err", err)
	}
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
	err := h.s.proc.Process(h.s.puts, events)
	if err == nil {
		h.s.rejects.Ok(reasonPutFailed)
		return true
	}
	h.s.counters.ChannelWriteFail.Add(1)
	if errors.Is(err, flow.ErrStopping) {
		h.s.rejects.Add(reasonStopping, "", "events", len(events))
	} else {
		h.s.rejects.Add(reasonPutFailed, "", "events", len(events), "err", err)
	}
	return false
}
