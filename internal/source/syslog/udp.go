package syslogsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
)

// UDPSource is the syslogudp source: one datagram is one message. Build it
// with NewUDP.
//
// A reader goroutine parses datagrams into a queue; a putter takes every
// queued event as one batch, up to the batch limit (flow.Batching: batchSize
// when set, else the channels' transactionCapacity, but at most what the
// queue holds). While the channel is full the
// putter retries, the queue fills, the reader waits, and the kernel's socket
// buffer takes the overflow; datagrams the kernel then drops are counted
// (on Linux) in DatagramDropCount, since UDP cannot push back. The count is
// the socket's own, read every second and at stop (listener.WatchDrops), so
// events delivered plus DatagramDropCount is every datagram sent, the tail
// of a burst included.
type UDPSource struct {
	env        flow.Env
	host       string
	port       int
	batch      flow.Batching
	ipHeader   string
	hostHeader string
	parser     FlumeParser
	recvBuf    int  // receiveBufferSize; 0: listener.DefaultReceiveBuffer
	recvBufSet bool // set in the config, so a cap by the kernel is a warning
	counters   *metrics.SourceCounters
	rejects    *listener.Rejects
	retry      *flow.Retry // puts a batch until the channel takes it

	mu       sync.Mutex // guards the fields below
	sock     *listener.UDP
	stopProc context.CancelFunc
	readDone chan struct{} // closed when the reader returned
	done     chan struct{} // closed when the reader and the putter returned
}

var (
	_ flow.Source     = (*UDPSource)(nil)
	_ flow.BatchSizer = (*UDPSource)(nil)
)

// Datagrams the kernel dropped because the socket's receive buffer was
// full, and datagrams read but lost at a stop: UDP cannot push back or hand
// them back, so they are counted (DatagramDropCount) and told.
var (
	reasonKernelDrop = listener.Reason{Counter: "DatagramDropCount", Level: slog.LevelWarn,
		Msg: "the kernel dropped syslog datagrams: the socket's receive buffer was full (raise receiveBufferSize, or make the sinks faster)"}
	reasonUDPPutFailed = listener.Reason{Counter: "DatagramDropCount", Level: slog.LevelError,
		Msg: "syslogudp source dropped events it could not put"}
	reasonStopDrop = listener.Reason{Counter: "DatagramDropCount", Level: slog.LevelWarn,
		Msg: "syslogudp stopped with datagrams read but not put (the channel refused them, or the agent was stopping); they are lost"}
)

// NewUDP builds a syslogudp source from Flume's properties host (all
// interfaces when unset), port, keepFields (none), clientIPHeader and
// clientHostnameHeader, and sluice's batchSize (100; left unset, batches
// grow to the channels' transactionCapacity) and receiveBufferSize
// (bytes; by default 4 MiB, or what net.core.rmem_max allows when that is
// less and the process may not exceed it). eventSize is accepted and, as in
// Flume, does not apply: a datagram is read whole (up to 64 KiB).
func NewUDP(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &UDPSource{env: env}
	s.host = p.String("host", "")
	s.port = listener.ReadPort(p, "port")
	s.batch = flow.ReadBatching(p, "batchSize", DefaultBatchSize)
	if p.Has("eventSize") {
		p.IntRange("eventSize", DefaultEventSize, 1, maxEventSize)
		env.Log().Info("eventSize does not apply to syslogudp (Flume ignores it too); datagrams are read whole", "source", env.Name)
	}
	s.recvBufSet = p.Has("receiveBufferSize")
	s.recvBuf = p.IntRange("receiveBufferSize", 0, 0, math.MaxInt32)
	var keep Keep
	keep, s.ipHeader, s.hostHeader = readCommon(env, p)
	s.parser = FlumeParser{Keep: keep}
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.rejects = listener.NewRejects(env.Name, env.Log(), s.counters.Set, reasonKernelDrop, reasonInvalid, reasonUnreadable)
	s.retry = flow.NewRetry(env.Log(), "syslogudp", env.Name, s.counters, flow.FullBackoff, false)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// BatchSize reports the most events put in one transaction.
func (s *UDPSource) BatchSize() int { return s.batch.Size() }

// Addr returns the address the source listens on, once started.
func (s *UDPSource) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sock.Addr()
}

