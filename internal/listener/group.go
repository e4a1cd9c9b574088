// Package listener holds what sluice's network sources (avro, netcat,
// syslog, http) share to stay bounded whatever clients send:
//
//   - Group: the TCP listeners of one source and the connections they
//     accepted, with a connection limit (at the limit the connection idle
//     longest, else one sending below the minimum rate, is closed to admit
//     the new one; only when there is neither is the new one refused), an
//     idle timeout, and a minimum-progress rule for a message in progress;
//     Shutdown closes listeners and connections promptly. A Group's
//     Listener is a net.Listener, so net/http serves on it too.
//   - Budget: the bytes a source may hold for input it has read but not yet
//     put into its channels, taken before they are allocated.
//   - ReadBuffer: a stream connection's input buffer, small of its own, and
//     large (from the source's BigBuffers, paid for from its Budget) only
//     while a long message or a busy sender needs it.
//   - Rejects: every refused input (or connection) logged at WARN with the
//     peer and reason, throttled, and counted in a metric per reason; a
//     source's own failures (accepting, putting) told as failure streaks.
//   - HandshakeTLS and HTTP: TLS handshakes and net/http servers on a
//     Group, so that their failed handshakes and slow requests are counted
//     and told like every other refusal.
//   - ListenUDP: a UDP socket with a receive buffer as large as the kernel
//     allows (up to a few MiB); WatchDrops counts what the kernel drops on
//     it (the burst's tail too), and DrainUDP reads what it still holds when
//     its source stops.
package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/panics"
)

// Config is the connection hygiene of one source. The zero value of a
// field turns that limit off.
type Config struct {
	// MaxConns is the most connections open at once.
	MaxConns int
	// IdleTimeout closes a connection with no message in progress for this long.
	IdleTimeout time.Duration
	// ProgressTimeout and MinRate close a connection whose message in
	// progress does not move: in every ProgressTimeout while a message is
	// arriving, it must bring at least MinRate bytes a second on average.
	// So a 1-byte-a-second trickle, or a message stalled half way, is
	// closed within one to two ProgressTimeouts, while a large message on a
	// slow but moving link is not, however long it takes. A connection
	// between messages (Idle) or being handled (Busy) is not measured.
	ProgressTimeout time.Duration
	MinRate         int64 // bytes per second
}

// Defaults shared by the TCP sources (each documents its own property names).
const (
	DefaultMaxConns        = 1024
	DefaultIdleTimeout     = 10 * time.Minute
	DefaultProgressTimeout = 10 * time.Second
	DefaultMinRate         = 1024
)

// Options are a Group's surroundings.
type Options struct {
	Source  string        // the source's name, for logs
	Log     *slog.Logger  // nil: slog.Default()
	Rejects *Rejects      // where refused and closed connections are logged and counted; nil: a private one
	Open    *atomic.Int64 // kept equal to the number of open connections (OpenConnectionCount); may be nil
}

// Reasons a Group closes or refuses connections, with their counters.
var (
	ReasonConnRefused = Reason{Counter: "ConnectionRefusedCount", Level: slog.LevelWarn,
		Msg: "refused a connection: max-connections reached and none is idle or too slow to close for it"}
	ReasonConnEvicted = Reason{Counter: "ConnectionEvictedCount", Level: slog.LevelWarn,
		Msg: "closed a connection to admit a new one: max-connections reached"}
	ReasonIdleTimeout = Reason{Counter: "ConnectionIdleTimeoutCount", Level: slog.LevelDebug,
		Msg: "closed a connection idle for longer than the idle timeout"}
	ReasonTooSlow = Reason{Counter: "ConnectionTooSlowCount", Level: slog.LevelWarn,
		Msg: "closed a connection whose message arrived below the minimum rate"}
	reasonAccept = Reason{Level: slog.LevelWarn, Msg: "could not accept a connection; retrying",
		Recovered: "accepting connections again"}
)

// ConnReasons are the reasons a Group counts, for a source to register
// with its other reasons.
var ConnReasons = []Reason{ReasonConnRefused, ReasonConnEvicted, ReasonIdleTimeout, ReasonTooSlow}

// Group is the listeners and connections of one source. Build it with
// NewGroup; it runs one checker goroutine from then until Shutdown.
type Group struct {
	cfg  Config
	opt  Options
	tick time.Duration

	stopping atomic.Bool

	mu    sync.Mutex
	conns map[*Conn]struct{}
	lns   []net.Listener

	wg          sync.WaitGroup // Serve loops and their connection handlers
	stopChecker chan struct{}
	checkerDone chan struct{}
	guard       string // a connection goroutine's name for panics.Guard
}

