package elasticsearchsink

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Options configure a Writer.
type Options struct {
	Name     string   // sink name, for logs and dead letters
	BulkURLs []string // one full _bulk URL (with query) per host
	Index    *indexTemplate
	OpType   string // "index" or "create"
	IDHeader string // header holding the document id; "" for ids the server makes
	// Serializer shapes the documents; the zero value is Flume's default,
	// LogStash.
	Serializer Serializer

	Username, Password string
	APIKey             string // sent as "Authorization: ApiKey <APIKey>"
	TLS                tlsconf.Settings

	Gzip      bool
	GzipLevel int

	MaxBytes       int // most uncompressed bytes in one bulk request
	RequestTimeout time.Duration
	MaxInFlight    int

	InitialBackoff, MaxBackoff time.Duration
	// MaxAttempts is how many rounds of requests one Write makes before it
	// gives up and lets the batch roll back (the runner then backs off).
	MaxAttempts int

	DeadLetterFile string // "" to log and drop rejected documents
}

// counters are the sink's counters beyond Flume's.
type counters struct {
	requests, requestFails       *atomic.Int64
	bytes, uncompressed          *atomic.Int64
	rejected, unavailable        *atomic.Int64
	mapping, other, conflicts    *atomic.Int64
	retries, retriedEvents, dead *atomic.Int64
}

func newCounters(s *metrics.Set) counters {
	return counters{
		requests:      s.Counter("BulkRequestCount"),
		requestFails:  s.Counter("BulkRequestFailCount"),
		bytes:         s.Counter("BulkRequestBytes"),
		uncompressed:  s.Counter("BulkRequestUncompressedBytes"),
		rejected:      s.Counter("BulkItemRejectedCount"),
		unavailable:   s.Counter("BulkItemUnavailableCount"),
		mapping:       s.Counter("BulkItemMappingFailCount"),
		other:         s.Counter("BulkItemOtherFailCount"),
		conflicts:     s.Counter("BulkItemConflictCount"),
		retries:       s.Counter("BulkRetryCount"),
		retriedEvents: s.Counter("EventRetryCount"),
		dead:          s.Counter("DeadLetterCount"),
	}
}

// Item states within one Write.
const (
	stTodo uint8 = iota
	stDone       // indexed (or already there)
	stDead       // rejected for good: to the dead-letter destination
)

// Writer sends batches to the _bulk API. Write returns nil only when every
// event was indexed or dead-lettered; otherwise it remembers which events
// of the batch are done, so that when the rolled-back batch comes back
// (it is at the head of the channel) only the rest is sent again.
type Writer struct {
	guard   string // a request goroutine's name for panics.Guard
	opt     Options
	c       *metrics.SinkCounters
	m       counters
	latency metrics.Histogram
	dropped prometheus.Counter
	log     *slog.Logger

	client *http.Client
	next   atomic.Uint32 // round-robin over BulkURLs
	slots  chan *slot    // one per request allowed in flight

	mu      sync.Mutex // serialises Write and Stop
	enc     []byte     // encoded action and document lines of the batch
	off     []int      // event i is enc[off[i]:off[i+1]]
	state   []uint8
	results []itemResult  // for dead items
	keys    event.Headers // an event's headers by name, kept for the next
	pending *pending
	seed    maphash.Seed
	dlq     *os.File

	streak *logthrottle.Streak // failed rounds
}

// NewWriter returns a Writer. c are the sink's Flume counters; extra
// counters are added to their set.
func NewWriter(opt Options, c *metrics.SinkCounters, reg *metrics.Registry, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	opt.MaxInFlight = max(opt.MaxInFlight, 1)
	opt.MaxAttempts = max(opt.MaxAttempts, 1)
	w := &Writer{
		guard:   "elasticsearch sink " + opt.Name + ": bulk request",
		opt:     opt,
		c:       c,
		m:       newCounters(c.Set),
		latency: reg.Latency(metrics.Stage("bulk_request"), opt.Name),
		dropped: reg.Dropped(opt.Name, "rejected_by_server"),
		log:     log,
		seed:    maphash.MakeSeed(),
		slots:   make(chan *slot, opt.MaxInFlight),
		streak: &logthrottle.Streak{Log: log, Level: slog.LevelWarn,
			Failed:    "elasticsearch sink: bulk indexing failed; retrying with backoff, events stay in the channel until indexed",
			Recovered: "elasticsearch sink: indexing again"},
	}
	for range opt.MaxInFlight {
		w.slots <- &slot{}
	}
	return w
}

