package listener

import (
	"crypto/tls"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/rawio"
)

// State is where a connection is in its protocol, which decides the
// timeouts that apply to it.
type State int32

const (
	// Idle: between messages (or requests). The idle timeout applies, and
	// at the connection limit the connection idle longest is closed first.
	Idle State = iota
	// Receiving: a message has begun and is still arriving. It must keep
	// arriving at the minimum rate once the progress timeout has passed.
	Receiving
	// Busy: the source is handling what arrived (putting it into a
	// channel, replying). No timeout applies: the wait is the agent's.
	Busy
)

func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Receiving:
		return "receiving"
	}
	return "busy"
}

// Conn is an accepted connection tracked by its Group. Reads count bytes;
// a read that returns data on an Idle connection makes it Receiving (a
// message has begun). The protocol code says when it is Busy and when it is
// Idle again; see the State values.
type Conn struct {
	net.Conn
	g *Group
	// rr and rw read and write a TCP connection with raw system calls
	// (internal/rawio: no scheduler round per event); nil for others.
	rr *rawio.Reader
	rw *rawio.Writer
	// rc reads a TCP connection without waiting (ReadNow); nil for others.
	rc syscall.RawConn

	mu       sync.Mutex
	state    State
	since    time.Time // Idle: idle since; Receiving: when the message began
	winStart time.Time // Receiving: start of the current progress window
	winBase  int64     // bytes read when the window started
	read     int64     // bytes read so far
	closedBy string    // why the group closed it, "" while open
	explicit bool      // the protocol sets every state; reads do not (SetExplicit)
}

func newConn(raw net.Conn, g *Group, now time.Time) *Conn {
	c := &Conn{Conn: raw, g: g, since: now, rr: rawio.NewReader(raw), rw: rawio.NewWriter(raw)}
	if tc, ok := raw.(*net.TCPConn); ok {
		c.rc, _ = tc.SyscallConn()
	}
	return c
}

// Read reads from the connection, counting what arrives.
func (c *Conn) Read(p []byte) (int, error) {
	var n int
	var err error
	if c.rr != nil {
		n, err = c.rr.Read(p)
	} else {
		n, err = c.Conn.Read(p)
	}
	c.count(n)
	return n, err
}

// ReadNow reads what has already arrived, without waiting (rawio.ReadNow):
// 0 when nothing has, or when the connection cannot be read that way (not
// TCP). Errors, the end of the stream included, are left for the next Read.
func (c *Conn) ReadNow(p []byte) int {
	if c.rc == nil {
		return 0
	}
	n, err := rawio.ReadNow(c.rc, p)
	if err != nil {
		return 0
	}
	c.count(n)
	return n
}

func (c *Conn) count(n int) {
	if n > 0 {
		c.mu.Lock()
		c.read += int64(n)
		if c.state == Idle && !c.explicit {
			now := time.Now()
			c.state, c.since, c.winStart, c.winBase = Receiving, now, now, c.read-int64(n)
		}
		c.mu.Unlock()
	}
}

// Write writes to the connection.
func (c *Conn) Write(p []byte) (int, error) {
	if c.rw != nil {
		return c.rw.Write(p)
	}
	return c.Conn.Write(p)
}

// SetExplicit says the protocol code sets every state itself: a read no
// longer makes an Idle connection Receiving. A multiplexed protocol (HTTP/2,
// as gRPC uses) needs it, since frames that are no message (pings, window
// updates, settings) arrive between messages and several messages may be in
// progress at once. Call it before the connection is first read.
func (c *Conn) SetExplicit() {
	c.mu.Lock()
	c.explicit = true
	c.mu.Unlock()
}

// Idle says the connection is between messages: everything it sent so far
// has been handled.
func (c *Conn) Idle() { c.set(Idle) }

// Busy says the source is handling what the connection sent; no timeout
// applies until Idle or Receiving.
func (c *Conn) Busy() { c.set(Busy) }

// Receiving says a message is in progress and starts its clock now (a
// protocol calls it after a complete message when the next one has already
// begun, so the minimum rate applies to each message on its own).
func (c *Conn) Receiving() { c.set(Receiving) }

func (c *Conn) set(s State) {
	c.mu.Lock()
	now := time.Now()
	c.state, c.since, c.winStart, c.winBase = s, now, now, c.read
	c.mu.Unlock()
	if s != Busy && c.g.stopping.Load() {
		// The group is shutting down and waited for this one to finish
		// what it was handling.
		c.closeFor("stopping", nil)
	}
}

// State returns the connection's state.
func (c *Conn) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// ClosedBy returns why the group closed the connection (a reason's name,
// such as "idle_timeout"), or "" when it did not.
func (c *Conn) ClosedBy() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closedBy
}

// Peer is the remote address as text.
func (c *Conn) Peer() string { return c.RemoteAddr().String() }

// snapshot is what the group's checks read of a connection.
type snapshot struct {
	state    State
	since    time.Time
	winStart time.Time
	winBytes int64 // bytes read in the current progress window
}

func (c *Conn) snap() snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return snapshot{c.state, c.since, c.winStart, c.read - c.winBase}
}

// checkProgress ends the progress window of a Receiving connection once it
// lasted window: it reports the bytes that window brought and whether they
// were fewer than minRate a second, and starts the next window.
func (c *Conn) checkProgress(now time.Time, window time.Duration, minRate int64) (got int64, slow, ended bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != Receiving {
		return 0, false, false
	}
	el := now.Sub(c.winStart)
	if el < window {
		return 0, false, false
	}
	got = c.read - c.winBase
	slow = float64(got) < float64(minRate)*el.Seconds()
	c.winStart, c.winBase = now, c.read
	return got, slow, true
}

// closeFor closes the connection on the group's decision and records why;
// note, when not nil, runs first (so what it logs and counts is there by the
// time the peer sees the close). It reports false, doing nothing, when the
// group had already closed the connection.
func (c *Conn) closeFor(reason string, note func()) bool {
	c.mu.Lock()
	if c.closedBy != "" {
		c.mu.Unlock()
		return false
	}
	c.closedBy = reason
	c.mu.Unlock()
	if note != nil {
		note()
	}
	_ = c.Conn.Close()
	return true
}

// Of returns the *Conn under c: c itself, or the connection a TLS layer
// wraps. It returns nil when c did not come from a Group.
func Of(c net.Conn) *Conn {
	for {
		switch x := c.(type) {
		case *Conn:
			return x
		case *tls.Conn:
			c = x.NetConn()
		default:
			return nil
		}
	}
}
