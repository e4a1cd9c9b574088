package essink

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
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

// minSplit is the smallest request a batch is split into for the sake of
// parallelism (with maxInFlight > 1).
const minSplit = 256 << 10

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
	results []itemResult // for dead items
	keys    []string
	pending *pending
	seed    maphash.Seed
	dlq     *os.File

	streak *logthrottle.Streak // failed rounds
}

// slot holds the buffers of one in-flight request.
type slot struct {
	raw  bytes.Buffer // items that are not consecutive, concatenated
	zip  bytes.Buffer // the compressed body
	gz   *gzip.Writer
	resp bytes.Buffer
}

// pending is what a failed Write leaves for its retry: the hash of every
// event's body, in order, and which of them are done.
type pending struct {
	sums  []uint64
	state []uint8
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

// encode fills enc and off with the bulk lines of events and resets state.
func (w *Writer) encode(events []event.Event) {
	now := event.Now()
	enc := w.enc[:0]
	off := append(w.off[:0], 0)
	for i := range events {
		e := &events[i]
		ms, text := eventTime(e, now)
		enc = append(enc, `{"`...)
		enc = append(enc, w.opt.OpType...)
		enc = append(enc, `":{"_index":"`...)
		name := len(enc)
		enc = w.opt.Index.appendName(enc, e.Headers, ms)
		if needsEscape(enc[name:]) {
			s := string(enc[name:])
			enc = appendJSONString(enc[:name-1], s)
		} else {
			enc = append(enc, '"')
		}
		if w.opt.IDHeader != "" {
			if id, ok := e.Headers[w.opt.IDHeader]; ok && id != "" {
				enc = append(enc, `,"_id":`...)
				enc = appendJSONString(enc, id)
			}
		}
		enc = append(enc, "}}\n"...)
		switch w.opt.Serializer {
		case LogStash:
			enc, w.keys = appendLogStash(enc, e, ms, text, w.keys)
		case Dynamic:
			enc, w.keys = appendDynamic(enc, e, w.keys)
		default:
			enc, w.keys = appendDocument(enc, e, ms, text, w.keys)
		}
		enc = append(enc, '\n')
		off = append(off, len(enc))
	}
	w.enc, w.off = enc, off
	if cap(w.state) < len(events) {
		w.state = make([]uint8, len(events))
		w.results = make([]itemResult, len(events))
	}
	w.state = w.state[:len(events)]
	w.results = w.results[:len(events)]
	clear(w.state)
	clear(w.results)
}

func needsEscape(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

func (w *Writer) sum(e *event.Event) uint64 { return maphash.Bytes(w.seed, e.Body) }

// resume marks the events a previous failed Write finished, when events
// start with that Write's batch (a rollback puts it back at the head of
// the channel).
func (w *Writer) resume(events []event.Event) {
	p := w.pending
	w.pending = nil
	if p == nil || len(events) < len(p.sums) {
		return
	}
	for i, s := range p.sums {
		if w.sum(&events[i]) != s {
			return
		}
	}
	copy(w.state, p.state)
}

// keep remembers which events are done, for the retry of this batch.
func (w *Writer) keep(events []event.Event) {
	p := &pending{sums: make([]uint64, len(events)), state: append([]uint8(nil), w.state...)}
	for i := range events {
		p.sums[i] = w.sum(&events[i])
		if p.state[i] == stDead {
			p.state[i] = stTodo // not written to the dead-letter file yet
		}
	}
	w.pending = p
}

// round sends the items of todo in requests of at most limit bytes, up to
// MaxInFlight at a time. It marks indexed items done and rejected ones dead
// and returns the items to retry, the longest Retry-After, the size of a
// request refused as too large (0 if none) and the last whole-request error.
func (w *Writer) round(ctx context.Context, todo []int, limit int) (retry []int, hint time.Duration, tooLarge int, err error) {
	reqs := w.split(todo, limit)
	if len(reqs) == 1 || w.opt.MaxInFlight == 1 {
		for _, r := range reqs {
			o := w.send(ctx, r)
			retry = append(retry, o.retry...)
			hint, err = max(hint, o.hint), cmpErr(err, o.err)
			tooLarge = max(tooLarge, o.tooLarge)
		}
		return retry, hint, tooLarge, err
	}
	outs := make([]outcome, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			defer panics.Guard(w.guard)
			outs[i] = w.send(ctx, r)
		})
	}
	wg.Wait()
	for _, o := range outs {
		retry = append(retry, o.retry...)
		hint, err = max(hint, o.hint), cmpErr(err, o.err)
		tooLarge = max(tooLarge, o.tooLarge)
	}
	return retry, hint, tooLarge, err
}

