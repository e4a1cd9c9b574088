package netcatsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
)

// UDPSource is the netcatudp source: one datagram is one event, whose body is
// the datagram up to its first newline (the rest is ignored, as Flume does).
// Build it with NewUDP.
//
// While the channel is full the reader retries the put and the kernel's
// socket buffer takes the overflow; datagrams the kernel then drops are
// counted (on Linux) in DatagramDropCount, read from the socket every second
// and at stop (listener.WatchDrops), so events delivered plus
// DatagramDropCount is every datagram sent, the tail of a burst included.
type UDPSource struct {
	env          flow.Env
	bind         string
	port         int
	remoteHeader string
	recvBuf      int  // receiveBufferSize; 0: listener.DefaultReceiveBuffer
	recvBufSet   bool // set in the config, so a cap by the kernel is a warning
	counters     *metrics.SourceCounters
	rejects      *listener.Rejects
	retry        *flow.Retry // puts an event until the channel takes it

	mu     sync.Mutex // guards the fields below
	sock   *listener.UDP
	cancel context.CancelFunc
	done   chan struct{}
}

// Datagrams the kernel dropped because the socket's receive buffer was
// full: UDP cannot push back, so they are counted and told.
var (
	reasonKernelDrop = listener.Reason{Counter: "DatagramDropCount", Level: slog.LevelWarn,
		Msg: "the kernel dropped datagrams: the socket's receive buffer was full (raise receiveBufferSize, or make the sinks faster)"}
	reasonStopDrop = listener.Reason{Counter: "DatagramDropCount", Level: slog.LevelWarn,
		Msg: "netcatudp dropped datagrams that arrived while the agent was stopping, or were still queued when it stopped"}
	reasonPutDrop = listener.Reason{Counter: "DatagramDropCount", Level: slog.LevelError,
		Msg: "netcatudp source dropped an event it could not put"}
)

// NewUDP builds a netcatudp source from Flume's properties bind, port and
// remoteAddressHeader (Flume's code reads remoteAddress, which is accepted
// too; without either, no header is set), and sluice's receiveBufferSize
// (bytes; by default 4 MiB, or what net.core.rmem_max allows when that is
// less and the process may not exceed it).
func NewUDP(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &UDPSource{env: env}
	s.bind = p.String("bind", "0.0.0.0")
	s.port = listener.ReadPort(p, "port")
	s.remoteHeader = p.String("remoteAddressHeader", p.String("remoteAddress", ""))
	s.recvBufSet = p.Has("receiveBufferSize")
	s.recvBuf = p.IntRange("receiveBufferSize", 0, 0, math.MaxInt32)
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.rejects = listener.NewRejects(env.Name, env.Log(), s.counters.Set, reasonKernelDrop)
	s.retry = flow.NewRetry(env.Log(), "netcatudp", env.Name, s.counters, flow.FullBackoff, false)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// Addr returns the address the source listens on, once started.
func (s *UDPSource) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sock.Addr()
}