// Start binds host:port and starts the reader and the putter.
func (s *UDPSource) Start(_ context.Context, p flow.Processor) error {
	if s.Addr() != nil {
		return fmt.Errorf("syslogudp %s: already started", s.env.Name)
	}
	addr := net.JoinHostPort(s.host, strconv.Itoa(s.port))
	sock, err := listener.OpenUDP(addr, s.recvBuf, s.recvBufSet, s.env.Log(), "syslogudp", s.env.Name,
		func(n int64) { s.rejects.AddN(reasonKernelDrop, n, "") })
	if err != nil {
		return fmt.Errorf("syslogudp %s: listen %s: %w", s.env.Name, addr, err)
	}
	procCtx, stopProc := context.WithCancel(context.Background())
	readDone, done := make(chan struct{}), make(chan struct{})
	s.counters.Started()
	s.mu.Lock()
	s.sock, s.stopProc, s.readDone, s.done = sock, stopProc, readDone, done
	s.mu.Unlock()
	s.env.Log().Info("syslogudp source listening", "source", s.env.Name, "addr", sock.Conn.LocalAddr().String())
	// A batch is at most what the queue holds: datagrams are up to 64 KiB
	// each, so the queue keeps its size (4 × batchSize) whatever the
	// channels' transactionCapacity, and at most 8 × batchSize datagrams
	// are held between the socket and the channel.
	queue := make(chan event.Event, 4*s.batch.Size())
	limit := min(s.batch.Limit(p), cap(queue))
	var wg sync.WaitGroup
	wg.Add(2)
	panics.Go("syslogudp source "+s.env.Name+": reader", func() { defer wg.Done(); defer close(readDone); s.read(sock, queue) })
	panics.Go("syslogudp source "+s.env.Name+": putter", func() { defer wg.Done(); s.putLoop(procCtx, queue, p, limit) })
	panics.Go("syslogudp source "+s.env.Name+": stop", func() { wg.Wait(); close(done) })
	return nil
}

// Stop stops reading: the datagrams the socket still holds are read (for
// at most listener.UDPDrainMax) and go the way of every other, and the
// socket's drop count is read a last time before it closes. Then the events already read
// reach the channel (for as long as ctx allows: then what is left is
// counted as dropped) and both goroutines are waited for.
func (s *UDPSource) Stop(ctx context.Context) error {
	s.mu.Lock()
	sock, stopProc, readDone, done := s.sock, s.stopProc, s.readDone, s.done
	s.sock = nil
	s.mu.Unlock()
	if sock == nil {
		return nil
	}
	defer s.counters.Stopped()
	defer s.rejects.Flush()
	defer s.retry.Stop()
	defer stopProc()
	var err error
	sock.StopReading() // the reader drains the socket and returns
	select {
	case <-readDone:
	case <-ctx.Done():
		// The reader waits for room in the queue: the putter gives up,
		// counting what it holds, and the reader counts the rest.
		stopProc()
		<-readDone
		err = fmt.Errorf("syslogudp %s: stop: %w", s.env.Name, ctx.Err())
	}
	_ = sock.Close() // read-only; its drop count was read last
	select {
	case <-done:
	case <-ctx.Done():
		stopProc()
		<-done
		err = fmt.Errorf("syslogudp %s: stop: %w", s.env.Name, ctx.Err())
	}
	return err
}

// read parses datagrams into queue until Stop stops the socket's reading;
// then it reads what the socket still holds and closes queue.
func (s *UDPSource) read(sock *listener.UDP, queue chan<- event.Event) {
	defer close(queue)
	hosts := newHostCache()
	sock.Read(func(err error) {
		s.counters.EventReadFail.Add(1)
		s.env.Log().Warn("syslogudp source could not read a datagram", "source", s.env.Name, "err", err)
	}, func(d []byte, from netip.AddrPort) { s.datagram(d, from, hosts, queue) })
}