func cmpErr(a, b error) error {
	if b != nil {
		return b
	}
	return a
}

// split cuts todo into requests of at most limit bytes (a larger single
// item goes alone) and, with MaxInFlight > 1, into up to MaxInFlight parts
// of about equal size and at least minSplit bytes.
func (w *Writer) split(todo []int, limit int) [][]int {
	size := func(i int) int { return w.off[i+1] - w.off[i] }
	total := 0
	for _, i := range todo {
		total += size(i)
	}
	parts := 1
	if w.opt.MaxInFlight > 1 {
		parts = max(1, min(w.opt.MaxInFlight, total/minSplit))
	}
	var out [][]int
	start, cur, cum, next := 0, 0, 0, 1
	for k, i := range todo {
		sz := size(i)
		if k > start && cur+sz > limit {
			out = append(out, todo[start:k])
			start, cur = k, 0
		}
		cur += sz
		cum += sz
		if next < parts && cum >= next*total/parts && k+1 < len(todo) {
			out = append(out, todo[start:k+1])
			start, cur = k+1, 0
			next++
		}
	}
	if start < len(todo) {
		out = append(out, todo[start:])
	}
	return out
}

// outcome is what one request left to do.
type outcome struct {
	retry    []int
	hint     time.Duration
	tooLarge int
	err      error
}

// send makes one bulk request for items and sorts their results.
func (w *Writer) send(ctx context.Context, items []int) outcome {
	s := <-w.slots
	defer func() { w.slots <- s }()
	body, raw, err := w.body(s, items)
	if err != nil {
		return outcome{retry: items, err: err}
	}
	url := w.opt.BulkURLs[int(w.next.Add(1))%len(w.opt.BulkURLs)]
	rctx, cancel := context.WithTimeout(ctx, w.opt.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return outcome{retry: items, err: err}
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if w.opt.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	switch {
	case w.opt.APIKey != "":
		req.Header.Set("Authorization", "ApiKey "+w.opt.APIKey)
	case w.opt.Username != "":
		req.SetBasicAuth(w.opt.Username, w.opt.Password)
	}
	w.m.requests.Add(1)
	w.m.bytes.Add(int64(len(body)))
	w.m.uncompressed.Add(int64(raw))
	start := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			w.m.requestFails.Add(1)
		}
		return outcome{retry: items, err: fmt.Errorf("bulk request to %s: %w", redact(url), err)}
	}
	s.resp.Reset()
	_, err = s.resp.ReadFrom(resp.Body)
	_ = resp.Body.Close() // read to the end above
	w.latency.Observe(time.Since(start))
	if err != nil {
		w.m.requestFails.Add(1)
		return outcome{retry: items, err: fmt.Errorf("bulk request to %s: read response: %w", redact(url), err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		w.m.requestFails.Add(1)
		o := outcome{retry: items, hint: retryAfter(resp.Header.Get("Retry-After"), w.opt.MaxBackoff),
			err: fmt.Errorf("bulk request to %s: %s: %s", redact(url), resp.Status, snippet(s.resp.Bytes()))}
		if resp.StatusCode == http.StatusRequestEntityTooLarge {
			if len(items) == 1 {
				w.results[items[0]] = itemResult{Status: resp.StatusCode, Error: appendJSONString(nil, "request entity too large: "+strconv.Itoa(raw)+" bytes")}
				w.state[items[0]] = stDead
				w.m.other.Add(1)
				return outcome{}
			}
			o.tooLarge = raw
		}
		return o
	}
	results, err := parseBulkResponse(s.resp.Bytes(), len(items))
	if err != nil {
		w.m.requestFails.Add(1)
		return outcome{retry: items, err: fmt.Errorf("bulk request to %s: %w", redact(url), err)}
	}
	if results == nil {
		for _, i := range items {
			w.state[i] = stDone
		}
		return outcome{}
	}
	var o outcome
	create409 := w.opt.OpType == "create" && w.opt.IDHeader != ""
	for k, i := range items {
		r := results[k]
		switch classify(r, create409) {
		case classOK:
			w.state[i] = stDone
		case classConflict:
			w.m.conflicts.Add(1)
			w.state[i] = stDone
		case classRejected:
			w.m.rejected.Add(1)
			o.retry = append(o.retry, i)
		case classUnavailable:
			w.m.unavailable.Add(1)
			o.retry = append(o.retry, i)
		case classMapping:
			w.m.mapping.Add(1)
			w.state[i], w.results[i] = stDead, r
		default:
			w.m.other.Add(1)
			w.state[i], w.results[i] = stDead, r
		}
	}
	return o
}

// body builds the request body of items in s and returns it with its
// uncompressed size. Consecutive items are taken from the encode buffer
// without a copy.
func (w *Writer) body(s *slot, items []int) ([]byte, int, error) {
	first, last := items[0], items[len(items)-1]
	var raw []byte
	if last-first == len(items)-1 {
		raw = w.enc[w.off[first]:w.off[last+1]]
	} else {
		s.raw.Reset()
		for _, i := range items {
			s.raw.Write(w.enc[w.off[i]:w.off[i+1]])
		}
		raw = s.raw.Bytes()
	}
	if !w.opt.Gzip {
		return raw, len(raw), nil
	}
	s.zip.Reset()
	if s.gz == nil {
		gz, err := gzip.NewWriterLevel(&s.zip, w.opt.GzipLevel)
		if err != nil {
			return nil, 0, err
		}
		s.gz = gz
	} else {
		s.gz.Reset(&s.zip)
	}
	if _, err := s.gz.Write(raw); err != nil {
		return nil, 0, err
	}
	if err := s.gz.Close(); err != nil {
		return nil, 0, err
	}
	return s.zip.Bytes(), len(raw), nil
}

func retryAfter(v string, ceiling time.Duration) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return min(time.Duration(n)*time.Second, ceiling)
	}
	return 0
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// redact drops the query from a bulk URL for messages.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// deadLetter writes the events marked dead to the dead-letter file (one
// JSON line each, then fsync) or, without one, logs and counts them as
// dropped. On success they are done.
func (w *Writer) deadLetter(events []event.Event) error {
	var buf []byte
	count := 0
	var first string
	for i, st := range w.state {
		if st != stDead {
			continue
		}
		count++
		r := w.results[i]
		if first == "" {
			first = r.errorText()
		}
		if w.dlq != nil {
			buf = w.appendDeadLetter(buf, &events[i], r)
		}
	}
	if count == 0 {
		return nil
	}
	if w.dlq != nil {
		if _, err := w.dlq.Write(buf); err != nil {
			return fmt.Errorf("elasticsearch sink %s: write dead-letter file: %w", w.opt.Name, err)
		}
		if err := w.dlq.Sync(); err != nil {
			return fmt.Errorf("elasticsearch sink %s: sync dead-letter file: %w", w.opt.Name, err)
		}
		w.log.Warn("elasticsearch sink: documents rejected by the server were written to the dead-letter file",
			"sink", w.opt.Name, "count", count, "file", w.opt.DeadLetterFile, "first_error", first)
	} else {
		w.dropped.Add(float64(count))
		w.log.Error("elasticsearch sink: documents rejected by the server were dropped (set deadLetter.file to keep them)",
			"sink", w.opt.Name, "count", count, "first_error", first)
	}
	w.m.dead.Add(int64(count))
	for i, st := range w.state {
		if st == stDead {
			w.state[i] = stDone
			w.results[i] = itemResult{}
		}
	}
	return nil
}

