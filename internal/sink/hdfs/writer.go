package hdfssink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/bucketpath"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Options configure a Writer (see New for the properties behind them).
type Options struct {
	Path        *bucketpath.Template // hdfs.path
	Prefix      *bucketpath.Template // hdfs.filePrefix
	Suffix      string               // hdfs.fileSuffix (not escaped, as in Flume)
	InUsePrefix string
	InUseSuffix string
	Time        bucketpath.Options

	RollInterval time.Duration
	RollSize     int64
	RollCount    int64
	IdleTimeout  time.Duration
	MaxOpenFiles int

	CallTimeout   time.Duration
	CloseTries    int           // 0: until it works
	RetryInterval time.Duration // longest wait between tries to finish a file
	// MaxPendingBytes bounds the bytes of closed files waiting to be
	// finished (uploads during an S3 outage); past it Write pushes back.
	MaxPendingBytes int64
	// Threads finish (rename, upload) closed files at once
	// (hdfs.threadsPoolSize).
	Threads int

	Format     format
	StagingDir string
	DefaultFS  string // Hadoop's fs.defaultFS, for paths without a scheme
}

// counters are the sink's Flume counters plus its own.
type counters struct {
	*metrics.SinkCounters
	opened, closed, failed, bytes, timeFallback *atomic.Int64
	finishLatency                               metrics.Histogram
}

// Writer writes batches into bucket files (one per expanded path and
// prefix), rolls them, and hands closed files to a finisher that renames
// or uploads them. Write, the roll timer and Stop are serialised by mu.
type Writer struct {
	opt   Options
	store store
	c     *counters
	log   *slog.Logger
	warn  *logthrottle.Throttle

	j   *journal
	fin *finisher

	mu sync.Mutex
	// buckets holds the buckets with an open file, and only those: open
	// adds a bucket and queue, through which every file leaves (a roll by
	// count, size, interval or idleness, a failure, eviction, stop),
	// removes it. The roll timer relies on it: every bucket it sees has a
	// file, a record and an open time.
	buckets     map[string]*bucket
	lastCounter int64
	use         int64 // LRU clock
	touched     []*bucket
	dirBuf      []byte
	nameBuf     []byte

	roller flow.Worker
	// rolled, when set (tests), receives the target of each file the timer closes.
	rolled chan<- string
}

// bucket is one open file and its roll state (Flume's BucketWriter).
type bucket struct {
	key, dir, name string
	rec            *record
	f              pendingFile
	enc            encoder
	size           int64 // durable length of the file
	events, bytes  int64 // events and body bytes in the file (roll count and size)
	batch          bool  // has events of the current batch
	opened         time.Time
	lastWrite      time.Time
	lastUse        int64
}

func newWriter(opt Options, st store, c *counters, log *slog.Logger) *Writer {
	return &Writer{opt: opt, store: st, c: c, log: log, warn: logthrottle.New(time.Minute, 3),
		buckets: map[string]*bucket{}}
}

// Start opens the staging journal, queues every file an earlier run left
// unfinished (after cutting it after its last complete batch), and starts
// the roll timer and the finisher.
func (w *Writer) Start(ctx context.Context) error {
	j, err := openJournal(w.opt.StagingDir)
	if err != nil {
		return fmt.Errorf("hdfs: %w", err)
	}
	w.j = j
	w.fin = newFinisher(w)
	recs, err := j.list()
	if err != nil {
		_ = j.close()
		return fmt.Errorf("hdfs: read staging journal: %w", err)
	}
	for _, rec := range recs {
		if rec.Store != w.store.String() {
			w.log.Warn("hdfs: the staging journal names a file of another store; it is left for the agent that wrote it",
				"file", rec.Target, "store", rec.Store, "staging", w.opt.StagingDir)
			continue
		}
		if !rec.Closed {
			if err := w.store.trim(ctx, rec); err != nil {
				w.log.Error("hdfs: cannot cut a file left open by an earlier run after its last complete batch; it is finished as it is", "file", rec.InUse, "err", err)
			}
			rec.Closed = true
			if err := j.put(rec); err != nil {
				_ = j.close()
				return fmt.Errorf("hdfs: update staging journal: %w", err)
			}
		}
		w.log.Info("hdfs: finishing a file an earlier run left unfinished", "file", rec.Target, "in_use", rec.InUse)
		w.fin.add(rec, 0)
	}
	w.fin.start()
	tick := time.Second
	for _, d := range []time.Duration{w.opt.RollInterval, w.opt.IdleTimeout} {
		if d > 0 && d/4 < tick {
			tick = max(d/4, 5*time.Millisecond)
		}
	}
	w.roller.Go("hdfs sink "+w.c.Name+": roll timer", func(ctx context.Context) { w.rollLoop(ctx, tick) })
	return nil
}

