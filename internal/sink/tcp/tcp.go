// Package tcpsink implements sluice's tcp sink: it writes each event body
// followed by '\n' to a TCP peer, such as a Logstash or Vector socket input.
//
// A batch's take commits once the batch was written to the connection (the
// buffer flushed and every write returned). Line protocols have no
// acknowledgement, so "delivered" means handed to the kernel: a peer that
// crashes, or closes its socket with bytes it has not read, loses them, and
// the sink cannot know. What the sink does see (a refused connection, a reset,
// a write timeout) fails the batch: the connection is closed, the events go
// back to the channel and are written again on a new connection. A batch that
// failed part way may have reached the peer in part, so the peer can see a
// prefix of a batch twice (at-least-once).
//
// Before each batch the sink checks, without blocking, whether the peer has
// closed the connection (and discards anything the peer sent), so a peer that
// restarted between batches does not swallow the next one. A peer that
// reset the connection (on Linux, a close with data unread) is logged as a
// warning, since events it had not read are gone. A close the check could
// not see yet (it came just after) fails the write on the old connection;
// the batch is then written again at once on a new one.
//
// Reconnection waits with exponential backoff (100 ms doubling to 5 s),
// reset by a delivered batch; failures are logged once per streak and then
// at most every 30 s (internal/downstream).
package tcpsink

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/downstream"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/rawio"
)

const (
	// DefaultBatchSize is the default batchSize.
	DefaultBatchSize = 100
	// DefaultConnectTimeout bounds one connection attempt.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultRequestTimeout bounds the writing of one batch.
	DefaultRequestTimeout = 10 * time.Second

	writeBuffer = 64 << 10
)

// Options configure a Writer.
type Options struct {
	Addr           string // host:port
	ConnectTimeout time.Duration
	RequestTimeout time.Duration
}

// Writer writes event bodies as lines to a TCP peer, connecting on demand.
type Writer struct {
	opt Options
	log *slog.Logger

	mu   sync.Mutex
	conn *downstream.Conn[*lineConn]
	bw   *bufio.Writer // writes to the open connection

	onDial func(*net.TCPConn) // test hook
}

// lineConn is an open connection and its probe.
type lineConn struct {
	*net.TCPConn
	probe func() peerState // reports whether the peer closed it; see peerClosed
	bw    *bufio.Writer
}

// Close closes the connection and detaches the Writer's buffer from it.
func (l *lineConn) Close() error {
	l.bw.Reset(nil)
	return l.TCPConn.Close()
}

// NewWriter returns a Writer; c receives the connection counters.
func NewWriter(opt Options, c *metrics.SinkCounters, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	w := &Writer{opt: opt, log: log, bw: bufio.NewWriterSize(nil, writeBuffer)}
	w.conn = downstream.New(downstream.Options{Name: "tcp sink", Addr: opt.Addr, Counters: c, Log: log, WaitBackoff: true}, w.dial)
	return w
}

// Write sends the bodies of events, each followed by '\n', and returns nil
// once all were written to the connection. Without a connection it first
// waits out the reconnect backoff (or until ctx is done), then dials.
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.probe() {
	case peerEOF:
		// The peer closed with nothing of ours unread: reconnect at once.
		w.log.Info("tcp sink: peer closed the connection; reconnecting", "addr", w.opt.Addr)
		_ = w.conn.Close()
	case peerReset:
		// A reset usually means the peer closed with data unread: the
		// tail of what was already committed may not have been read.
		w.log.Warn("tcp sink: peer reset the connection; events it had not read when it closed are lost", "addr", w.opt.Addr)
		_ = w.conn.Close()
	}
	return w.conn.Send(ctx, func(lc *lineConn) error {
		if w.opt.RequestTimeout > 0 {
			_ = lc.SetWriteDeadline(time.Now().Add(w.opt.RequestTimeout)) // fails only on a closed conn, which the write reports
		}
		// A peer that stops reading blocks the write once the socket
		// buffers are full. When ctx ends (the agent stops, or a reload
		// stops this sink's runner) the write is cut off at once, rather
		// than at request-timeout, so a stop keeps its deadline; the batch
		// rolls back. The deadline is moved from the AfterFunc, and Write
		// waits for it, so a late one cannot cut the next batch short.
		cut := make(chan struct{})
		stop := panics.AfterFunc(ctx, "tcp sink: write deadline", func() {
			defer close(cut)
			_ = lc.SetWriteDeadline(time.Now())
		})
		defer func() {
			if !stop() {
				<-cut
			}
		}()
		bw := w.bw
		for i := range events {
			bw.Write(events[i].Body) // errors are sticky and returned by Flush
			bw.WriteByte('\n')
		}
		if err := bw.Flush(); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("tcp sink: write to %s cut off: %w (%v)", w.opt.Addr, context.Cause(ctx), err)
			}
			return fmt.Errorf("tcp sink: write to %s: %w", w.opt.Addr, err)
		}
		return nil
	})
}

// probe reports whether the peer closed the open connection (peerOpen
// when there is none). Caller holds mu.
func (w *Writer) probe() peerState {
	if lc, ok := w.conn.Current(); ok {
		return lc.probe()
	}
	return peerOpen
}

// dial connects to the peer. Caller holds mu.
func (w *Writer) dial(ctx context.Context) (*lineConn, error) {
	d := net.Dialer{Timeout: w.opt.ConnectTimeout}
	c, err := d.DialContext(ctx, "tcp", w.opt.Addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	_ = tc.SetNoDelay(true) // only latency depends on it
	if w.onDial != nil {
		w.onDial(tc)
	}
	if rw := rawio.NewWriter(tc); rw != nil {
		w.bw.Reset(rw) // no scheduler round per batch (internal/rawio)
	} else {
		w.bw.Reset(tc)
	}
	return &lineConn{TCPConn: tc, probe: peerClosed(tc), bw: w.bw}, nil
}

// Stop closes the connection.
func (w *Writer) Stop(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn.Stop()
}

// peerState is what a probe found out about the peer's side of a connection.
type peerState int

const (
	peerOpen  peerState = iota
	peerEOF             // closed cleanly: it had read everything that reached it
	peerReset           // reset: it closed with data unread, or crashed
)

// New builds a tcp sink from its properties: hostname and port (required),
// batchSize (100), connect-timeout (10000 ms) and request-timeout (10000 ms,
// the bound on writing one batch).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	s, _ := build(env, p)
	return s, nil
}

func build(env flow.Env, p *config.Props) (*flow.BatchSink, *Writer) {
	host := p.Required("hostname")
	port := 0
	if p.Has("port") {
		port = p.IntRange("port", 0, 1, 65535)
	} else {
		p.Required("port")
	}
	batch := p.IntRange("batchSize", DefaultBatchSize, 1, math.MaxInt32)
	ct := p.IntRange("connect-timeout", int(DefaultConnectTimeout/time.Millisecond), 1, math.MaxInt32)
	rt := p.IntRange("request-timeout", int(DefaultRequestTimeout/time.Millisecond), 1, math.MaxInt32)
	opt := Options{
		Addr:           net.JoinHostPort(host, strconv.Itoa(port)),
		ConnectTimeout: time.Duration(ct) * time.Millisecond,
		RequestTimeout: time.Duration(rt) * time.Millisecond,
	}
	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	w := NewWriter(opt, c, env.Log())
	return flow.NewBatchSink(env, w, batch, c), w
}