// appendDeadLetter appends one dead-letter line: time, sink, index, HTTP
// status, the server's error, the event's headers and its body (a string
// when it is UTF-8, else "body_base64").
func (w *Writer) appendDeadLetter(dst []byte, e *event.Event, r itemResult) []byte {
	ms, _ := eventTime(e, event.Now())
	dst = append(dst, `{"time":"`...)
	dst = time.Now().UTC().AppendFormat(dst, timestampLayout)
	dst = append(dst, `","sink":`...)
	dst = appendJSONString(dst, w.opt.Name)
	dst = append(dst, `,"index":`...)
	dst = appendJSONString(dst, string(w.opt.Index.appendName(nil, e.Headers, ms)))
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, `,"error":`...)
	if len(r.Error) > 0 {
		dst = append(dst, compact(r.Error)...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"headers":{`...)
	w.keys = w.keys[:0]
	for k := range e.Headers {
		w.keys = append(w.keys, k)
	}
	slices.Sort(w.keys)
	for j, k := range w.keys {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, e.Headers[k])
	}
	dst = append(dst, '}')
	if utf8.Valid(e.Body) {
		dst = append(dst, `,"body":`...)
		dst = appendJSONBytes(dst, e.Body)
	} else {
		dst = append(dst, `,"body_base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, e.Body)
		dst = append(dst, '"')
	}
	return append(dst, "}\n"...)
}

// compact returns raw JSON on one line.
func compact(raw []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return appendJSONBytes(nil, raw)
	}
	return b.Bytes()
}