// NewGroup returns a group with cfg's limits and starts its checker.
func NewGroup(cfg Config, opt Options) *Group {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Rejects == nil {
		opt.Rejects = NewRejects(opt.Source, opt.Log, nil)
	}
	g := &Group{
		cfg:         cfg,
		opt:         opt,
		conns:       map[*Conn]struct{}{},
		stopChecker: make(chan struct{}),
		checkerDone: make(chan struct{}),
	}
	g.tick = time.Second
	for _, d := range []time.Duration{cfg.IdleTimeout, cfg.ProgressTimeout} {
		if d > 0 {
			g.tick = min(g.tick, max(d/4, 10*time.Millisecond))
		}
	}
	g.guard = "source " + opt.Source + ": connection"
	panics.Go("source "+opt.Source+": connection checker", g.checker)
	return g
}

// Open is how a TCP source starts listening: a new group with cfg's
// limits, listening on each of addrs. If one cannot be listened on, the
// group is shut down and the error says which address.
func Open(cfg Config, opt Options, addrs ...string) (*Group, []*Listener, error) {
	g := NewGroup(cfg, opt)
	lns := make([]*Listener, 0, len(addrs))
	for _, addr := range addrs {
		ln, err := g.Listen(addr)
		if err != nil {
			_ = g.Shutdown(context.Background())
			return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		lns = append(lns, ln)
	}
	return g, lns, nil
}

// Config returns the group's limits.
func (g *Group) Config() Config { return g.cfg }

// Len is the number of open connections.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// Count is the number of open connections in state st.
func (g *Group) Count(st State) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for c := range g.conns {
		if c.State() == st {
			n++
		}
	}
	return n
}

// Listener is a TCP listener whose Accept returns admitted *Conn values:
// connections the group refused never come out of it.
type Listener struct {
	net.Listener
	g *Group
}

// Listen listens on the TCP address addr for the group.
func (g *Group) Listen(addr string) (*Listener, error) {
	if g.stopping.Load() {
		return nil, net.ErrClosed
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.lns = append(g.lns, ln)
	g.mu.Unlock()
	return &Listener{Listener: ln, g: g}, nil
}

// Accept waits for the next connection the group admits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			if l.g.stopping.Load() {
				return nil, net.ErrClosed
			}
			return nil, err
		}
		if c := l.g.admit(raw); c != nil {
			return c, nil
		}
	}
}

// admit tracks raw, closing a connection to make room at the limit; nil
// when raw was refused (and closed).
func (g *Group) admit(raw net.Conn) *Conn {
	now := time.Now()
	g.mu.Lock()
	if g.stopping.Load() {
		g.mu.Unlock()
		_ = raw.Close()
		return nil
	}
	var victim *Conn
	var why string
	if g.cfg.MaxConns > 0 && len(g.conns) >= g.cfg.MaxConns {
		victim, why = g.victimLocked(now)
		if victim == nil {
			g.mu.Unlock()
			g.opt.Rejects.Add(ReasonConnRefused, raw.RemoteAddr().String(), "max-connections", g.cfg.MaxConns)
			_ = raw.Close()
			return nil
		}
		delete(g.conns, victim)
	}
	c := newConn(raw, g, now)
	g.conns[c] = struct{}{}
	g.storeOpenLocked()
	g.mu.Unlock()
	if victim != nil {
		victim.closeFor(ReasonConnEvicted.Counter, func() {
			g.opt.Rejects.Add(ReasonConnEvicted, victim.Peer(), "why", why, "admitted", raw.RemoteAddr().String(), "max-connections", g.cfg.MaxConns)
		})
	}
	return c
}

// victimLocked picks the connection to close for a new one: the one idle
// longest; else, among those whose message is behind the minimum rate, the
// slowest. Caller holds g.mu.
func (g *Group) victimLocked(now time.Time) (*Conn, string) {
	var idle, slow *Conn
	var idleSince time.Time
	slowRate := 0.0
	for c := range g.conns {
		s := c.snap()
		switch s.state {
		case Idle:
			if idle == nil || s.since.Before(idleSince) {
				idle, idleSince = c, s.since
			}
		case Receiving:
			if g.cfg.MinRate <= 0 {
				continue
			}
			el := now.Sub(s.winStart).Seconds()
			if el <= 0 || float64(s.winBytes) >= float64(g.cfg.MinRate)*el {
				continue
			}
			if r := float64(s.winBytes) / el; slow == nil || r < slowRate {
				slow, slowRate = c, r
			}
		}
	}
	if idle != nil {
		return idle, fmt.Sprintf("idle for %v, the longest", now.Sub(idleSince).Round(time.Millisecond))
	}
	if slow != nil {
		return slow, fmt.Sprintf("message arriving at %.0f bytes/s, below the minimum of %d", slowRate, g.cfg.MinRate)
	}
	return nil, ""
}