// Stop closes every open file, waits (bounded by ctx) for the finisher to
// finish them, and releases the journal. Files not finished by then stay
// in the journal and are finished at the next start.
func (w *Writer) Stop(ctx context.Context) error {
	_ = w.roller.Stop(context.Background()) // fails only when its context ends
	w.mu.Lock()
	var errs []error
	for _, b := range w.buckets {
		if err := w.closeBucket(b, "stop"); err != nil {
			errs = append(errs, err)
		}
	}
	clear(w.buckets)
	w.mu.Unlock()
	if w.fin != nil {
		if left := w.fin.drain(ctx); left > 0 {
			w.log.Warn("hdfs: stopped before every closed file was finished; they are kept in the staging directory and finished at the next start",
				"files", left, "staging", w.opt.StagingDir)
		}
	}
	if w.j != nil {
		if err := w.j.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := w.store.close(); err != nil {
		errs = append(errs, err)
	}
	w.warn.Flush()
	return errors.Join(errs...)
}

// Health reports a store that has refused to finish files for a while.
func (w *Writer) Health() error {
	if w.fin == nil {
		return nil
	}
	return w.fin.health()
}

func (w *Writer) rollLoop(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.mu.Lock()
			var rolled []string
			for k, b := range w.buckets {
				reason := ""
				switch {
				case w.opt.RollInterval > 0 && now.Sub(b.opened) >= w.opt.RollInterval:
					reason = "rollInterval"
				case w.opt.IdleTimeout > 0 && now.Sub(b.lastWrite) >= w.opt.IdleTimeout:
					reason = "idleTimeout"
				default:
					continue
				}
				target := b.rec.Target
				if err := w.closeBucket(b, reason); err != nil {
					w.warn.Log(w.log, slog.LevelError, "close", "hdfs: closing a file failed; it is finished as far as its last complete batch", "file", target, "err", err)
				}
				delete(w.buckets, k)
				rolled = append(rolled, target)
			}
			ch := w.rolled
			w.mu.Unlock()
			if ch != nil {
				for _, r := range rolled {
					ch <- r
				}
			}
		}
	}
}

// Write appends events to their bucket files and returns once each file
// they went to is durable (synced to disk or staging, or hflushed).
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	if err := w.fin.pushback(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	nowMs := now.UnixMilli()
	w.touched = w.touched[:0]
	var err error
	for i := range events {
		e := &events[i]
		var b *bucket
		if b, err = w.bucketFor(e, nowMs); err != nil {
			break
		}
		if b.f != nil && w.shouldRotate(b) {
			if err = w.closeBucket(b, "roll"); err != nil {
				break
			}
		}
		if b.f == nil {
			if err = w.open(ctx, b, now); err != nil {
				break
			}
		}
		if !b.batch {
			b.batch = true
			w.touched = append(w.touched, b)
		}
		if err = b.enc.add(e, eventKey(e, nowMs)); err != nil {
			err = fmt.Errorf("encode event for %s: %w", b.rec.Target, err)
			break
		}
		b.events++
		b.bytes += int64(len(e.Body))
		w.use++
		b.lastUse = w.use
	}
	if err == nil {
		for _, b := range w.touched {
			if err = w.flush(b); err != nil {
				break
			}
		}
	}
	if err != nil {
		w.c.ConnectionFailed.Add(1)
		w.c.failed.Add(1)
		// Every file the batch touched is cut back to its last complete
		// batch and closed, so that the retry starts clean files.
		for _, b := range w.touched {
			if b.f != nil {
				w.abandon(b)
			}
			b.batch = false
		}
		return err
	}
	for _, b := range w.touched {
		b.batch = false
		b.lastWrite = now
		if w.shouldRotate(b) {
			if err := w.closeBucket(b, "roll"); err != nil {
				w.warn.Log(w.log, slog.LevelError, "close", "hdfs: closing a rolled file failed", "file", b.rec.Target, "err", err)
			}
		}
	}
	w.evict()
	return nil
}

