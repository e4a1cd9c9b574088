package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
)

// Transports a Generator sends through: the inputs of sluice's sources.
const (
	SendNetcat = "netcat" // lines over TCP (netcat source; "tcp" is an alias)
	SendAvro   = "avro"   // Flume Avro RPC appendBatch (avro source)
	SendHTTP   = "http"   // POST of a JSON array (http source, JSON handler)
	SendSyslog = "syslog" // RFC 5424 messages over TCP, one a line (syslogtcp source)
)

// MinSize is the smallest event size: a sequence number and a send time
// must fit.
const MinSize = 40

// Load says what a Generator sends.
type Load struct {
	Transport string // one of the Send constants
	Addr      string // host:port of the source
	// Rate is the events per second over all connections; 0 sends as fast
	// as the pipeline takes them.
	Rate float64
	Size int // bytes of each event's body (at least MinSize)
	// Conns is the number of connections (default 1).
	Conns int
	// Count stops after this many events; Duration stops after this long.
	// With neither, the generator runs until its context ends.
	Count    int
	Duration time.Duration
	// Batch is the number of events per call (avro, http) or per write
	// (lines). Default: 1 when paced, 100 when flooding.
	Batch int
	// Phase delays a paced schedule, so two generators at the same rate in
	// one process (a pipeline and its floor) do not wake at the same
	// instants and compete for the CPU.
	Phase time.Duration
}

func (l *Load) normalise() error {
	switch l.Transport {
	case "", "tcp", SendNetcat:
		l.Transport = SendNetcat
	case SendAvro, SendHTTP, SendSyslog, SendOTLP:
	default:
		return fmt.Errorf("unknown transport %q: use netcat, avro, http, syslog or otlp", l.Transport)
	}
	if l.Addr == "" {
		return errors.New("no address to send to")
	}
	if l.Size == 0 {
		l.Size = 1024
	}
	if l.Size < MinSize {
		return fmt.Errorf("event size %d is below %d bytes, the room a sequence number and a send time take", l.Size, MinSize)
	}
	if l.Conns <= 0 {
		l.Conns = 1
	}
	if l.Rate < 0 || l.Count < 0 || l.Duration < 0 {
		return errors.New("rate, count and duration cannot be negative")
	}
	if l.Batch <= 0 {
		l.Batch = 1
		if l.Rate == 0 {
			l.Batch = 100
		}
	}
	return nil
}

// Generator sends numbered, time-stamped events. Sequence numbers are
// handed out from one counter shared by the connections, so the events
// sent are 0..Sent()-1 except the ones Unsent() lists.
type Generator struct {
	load  Load
	limit int // events to send; 0: no limit
	start time.Time
	next  atomic.Uint64
	sent  atomic.Int64 // events written (lines) or acknowledged (avro, http)
	retry atomic.Int64 // calls answered FAILED or 503 and sent again
	lag   atomic.Int64 // the most a paced event went out after it was due, ns
	// refuseLimit ends the run when the source refuses one batch this long
	// (a sink that never delivers keeps the channel full); 0: never.
	refuseLimit time.Duration

	mu     sync.Mutex
	unsent []seqRange
}

