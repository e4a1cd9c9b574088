package netcat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// maxDatagram is the largest UDP payload.
const maxDatagram = 65535

// UDPSource is the netcatudp source: one datagram is one event, whose body is
// the datagram up to its first newline (the rest is ignored, as Flume does).
// Build it with NewUDP.
type UDPSource struct {
	env          flow.Env
	bind         string
	port         int
	remoteHeader string
	counters     *metrics.SourceCounters

	mu     sync.Mutex // guards the fields below
	conn   *net.UDPConn
	cancel context.CancelFunc
	done   chan struct{}
}

// NewUDP builds a netcatudp source from Flume's properties bind, port and
// remoteAddressHeader (Flume's code reads remoteAddress, which is accepted
// too). Without either, no header is set.
func NewUDP(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &UDPSource{env: env}
	s.bind = p.String("bind", "0.0.0.0")
	s.port = requiredPort(p)
	s.remoteHeader = p.String("remoteAddressHeader", p.String("remoteAddress", ""))
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// Addr returns the address the source listens on, once started.
func (s *UDPSource) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	return s.conn.LocalAddr()
}

// Start binds bind:port and reads datagrams in a goroutine Stop ends.
func (s *UDPSource) Start(_ context.Context, p flow.Processor) error {
	if s.Addr() != nil {
		return fmt.Errorf("netcatudp %s: already started", s.env.Name)
	}
	addr := net.JoinHostPort(s.bind, strconv.Itoa(s.port))
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fmt.Errorf("netcatudp %s: resolve %s: %w", s.env.Name, addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return fmt.Errorf("netcatudp %s: listen %s: %w", s.env.Name, addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.mu.Lock()
	s.conn, s.cancel, s.done = conn, cancel, done
	s.mu.Unlock()
	s.counters.Started()
	s.env.Log().Info("netcatudp source listening", "source", s.env.Name, "addr", conn.LocalAddr().String())
	go func() {
		defer close(done)
		s.run(ctx, conn, p)
	}()
	return nil
}

// Stop closes the socket and waits for the reader to exit.
func (s *UDPSource) Stop(ctx context.Context) error {
	s.mu.Lock()
	conn, cancel, done := s.conn, s.cancel, s.done
	s.conn, s.cancel, s.done = nil, nil, nil
	s.mu.Unlock()
	if conn == nil {
		return nil
	}
	cancel()
	conn.Close()
	defer s.counters.Stopped()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("netcatudp %s: stop: %w", s.env.Name, ctx.Err())
	}
}

func (s *UDPSource) run(ctx context.Context, conn *net.UDPConn, p flow.Processor) {
	log := s.env.Log()
	buf := make([]byte, maxDatagram)
	batch := make([]event.Event, 1)
	var sender []byte // "/ip:port" as Java's InetSocketAddress prints it
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.counters.EventReadFail.Add(1)
			log.Warn("netcatudp source could not read a datagram", "source", s.env.Name, "err", err)
			continue
		}
		line := buf[:n]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		ev := event.Event{Body: bytes.Clone(line), ReceivedAt: event.Now()}
		if ev.Body == nil {
			ev.Body = []byte{}
		}
		if s.remoteHeader != "" {
			sender = appendJavaAddr(sender[:0], from)
			ev.Headers = map[string]string{s.remoteHeader: string(sender)}
		}
		s.counters.EventReceived.Add(1)
		if !s.put(ctx, p, ev, batch) {
			return
		}
	}
}

// put commits ev, retrying while the channel is full. UDP has no way to push
// back, so meanwhile newer datagrams wait in (and may overflow) the socket's
// receive buffer. It reports false when the source is stopping.
func (s *UDPSource) put(ctx context.Context, p flow.Processor, ev event.Event, batch []event.Event) bool {
	backoff := time.Duration(0)
	for {
		batch[0] = ev
		if ev.Headers != nil {
			// Interceptors may change the map in place; retry with the original.
			batch[0].Headers = map[string]string{s.remoteHeader: ev.Headers[s.remoteHeader]}
		}
		err := p.Process(ctx, batch)
		if err == nil {
			s.counters.EventAccepted.Add(1)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.counters.ChannelWriteFail.Add(1)
		if !errors.Is(err, flow.ErrChannelFull) {
			// Not a matter of space: Flume drops the event and logs it.
			s.env.Log().Error("netcatudp source dropped an event it could not put", "source", s.env.Name, "err", err)
			return true
		}
		backoff = min(max(2*backoff, minFullBackoff), maxFullBackoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
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