func (g *Group) storeOpenLocked() {
	if g.opt.Open != nil {
		g.opt.Open.Store(int64(len(g.conns)))
	}
}

// remove forgets c (closed by its handler or by net/http).
func (g *Group) remove(c *Conn) {
	g.mu.Lock()
	if _, ok := g.conns[c]; ok {
		delete(g.conns, c)
		g.storeOpenLocked()
	}
	g.mu.Unlock()
}

// Close closes the connection and forgets it.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.g.remove(c)
	return err
}

// Serve accepts connections from l in a goroutine the group owns and runs
// handle for each in a goroutine of its own, closing the connection when
// handle returns. Accept errors other than the listener's close (out of file
// descriptors, say) are logged, throttled, and retried after a pause.
func (g *Group) Serve(l *Listener, handle func(*Conn)) {
	g.wg.Add(1)
	panics.Go("source "+g.opt.Source+": accept", func() {
		defer g.wg.Done()
		var delay time.Duration
		for {
			nc, err := l.Accept()
			if err != nil {
				if g.stopping.Load() || errors.Is(err, net.ErrClosed) {
					return
				}
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				g.opt.Rejects.Add(reasonAccept, l.Addr().String(), "err", err, "retry_in", delay.String())
				select {
				case <-time.After(delay):
				case <-g.stopChecker:
					return
				}
				continue
			}
			delay = 0
			g.opt.Rejects.Ok(reasonAccept, "addr", l.Addr().String())
			c := nc.(*Conn)
			g.wg.Add(1)
			go func() {
				defer panics.Guard(g.guard)
				defer g.wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	})
}

// checker closes idle and too-slow connections until Shutdown.
func (g *Group) checker() {
	defer close(g.checkerDone)
	if g.cfg.IdleTimeout <= 0 && (g.cfg.ProgressTimeout <= 0 || g.cfg.MinRate <= 0) {
		<-g.stopChecker
		return
	}
	t := time.NewTicker(g.tick)
	defer t.Stop()
	type closing struct {
		c      *Conn
		reason Reason
		args   []any
	}
	var out []closing
	for {
		select {
		case <-g.stopChecker:
			return
		case <-t.C:
		}
		now := time.Now()
		out = out[:0]
		progress := g.cfg.ProgressTimeout > 0 && g.cfg.MinRate > 0
		g.mu.Lock()
		for c := range g.conns {
			s := c.snap()
			switch s.state {
			case Idle:
				if el := now.Sub(s.since); g.cfg.IdleTimeout > 0 && el > g.cfg.IdleTimeout {
					out = append(out, closing{c, ReasonIdleTimeout, []any{"idle", el.Round(time.Millisecond)}})
				}
			case Receiving:
				if !progress {
					continue
				}
				if got, slow, _ := c.checkProgress(now, g.cfg.ProgressTimeout, g.cfg.MinRate); slow {
					out = append(out, closing{c, ReasonTooSlow, []any{"bytes_in_window", got, "window", g.cfg.ProgressTimeout,
						"message_age", now.Sub(s.since).Round(time.Millisecond), "min_bytes_per_second", g.cfg.MinRate}})
				}
			}
		}
		g.mu.Unlock()
		for _, x := range out {
			x.c.closeFor(x.reason.Counter, func() { g.opt.Rejects.Add(x.reason, x.c.Peer(), x.args...) })
		}
	}
}

// Shutdown stops intake: it closes the listeners and every connection that
// is not Busy at once; a Busy connection is closed as soon as it leaves
// Busy (its reply, if any, written). It waits for the Serve loops and
// handlers until ctx is done, then closes what is left and waits for them
// to return. It stops the checker. Shutdown may be called more than once.
func (g *Group) Shutdown(ctx context.Context) error {
	first := g.stopping.CompareAndSwap(false, true)
	g.mu.Lock()
	lns := g.lns
	g.lns = nil
	conns := make([]*Conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	for _, c := range conns {
		if c.State() != Busy {
			c.closeFor("stopping", nil)
		}
	}
	done := make(chan struct{})
	panics.Go("source "+g.opt.Source+": stop", func() { g.wg.Wait(); close(done) })
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		g.CloseAll()
		<-done
		err = ctx.Err()
	}
	if first {
		close(g.stopChecker)
	}
	<-g.checkerDone
	g.opt.Rejects.Flush()
	return err
}

// CloseAll closes every connection now, Busy or not.
func (g *Group) CloseAll() {
	g.mu.Lock()
	conns := make([]*Conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		c.closeFor("stopping", nil)
	}
}

// Stopping reports whether Shutdown has begun.
func (g *Group) Stopping() bool { return g.stopping.Load() }