// NewGenerator checks load and fills in its defaults.
func NewGenerator(load Load) (*Generator, error) {
	if err := load.normalise(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	g := &Generator{load: load, limit: load.Count}
	if load.Rate > 0 && load.Duration > 0 {
		// Paced for a duration: exactly the events due within it.
		if n := int(math.Ceil(load.Rate * load.Duration.Seconds())); g.limit == 0 || n < g.limit {
			g.limit = n
		}
	}
	return g, nil
}

// Load is the load with its defaults filled in.
func (g *Generator) Load() Load { return g.load }

// Run sends until the count or duration is reached or ctx ends (then it
// returns nil: a cut-short run is still a run). It returns the first error
// of a connection; the other connections stop too.
func (g *Generator) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.start = time.Now().Add(g.load.Phase)
	var deadline time.Time
	if g.load.Duration > 0 {
		deadline = g.start.Add(g.load.Duration)
	}
	errs := make(chan error, g.load.Conns)
	for range g.load.Conns {
		go func() {
			err := g.conn(ctx, deadline)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for range g.load.Conns {
		if err := <-errs; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	return first
}

// Sent is the count of sequence numbers handed out, so every event sent is
// numbered below it.
func (g *Generator) Sent() int {
	n := int(g.next.Load())
	if g.limit > 0 {
		n = min(n, g.limit)
	}
	return n
}

// Acked is the number of events written (lines) or acknowledged by the
// source (avro OK, http 200).
func (g *Generator) Acked() int { return int(g.sent.Load()) }

// Retries is the number of calls the source refused (FAILED, 503) and the
// generator sent again.
func (g *Generator) Retries() int { return int(g.retry.Load()) }

// MaxLag is the most a paced event went out after it was due: when it
// approaches the interval between events, the generator (or the pipeline
// holding it back) did not keep the rate.
func (g *Generator) MaxLag() time.Duration { return time.Duration(g.lag.Load()) }

// Unsent lists the numbers handed out but not sent (the run was cut short).
func (g *Generator) unsentRanges() []seqRange {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]seqRange(nil), g.unsent...)
}

func (g *Generator) conn(ctx context.Context, deadline time.Time) error {
	cl, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	var interval time.Duration
	if g.load.Rate > 0 {
		interval = time.Duration(float64(time.Second) / g.load.Rate)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if ctx.Err() != nil || !deadline.IsZero() && !time.Now().Before(deadline) {
			return nil
		}
		n := uint64(g.load.Batch)
		first := g.next.Add(n) - n
		if g.limit > 0 {
			if first >= uint64(g.limit) {
				return nil
			}
			n = min(n, uint64(g.limit)-first)
		}
		if interval > 0 {
			// Due when the last event of the batch is due.
			due := g.start.Add(time.Duration(first+n-1) * interval)
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					g.abandon(first, n)
					return nil
				case <-timer.C:
				}
			}
			for lag := int64(time.Since(due)); ; {
				m := g.lag.Load()
				if lag <= m || g.lag.CompareAndSwap(m, lag) {
					break
				}
			}
		}
		if err := g.sendBatch(ctx, cl, first, int(n)); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		g.sent.Add(int64(n))
	}
}

func (g *Generator) abandon(first, n uint64) {
	g.mu.Lock()
	g.unsent = append(g.unsent, seqRange{first, n})
	g.mu.Unlock()
}

// sendBatch sends events first..first+n-1, stamped now, and sends a refused
// call again (after a pause) until the source takes it.
func (g *Generator) sendBatch(ctx context.Context, cl client, first uint64, n int) error {
	now := time.Now()
	pause := time.Millisecond
	for {
		ok, err := cl.send(ctx, first, n, now)
		if err != nil || ok {
			return err
		}
		if g.refuseLimit > 0 && time.Since(now) > g.refuseLimit {
			return fmt.Errorf("bench: the source has refused a batch for %v (its channel stays full: is the sink delivering?)", time.Since(now).Round(time.Second))
		}
		g.retry.Add(1)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// client sends batches over one connection. send reports false when the
// source refused the batch (it may be sent again).
type client interface {
	send(ctx context.Context, first uint64, n int, sent time.Time) (ok bool, err error)
	close()
}

func (g *Generator) dial(ctx context.Context) (client, error) {
	switch g.load.Transport {
	case SendAvro:
		c, err := avrorpc.Dial(ctx, g.load.Addr, avrorpc.ClientConfig{})
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		return &avroClient{c: c, size: g.load.Size}, nil
	case SendOTLP:
		return dialOTLP(g.load.Addr, g.load.Size)
	case SendHTTP:
		return &httpClient{
			url:  "http://" + g.load.Addr + "/",
			hc:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}},
			size: g.load.Size,
		}, nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", g.load.Addr)
	if err != nil {
		return nil, fmt.Errorf("bench: connect %s: %w", g.load.Addr, err)
	}
	lc := &lineClient{conn: c, bw: bufio.NewWriterSize(c, 256<<10), size: g.load.Size, done: make(chan struct{})}
	if g.load.Transport == SendSyslog {
		host, _ := os.Hostname()
		if host == "" {
			host = "-"
		}
		lc.syslogHost = host
	}
	go func() {
		defer close(lc.done)
		_, _ = io.Copy(io.Discard, c) // netcat's OK lines
	}()
	return lc, nil
}

// lineClient writes one event a line: the generated line itself (netcat),
// or an RFC 5424 message whose MSG is the generated line (syslog).
type lineClient struct {
	conn       net.Conn
	bw         *bufio.Writer
	buf        []byte
	size       int
	syslogHost string // set for syslog
	done       chan struct{}
}

func (c *lineClient) send(_ context.Context, first uint64, n int, sent time.Time) (bool, error) {
	for i := range n {
		c.buf = c.buf[:0]
		if c.syslogHost != "" {
			c.buf = appendSyslogHeader(c.buf, sent, c.syslogHost)
		}
		c.buf = AppendLine(c.buf, first+uint64(i), sent, c.size)
		if _, err := c.bw.Write(c.buf); err != nil {
			return false, err
		}
	}
	return true, c.bw.Flush()
}

func (c *lineClient) close() {
	if tc, ok := c.conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
	}
	_ = c.conn.Close()
}

