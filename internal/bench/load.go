// Package bench generates load and receives it, to measure an agent's
// latency and throughput end to end: every event carries its sequence
// number and send time, so the receiver reports loss, duplicates and
// latency percentiles.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Line format of a generated event: "<seq> <send unix nanos> <padding>\n".
// The padding brings the line (newline excluded) to the requested size.

// AppendLine appends one generated line of size bytes (at least 40) to dst.
func AppendLine(dst []byte, seq uint64, sent time.Time, size int) []byte {
	start := len(dst)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, sent.UnixNano(), 10)
	dst = append(dst, ' ')
	for len(dst)-start < size {
		dst = append(dst, 'x')
	}
	return append(dst, '\n')
}

// ParseLine returns the sequence number and send time of a generated line
// (with or without its newline).
func ParseLine(line []byte) (seq uint64, sentNanos int64, err error) {
	a, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return 0, 0, fmt.Errorf("no sequence number in %.40q", line)
	}
	b, _, _ := bytes.Cut(rest, []byte{' '})
	if seq, err = strconv.ParseUint(string(a), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("bad sequence number in %.40q", line)
	}
	if sentNanos, err = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("bad send time in %.40q", line)
	}
	return seq, sentNanos, nil
}

// Receiver accepts TCP connections and records every generated line it reads.
type Receiver struct {
	ln net.Listener

	mu        sync.Mutex
	seen      map[uint64]bool
	latencies []time.Duration
	dups      int
	bad       int
	arrived   chan struct{} // signalled (non-blocking) on each line
	conns     map[net.Conn]bool

	wg sync.WaitGroup
}

// Listen starts a receiver on addr (such as "127.0.0.1:0").
func Listen(addr string) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench receiver: %w", err)
	}
	r := &Receiver{ln: ln, seen: map[uint64]bool{}, arrived: make(chan struct{}, 1), conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the address senders or sinks connect to.
func (r *Receiver) Addr() string { return r.ln.Addr().String() }

func (r *Receiver) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = true
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.read(c)
			r.mu.Lock()
			delete(r.conns, c)
			r.mu.Unlock()
		}()
	}
}

func (r *Receiver) read(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		now := time.Now().UnixNano()
		seq, sent, perr := ParseLine(line)
		r.mu.Lock()
		switch {
		case perr != nil:
			r.bad++
		case r.seen[seq]:
			r.dups++
		default:
			r.seen[seq] = true
			r.latencies = append(r.latencies, time.Duration(now-sent))
		}
		r.mu.Unlock()
		select {
		case r.arrived <- struct{}{}:
		default:
		}
	}
}

// Count returns how many distinct events arrived.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// WaitFor waits until n distinct events arrived or ctx is done.
func (r *Receiver) WaitFor(ctx context.Context, n int) error {
	for r.Count() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("received %d of %d events: %w", r.Count(), n, ctx.Err())
		case <-r.arrived:
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Close stops the receiver, closes the connections it accepted and waits
// for its goroutines.
func (r *Receiver) Close() error {
	err := r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

// Report summarises a run.
type Report struct {
	Sent, Received, Lost, Duplicated, Malformed int
	P50, P90, P99, P999, Max, Mean              time.Duration
}

// Report computes the summary for sent events numbered 0..sent-1.
func (r *Receiver) Report(sent int) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Sent: sent, Received: len(r.seen), Duplicated: r.dups, Malformed: r.bad}
	for i := 0; i < sent; i++ {
		if !r.seen[uint64(i)] {
			rep.Lost++
		}
	}
	lat := slices.Clone(r.latencies)
	slices.Sort(lat)
	if len(lat) > 0 {
		at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
		rep.P50, rep.P90, rep.P99, rep.P999, rep.Max = at(0.50), at(0.90), at(0.99), at(0.999), lat[len(lat)-1]
		var sum time.Duration
		for _, l := range lat {
			sum += l
		}
		rep.Mean = sum / time.Duration(len(lat))
	}
	return rep
}

func (rep Report) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	return fmt.Sprintf("sent %d received %d lost %d dup %d | latency ms: mean %s p50 %s p90 %s p99 %s p99.9 %s max %s",
		rep.Sent, rep.Received, rep.Lost, rep.Duplicated, ms(rep.Mean), ms(rep.P50), ms(rep.P90), ms(rep.P99), ms(rep.P999), ms(rep.Max))
}

// Sender writes generated lines to one TCP connection and discards what
// the peer answers (netcat's OK lines).
type Sender struct {
	conn net.Conn
	bw   *bufio.Writer
	done chan struct{}
}

// Dial connects a sender to addr.
func Dial(addr string) (*Sender, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench sender: %w", err)
	}
	s := &Sender{conn: c, bw: bufio.NewWriterSize(c, 256<<10), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_, _ = io.Copy(io.Discard, c)
	}()
	return s, nil
}

// Paced sends count events of size bytes numbered from first, one every
// interval, flushing each at once; it stops early when ctx is done and
// returns how many it sent.
func (s *Sender) Paced(ctx context.Context, first uint64, count, size int, interval time.Duration) (int, error) {
	buf := make([]byte, 0, size+64)
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; i < count; i++ {
		select {
		case <-ctx.Done():
			return i, nil
		case <-t.C:
		}
		buf = AppendLine(buf[:0], first+uint64(i), time.Now(), size)
		if _, err := s.conn.Write(buf); err != nil {
			return i, err
		}
	}
	return count, nil
}

// Flood sends count events of size bytes numbered from first as fast as the
// connection takes them.
func (s *Sender) Flood(first uint64, count, size int) error {
	var buf []byte
	now := time.Now()
	for i := 0; i < count; i++ {
		if i%1024 == 0 {
			now = time.Now()
		}
		buf = AppendLine(buf[:0], first+uint64(i), now, size)
		if _, err := s.bw.Write(buf); err != nil {
			return err
		}
	}
	return s.bw.Flush()
}

// Close closes the connection after the peer has had time to answer.
func (s *Sender) Close() error {
	if tc, ok := s.conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	err := s.conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