// Start builds the HTTP client and opens the dead-letter file.
func (w *Writer) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	tlsCfg, err := w.opt.TLS.ClientConfig("")
	if err != nil {
		return fmt.Errorf("elasticsearch sink %s: %w", w.opt.Name, err)
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				if ctx.Err() == nil {
					w.c.ConnectionFailed.Add(1)
				}
				return nil, err
			}
			w.c.ConnectionCreated.Add(1)
			return &countedConn{Conn: conn, closed: w.c.ConnectionClosed}, nil
		},
		TLSClientConfig:       tlsCfg,
		ForceAttemptHTTP2:     tlsCfg != nil,
		MaxIdleConnsPerHost:   w.opt.MaxInFlight + 1,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	w.client = &http.Client{Transport: tr}
	if w.opt.DeadLetterFile != "" {
		f, err := os.OpenFile(w.opt.DeadLetterFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return fmt.Errorf("elasticsearch sink %s: open dead-letter file: %w", w.opt.Name, err)
		}
		w.dlq = f
	}
	return nil
}

// Stop closes idle connections and the dead-letter file.
func (w *Writer) Stop(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.client != nil {
		w.client.CloseIdleConnections()
	}
	w.streak.Stop()
	if w.dlq != nil {
		err := w.dlq.Close()
		w.dlq = nil
		return err
	}
	return nil
}

type countedConn struct {
	net.Conn
	once   sync.Once
	closed *atomic.Int64
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.closed.Add(1) })
	return c.Conn.Close()
}

// Write indexes events. It retries what the server could not take now
// (whole-request failures, items rejected with 429 or 503) with exponential
// backoff and jitter, resending only those items; it dead-letters items the
// server refused for good. After MaxAttempts rounds it returns an error so
// the batch rolls back and the runner backs off; what was already indexed
// is remembered and not sent again when the batch returns.
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.client == nil {
		return fmt.Errorf("elasticsearch sink %s: not started", w.opt.Name)
	}
	n := len(events)
	w.encode(events)
	w.resume(events)
	todo := make([]int, 0, n)
	for i := range n {
		if w.state[i] == stTodo {
			todo = append(todo, i)
		}
	}
	limit := w.opt.MaxBytes
	var lastErr error
	for attempt := 1; ; attempt++ {
		retry, hint, tooLarge, err := w.round(ctx, todo, limit)
		if err != nil {
			lastErr = err
		}
		if tooLarge > 0 {
			limit = max(tooLarge/2, 1)
		}
		if err := w.deadLetter(events); err != nil {
			w.keep(events)
			return err
		}
		if len(retry) == 0 {
			w.pending = nil
			w.streak.Ok("sink", w.opt.Name)
			return nil
		}
		todo = retry
		if ctx.Err() != nil {
			w.keep(events)
			return fmt.Errorf("elasticsearch sink %s: %d of %d events not indexed: %w", w.opt.Name, len(todo), n, ctx.Err())
		}
		if lastErr == nil {
			lastErr = fmt.Errorf("%d items rejected by the server for now (429/503)", len(todo))
		}
		w.failed(lastErr, len(todo), n)
		if attempt >= w.opt.MaxAttempts {
			w.keep(events)
			// Told by the streak, round by round.
			return logthrottle.AsReported(fmt.Errorf("elasticsearch sink %s: %d of %d events not indexed after %d attempts: %w", w.opt.Name, len(todo), n, attempt, lastErr))
		}
		if err := sleep(ctx, max(w.backoff(attempt), hint)); err != nil {
			w.keep(events)
			return fmt.Errorf("elasticsearch sink %s: %d of %d events not indexed: %w", w.opt.Name, len(todo), n, err)
		}
		w.m.retries.Add(1)
		w.m.retriedEvents.Add(int64(len(todo)))
	}
}

// backoff is the wait before retry round attempt (1-based): exponential
// from InitialBackoff, capped at MaxBackoff, with the upper half jittered.
func (w *Writer) backoff(attempt int) time.Duration {
	d := w.opt.InitialBackoff << min(attempt-1, 30)
	if d <= 0 || d > w.opt.MaxBackoff {
		d = w.opt.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// failed tells a failed round in the sink's failure streak.
func (w *Writer) failed(err error, left, n int) {
	w.streak.Fail(err, "sink", w.opt.Name, "not_indexed", left, "batch", n)
}