// bucketFor returns the bucket of e's expanded path and prefix.
func (w *Writer) bucketFor(e *event.Event, nowMs int64) (*bucket, error) {
	ms := nowMs
	if w.opt.Path.Timed() || w.opt.Prefix.Timed() {
		var ok bool
		if ms, ok = bucketpath.Time(e.Headers, &w.opt.Time, nowMs); !ok {
			// Flume fails the whole transaction, forever; sluice files the
			// event by the time it was received and says so.
			ms = nowMs
			if e.ReceivedAt > 0 {
				ms = e.ReceivedAt / 1e6
			}
			w.c.timeFallback.Add(1)
			w.warn.Log(w.log, slog.LevelWarn, "notime", "hdfs: event without a valid timestamp header (add the timestamp interceptor or set hdfs.useLocalTimeStamp); it is filed by the time the agent received it",
				"timestamp", e.Headers.Value("timestamp"))
		}
	}
	w.dirBuf = w.opt.Path.Expand(w.dirBuf[:0], e.Headers, ms, &w.opt.Time)
	w.nameBuf = w.opt.Prefix.Expand(w.nameBuf[:0], e.Headers, ms, &w.opt.Time)
	if bytes.Contains(w.dirBuf, dotdot) || bytes.Contains(w.nameBuf, dotdot) {
		// A header must not lead a file out of the configured directory.
		w.dirBuf, w.nameBuf = noParent(w.dirBuf), noParent(w.nameBuf)
		w.warn.Log(w.log, slog.LevelWarn, "dotdot", "hdfs: an event's headers put \"..\" in its path; written as \"__\" so it stays under hdfs.path")
	}
	// The lookup does not allocate: Go reads a map with a string made of
	// bytes in place.
	n := len(w.dirBuf)
	w.dirBuf = append(w.dirBuf, '/')
	w.dirBuf = append(w.dirBuf, w.nameBuf...)
	if b, ok := w.buckets[string(w.dirBuf)]; ok {
		return b, nil
	}
	// Not in buckets until open gives it a file.
	return &bucket{key: string(w.dirBuf), dir: string(w.dirBuf[:n]), name: string(w.nameBuf)}, nil
}

func (w *Writer) shouldRotate(b *bucket) bool {
	return (w.opt.RollCount > 0 && b.events >= w.opt.RollCount) ||
		(w.opt.RollSize > 0 && b.bytes >= w.opt.RollSize)
}

// open starts the bucket's next file: <prefix>.<counter><suffix or codec
// extension>, written as <inUsePrefix><name><inUseSuffix>, as Flume names
// them; the counter starts at the current time in ms and only grows.
func (w *Writer) open(ctx context.Context, b *bucket, now time.Time) error {
	counter := max(now.UnixMilli(), w.lastCounter+1)
	w.lastCounter = counter
	name := b.name + "." + strconv.FormatInt(counter, 10)
	if w.opt.Suffix != "" {
		name += w.opt.Suffix
	} else if c := w.opt.Format.codec(); c != nil {
		name += c.ext
	}
	loc, err := parseLocation(b.dir, w.opt.DefaultFS)
	if err != nil {
		return err
	}
	rec := &record{ID: w.j.newID(), Store: w.store.String(), Format: w.opt.Format,
		Target: path.Join(loc.path, name), InUse: path.Join(loc.path, w.opt.InUsePrefix+name+w.opt.InUseSuffix)}
	switch loc.scheme {
	case "s3a", "s3", "s3n":
		rec.Target = trimSlash(rec.Target)
		rec.Staged, rec.InUse = true, w.j.stagingPath(rec.ID)
	case "hdfs":
		rec.HDFSInUse = rec.InUse
		rec.Staged, rec.InUse = true, w.j.stagingPath(rec.ID)
	}
	if err := w.j.put(rec); err != nil {
		return fmt.Errorf("record %s in the staging journal: %w", rec.Target, err)
	}
	cctx, cancel := w.callCtx(ctx)
	f, err := w.store.create(cctx, rec)
	cancel()
	if err != nil {
		return fmt.Errorf("create %s: %w", rec.InUse, errors.Join(err, w.j.remove(rec)))
	}
	enc, err := w.opt.Format.newEncoder()
	if err != nil {
		_ = f.Close() // nothing was written to it
		return err
	}
	b.rec, b.f, b.enc = rec, f, enc
	b.size, b.events, b.bytes = 0, 0, 0
	b.opened, b.lastWrite = now, now
	w.buckets[b.key] = b
	w.c.ConnectionCreated.Add(1)
	w.c.opened.Add(1)
	w.log.Debug("hdfs: opened file", "file", rec.InUse)
	return nil
}