// datagram parses one datagram into an event for queue.
func (s *UDPSource) datagram(d []byte, from netip.AddrPort, hosts *hostCache, queue chan<- event.Event) {
	m, ok := ScanDatagram(d, true)
	if !ok {
		// Flume fails to build an event from a datagram with no
		// priority digits (Integer.parseInt("")) and counts it.
		s.counters.EventReadFail.Add(1)
		s.rejects.Add(reasonUnreadable, from.String())
		return
	}
	ev, _ := s.parser.Event(m, make([]byte, 0, len(m.Raw)+16))
	if m.Bad {
		s.counters.EventReadFail.Add(1)
		s.rejects.Add(reasonInvalid, from.String())
	}
	ev.ReceivedAt = event.Now()
	if s.ipHeader != "" {
		ev.Headers.Set(s.ipHeader, javaHostAddress(from.Addr()))
	}
	if s.hostHeader != "" {
		ev.Headers.Set(s.hostHeader, hosts.get(from.Addr()))
	}
	s.counters.EventReceived.Add(1)
	queue <- ev
}

// putLoop puts queued events in batches until queue is closed and empty.
func (s *UDPSource) putLoop(ctx context.Context, queue <-chan event.Event, p flow.Processor, limit int) {
	batch := make([]event.Event, 0, limit)
	orig := make([]event.Event, 0, limit)
	for {
		ev, ok := <-queue
		if !ok {
			return
		}
		orig = append(orig[:0], ev)
	fill:
		for len(orig) < limit {
			select {
			case ev, ok := <-queue:
				if !ok {
					break fill
				}
				orig = append(orig, ev)
			default:
				break fill
			}
		}
		if !s.put(ctx, p, orig, batch) {
			// Stopping and the channel still refuses: what is left is lost,
			// as a datagram source cannot hand it back; count it.
			n := int64(len(orig))
			for range queue {
				n++
			}
			s.rejects.AddN(reasonStopDrop, n, "")
			return
		}
	}
}

// put commits orig, retrying while the channel is full. Each attempt puts
// copies with copied headers, since interceptors may change the events
// of a failed attempt. It reports false when the source is stopping.
func (s *UDPSource) put(ctx context.Context, p flow.Processor, orig, batch []event.Event) bool {
	err := s.retry.Put(ctx, p, func() []event.Event {
		batch = batch[:0]
		for _, e := range orig {
			e.Headers = e.Headers.Clone()
			batch = append(batch, e)
		}
		return batch
	}, nil)
	switch {
	case err == nil:
		s.counters.EventAccepted.Add(int64(len(orig)))
	case ctx.Err() != nil || errors.Is(err, flow.ErrStopping):
		return false
	default:
		// Not a matter of space: Flume drops the events and logs it.
		s.rejects.AddN(reasonUDPPutFailed, int64(len(orig)), "", "err", err)
	}
	return true
}

// hostCache remembers reverse lookups of UDP senders for a while, since
// Flume's per-datagram lookup would cost a DNS query per message.
type hostCache struct {
	m map[netip.Addr]hostEntry
}

type hostEntry struct {
	name string
	exp  time.Time
}

const (
	hostCacheTTL  = 5 * time.Minute
	hostCacheSize = 4096
)

func newHostCache() *hostCache { return &hostCache{m: map[netip.Addr]hostEntry{}} }

func (c *hostCache) get(ip netip.Addr) string {
	now := time.Now()
	if e, ok := c.m[ip]; ok && now.Before(e.exp) {
		return e.name
	}
	if len(c.m) >= hostCacheSize {
		clear(c.m)
	}
	name := lookupHostname(ip)
	c.m[ip] = hostEntry{name, now.Add(hostCacheTTL)}
	return name
}
