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

// findPayload finds the generated payload in body: at its start (a line,
// an event body), or after a prefix a source or sink added (a syslog
// header, an Avro-encoded Flume event's headers), as the first run of
// digits within the first 512 bytes that starts a sequence number followed
// by a plausible send time.
func findPayload(body []byte) (seq uint64, sentNanos int64, err error) {
	if seq, sentNanos, err = ParseLine(body); err == nil {
		return seq, sentNanos, nil
	}
	digit := func(c byte) bool { return '0' <= c && c <= '9' }
	for i := 1; i < len(body) && i < 512; i++ {
		if !digit(body[i]) || digit(body[i-1]) {
			continue
		}
		if s, t, perr := ParseLine(body[i:]); perr == nil && t > 1e18 {
			return s, t, nil
		}
	}
	return 0, 0, err
}

// Receiver records generated events arriving from a pipeline's output: as
// lines on TCP connections (Listen: the downstream of a tcp sink), as Avro
// RPC calls (ListenAvro: the downstream of an avro sink), as lines in the
// files of a directory (WatchDir: a file_roll sink's directory), or handed
// to Record by any other consumer (NewReceiver: a Kafka topic's consumer,
// a test's sink).
type Receiver struct {
	rec  *recorder
	ln   net.Listener // nil unless listening
	stop chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]bool

	closeOnce sync.Once
	wg        sync.WaitGroup
	onClose   func() // after the goroutines end (an in-process Kafka)
}

// NewReceiver returns a receiver that records what Record is given.
func NewReceiver() *Receiver {
	return &Receiver{rec: newRecorder(), stop: make(chan struct{}), conns: map[net.Conn]bool{}}
}

// Listen starts a receiver of generated lines on addr (such as
// "127.0.0.1:0"), one event per line, on any number of connections.
func Listen(addr string) (*Receiver, error) {
	return listen(addr, "tcp", (*Receiver).readLines)
}

func listen(addr, what string, serve func(*Receiver, net.Conn)) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench %s receiver: %w", what, err)
	}
	r := NewReceiver()
	r.ln = ln
	r.wg.Add(1)
	go r.accept(serve)
	return r, nil
}

// Addr is the address senders or sinks connect to ("" when the receiver
// does not listen).
func (r *Receiver) Addr() string {
	if r.ln == nil {
		return ""
	}
	return r.ln.Addr().String()
}

func (r *Receiver) accept(serve func(*Receiver, net.Conn)) {
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
			serve(r, c)
			_ = c.Close()
			r.mu.Lock()
			delete(r.conns, c)
			r.mu.Unlock()
		}()
	}
}

func (r *Receiver) readLines(c net.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer is no generated line: skip it.
			r.rec.malformed()
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			continue
		}
		if err != nil {
			return
		}
		r.RecordAt(line, time.Now().UnixNano())
	}
}

// Record records the event whose body (or line) is body, arriving now.
func (r *Receiver) Record(body []byte) { r.RecordAt(body, time.Now().UnixNano()) }

// RecordAt records the event whose body is body, arriving at now (Unix
// nanoseconds). A body that carries no generated payload counts as
// malformed.
func (r *Receiver) RecordAt(body []byte, now int64) {
	seq, sent, err := findPayload(body)
	if err != nil {
		r.rec.malformed()
		return
	}
	r.rec.record(seq, sent, now)
}

// Count returns how many distinct events arrived.
func (r *Receiver) Count() int { return r.rec.count() }

// WaitFor waits until n distinct events arrived or ctx is done.
func (r *Receiver) WaitFor(ctx context.Context, n int) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for r.Count() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("received %d of %d events: %w", r.Count(), n, ctx.Err())
		case <-r.rec.arrived:
		case <-t.C:
		}
	}
	return nil
}

// Close stops the receiver, closes the connections it accepted and waits
// for its goroutines.
func (r *Receiver) Close() error {
	var err error
	r.closeOnce.Do(func() {
		close(r.stop)
		if r.ln != nil {
			err = r.ln.Close()
		}
		r.mu.Lock()
		for c := range r.conns {
			_ = c.Close()
		}
		r.mu.Unlock()
	})
	r.wg.Wait()
	if r.onClose != nil {
		r.onClose()
		r.onClose = nil
	}
	return err
}

// Report summarises a run: what arrived, what was lost and duplicated, and
// the latency from send to arrival.
type Report struct {
	Sent, Received, Lost, Duplicated, Malformed int
	P50, P90, P99, P999, Max, Mean              time.Duration

	// FirstArrival and LastArrival bound the deliveries (zero when none).
	FirstArrival, LastArrival time.Time
}

// Report computes the summary for sent events numbered 0..sent-1.
func (r *Receiver) Report(sent int) Report { return r.rec.report(sent, nil) }

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