// Start binds bind:port and reads datagrams in a goroutine Stop ends.
func (s *UDPSource) Start(_ context.Context, p flow.Processor) error {
	if s.Addr() != nil {
		return fmt.Errorf("netcatudp %s: already started", s.env.Name)
	}
	addr := net.JoinHostPort(s.bind, strconv.Itoa(s.port))
	sock, err := listener.OpenUDP(addr, s.recvBuf, s.recvBufSet, s.env.Log(), "netcatudp", s.env.Name,
		func(n int64) { s.rejects.AddN(reasonKernelDrop, n, "") })
	if err != nil {
		return fmt.Errorf("netcatudp %s: listen %s: %w", s.env.Name, addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.counters.Started()
	s.mu.Lock()
	s.sock, s.cancel, s.done = sock, cancel, done
	s.mu.Unlock()
	s.env.Log().Info("netcatudp source listening", "source", s.env.Name, "addr", sock.Conn.LocalAddr().String())
	panics.Go("netcatudp source "+s.env.Name, func() {
		defer close(done)
		s.run(ctx, sock, p)
	})
	return nil
}

// Stop stops the reader: a put waiting for room gives up, and the
// datagrams the socket still holds are read (for at most
// listener.UDPDrainMax) and counted as dropped (DatagramDropCount); the
// socket's drop count is read a last time before it closes.
func (s *UDPSource) Stop(ctx context.Context) error {
	s.mu.Lock()
	sock, cancel, done := s.sock, s.cancel, s.done
	s.sock, s.cancel, s.done = nil, nil, nil
	s.mu.Unlock()
	if sock == nil {
		return nil
	}
	cancel()
	sock.StopReading() // the reader drains the socket and returns
	defer s.counters.Stopped()
	defer s.rejects.Flush()
	defer s.retry.Stop()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("netcatudp %s: stop: %w", s.env.Name, ctx.Err())
	}
	_ = sock.Close() // read-only; its drop count was read last
	return err
}

func (s *UDPSource) run(ctx context.Context, sock *listener.UDP, p flow.Processor) {
	batch := make([]event.Event, 1)
	var sender []byte // "/ip:port" as Java's InetSocketAddress prints it
	sock.Read(func(err error) {
		s.counters.EventReadFail.Add(1)
		s.env.Log().Warn("netcatudp source could not read a datagram", "source", s.env.Name, "err", err)
	}, func(d []byte, from netip.AddrPort) {
		line := d
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		ev := event.Event{Body: bytes.Clone(line), ReceivedAt: event.Now()}
		if ev.Body == nil {
			ev.Body = []byte{}
		}
		if s.remoteHeader != "" {
			sender = appendJavaAddr(sender[:0], from)
			ev.Headers = event.Headers{{Key: s.remoteHeader, Value: string(sender)}}
		}
		s.counters.EventReceived.Add(1)
		s.put(ctx, p, ev, batch)
	})
}

// put commits ev, retrying while the channel is full. UDP has no way to push
// back, so meanwhile newer datagrams wait in (and may overflow) the socket's
// receive buffer. What cannot be put is counted as dropped: UDP cannot hand
// it back.
func (s *UDPSource) put(ctx context.Context, p flow.Processor, ev event.Event, batch []event.Event) {
	err := s.retry.Put(ctx, p, func() []event.Event {
		batch[0] = ev
		if ev.Headers != nil {
			// Interceptors may change the headers in place; each attempt has its own.
			batch[0].Headers = ev.Headers.Clone()
		}
		return batch
	}, nil)
	switch {
	case err == nil:
		s.counters.EventAccepted.Add(1)
	case ctx.Err() != nil || errors.Is(err, flow.ErrStopping):
		// Stopping: counted until Stop closes the socket.
		s.rejects.Add(reasonStopDrop, "")
	default:
		// Not a matter of space: Flume drops the event and logs it.
		s.rejects.Add(reasonPutDrop, "", "err", err)
	}
}

// appendJavaAddr appends a as Java's InetSocketAddress.toString prints an
// unresolved-host address: "/127.0.0.1:5140", "/0:0:0:0:0:0:0:1:5140".
func appendJavaAddr(b []byte, a netip.AddrPort) []byte {
	b = append(b, '/')
	ip := a.Addr().Unmap()
	if ip.Is4() {
		b = ip.AppendTo(b)
	} else {
		// Java prints every group, in lower-case hex, without "::".
		raw := ip.As16()
		for i := 0; i < 16; i += 2 {
			if i > 0 {
				b = append(b, ':')
			}
			b = strconv.AppendUint(b, uint64(raw[i])<<8|uint64(raw[i+1]), 16)
		}
		if z := ip.Zone(); z != "" {
			b = append(b, '%')
			b = append(b, z...)
		}
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(a.Port()), 10)
}