// appendSyslogHeader appends an RFC 5424 header (facility user, severity
// notice) up to the MSG.
func appendSyslogHeader(b []byte, t time.Time, host string) []byte {
	b = append(b, "<13>1 "...)
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
	b = append(b, ' ')
	b = append(b, host...)
	b = append(b, " sluice-bench "...)
	b = strconv.AppendInt(b, int64(os.Getpid()), 10)
	return append(b, " - - "...)
}

// avroClient sends each batch in one appendBatch call.
type avroClient struct {
	c      *avrorpc.Client
	size   int
	events []event.Event
	buf    []byte
}

func (c *avroClient) send(ctx context.Context, first uint64, n int, sent time.Time) (bool, error) {
	c.buf, c.events = c.buf[:0], c.events[:0]
	for i := range n {
		start := len(c.buf)
		c.buf = AppendLine(c.buf, first+uint64(i), sent, c.size)
		c.events = append(c.events, event.Event{Body: c.buf[start : len(c.buf)-1]})
	}
	// Bodies alias buf, which may have moved while it grew: point them again.
	off := 0
	for i := range c.events {
		l := len(c.events[i].Body) + 1
		c.events[i].Body = c.buf[off : off+l-1]
		off += l
	}
	st, err := c.c.AppendBatch(ctx, c.events)
	if err != nil {
		return false, fmt.Errorf("bench: avro appendBatch: %w", err)
	}
	return st == avrorpc.OK, nil
}

func (c *avroClient) close() { _ = c.c.Close() }

// httpClient posts each batch as a JSON array to the JSON handler.
type httpClient struct {
	url  string
	hc   *http.Client
	size int
	buf  []byte
	line []byte
}

func (c *httpClient) send(ctx context.Context, first uint64, n int, sent time.Time) (bool, error) {
	c.buf = append(c.buf[:0], '[')
	for i := range n {
		if i > 0 {
			c.buf = append(c.buf, ',')
		}
		c.line = AppendLine(c.line[:0], first+uint64(i), sent, c.size)
		// A generated line is digits, spaces and 'x': no JSON escaping.
		c.buf = append(c.buf, `{"headers":{},"body":"`...)
		c.buf = append(c.buf, c.line[:len(c.line)-1]...)
		c.buf = append(c.buf, `"}`...)
	}
	c.buf = append(c.buf, ']')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.buf))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("bench: http post: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusServiceUnavailable:
		return false, nil
	}
	return false, fmt.Errorf("bench: http source answered %s", resp.Status)
}

func (c *httpClient) close() { c.hc.CloseIdleConnections() }