func trimSlash(s string) string {
	for len(s) > 0 && s[0] == '/' {
		s = s[1:]
	}
	return s
}

func (w *Writer) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if w.opt.CallTimeout > 0 {
		return context.WithTimeout(ctx, w.opt.CallTimeout)
	}
	return context.WithCancel(ctx)
}

// flush writes the bucket's batch bytes and makes them durable.
func (w *Writer) flush(b *bucket) error {
	data, err := b.enc.endBatch()
	if err != nil {
		return fmt.Errorf("encode %s: %w", b.rec.Target, err)
	}
	if len(data) > 0 {
		if _, err := b.f.Write(data); err != nil {
			return fmt.Errorf("write %s: %w", b.rec.InUse, err)
		}
	}
	if err := b.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", b.rec.InUse, err)
	}
	b.size += int64(len(data))
	w.c.bytes.Add(int64(len(data)))
	return nil
}

// closeBucket ends the bucket's file and queues it to be finished. Any
// batch in progress in it is flushed first (a roll inside a batch).
func (w *Writer) closeBucket(b *bucket, reason string) error {
	if b.f == nil {
		return nil
	}
	var err error
	if b.batch {
		err = w.flush(b)
	}
	if err == nil {
		var data []byte
		if data, err = b.enc.close(); err == nil && len(data) > 0 {
			if _, err = b.f.Write(data); err == nil {
				err = b.f.Sync()
				b.size += int64(len(data))
			}
		}
	}
	if err != nil {
		w.abandon(b)
		return err
	}
	if err := b.f.Close(); err != nil {
		w.abandon(b)
		return fmt.Errorf("close %s: %w", b.rec.InUse, err)
	}
	w.log.Debug("hdfs: closed file", "file", b.rec.InUse, "reason", reason, "events", b.events)
	w.queue(b, true)
	return nil
}

// abandon cuts the bucket's file back to its last durable batch, closes it
// and queues it to be finished as it is. Where the store cannot cut (HDFS)
// the file keeps what it got of the failed batch, whose events come again.
func (w *Writer) abandon(b *bucket) {
	cut := true
	if err := b.f.Truncate(b.size); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		w.warn.Log(w.log, slog.LevelWarn, "truncate", "hdfs: cannot cut a failed batch from a file; it is left in the staging journal and cut and finished at the next start", "file", b.rec.InUse, "err", err)
		cut = false
	}
	_ = b.f.Close() // the failure that brought us here is returned by the caller
	b.batch = false
	w.queue(b, cut)
}

// queue hands the bucket's closed file to the finisher. A file that could
// not be cut back after a failure (finish false) stays in the journal as
// open, so the next start trims it before finishing it.
func (w *Writer) queue(b *bucket, finish bool) {
	rec, size := b.rec, b.size
	b.f, b.enc, b.rec = nil, nil, nil
	delete(w.buckets, b.key)
	if finish {
		rec.Closed = true
		w.fin.add(rec, size)
	}
}

// evict closes the least recently used files beyond maxOpenFiles.
func (w *Writer) evict() {
	for w.opt.MaxOpenFiles > 0 && len(w.buckets) > w.opt.MaxOpenFiles {
		var old *bucket
		for _, b := range w.buckets {
			if old == nil || b.lastUse < old.lastUse {
				old = b
			}
		}
		if err := w.closeBucket(old, "maxOpenFiles"); err != nil {
			w.warn.Log(w.log, slog.LevelError, "close", "hdfs: closing a file failed", "file", old.key, "err", err)
		}
		delete(w.buckets, old.key)
	}
}

var dotdot = []byte("..")

// noParent replaces every ".." path segment of p with "__".
func noParent(p []byte) []byte {
	segs := bytes.Split(p, []byte("/"))
	for i, sg := range segs {
		if string(sg) == ".." {
			segs[i] = []byte("__")
		}
	}
	return bytes.Join(segs, []byte("/"))
}
