// Package wal is a segmented, append-only, CRC32C-framed write-ahead log
// with group commit, the storage under the file channel. The disk format,
// the durability rules and the recovery rules are in docs/format/wal.md.
//
// Append blocks until its records are durable (written and fdatasync'ed);
// concurrent Appends share one write pass and one fdatasync. A write or sync
// error sticks: every later Append fails with it at once, until Recover
// cuts the log back to its durable end and starts a fresh segment (or the
// Log is closed and opened again). Open recovers from damage by itself; the
// damage is counted in Stats and reported to the caller (OpenDamage,
// Reader.Damage), who knows what the lost bytes held and says so.
package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/panics"
)

// Options configure a Log. The zero value is usable.
type Options struct {
	// SegmentSize is the most bytes a segment file may hold (header
	// included); a segment is rotated before a record would exceed it.
	// Default 64 MiB; at least 64 KiB, at most 4 GiB - 1 (a segment's
	// header records the size of the one before it in 32 bits).
	SegmentSize int64
	// Logger receives recovery and error reports; default slog.Default().
	Logger *slog.Logger

	// OpenSegment creates a new segment file for writing (it must fail if
	// the file exists). It exists so tests, here and in the layers above,
	// can inject write and sync failures; nil means OpenSegmentFile.
	OpenSegment func(path string) (SegmentFile, error)

	// LazyDelay bounds how long an AppendAsync waits for a write pass that
	// another Append starts before the log starts one for it; default
	// DefaultLazyDelay.
	LazyDelay time.Duration

	// noWriteback turns off starting writeback after each write pass
	// (for measuring what it brings).
	noWriteback bool
}

// DefaultSegmentSize is the segment size when Options.SegmentSize is 0.
const DefaultSegmentSize = 64 << 20

// DefaultLazyDelay is Options.LazyDelay's default.
const DefaultLazyDelay = 200 * time.Millisecond

const (
	minSegmentSize = 64 << 10
	maxSegmentSize = 1<<32 - 1
)

// Stats are cumulative counters of a Log since Open.
type Stats struct {
	Appends         uint64 // Append calls that succeeded
	Records         uint64 // records in them
	BytesWritten    uint64 // bytes written to segments, headers included
	Syncs           uint64 // fdatasync calls on segments
	SegmentsCreated uint64
	SegmentsDeleted uint64
	// LostRegions counts damaged regions (torn tails included) skipped by
	// recovery and readers, and missing segments; LostBytes their size
	// where known. Records read by position that failed their check are
	// counted here too.
	LostRegions uint64
	LostBytes   uint64
	// Failures counts write or sync errors that made the log refuse
	// appends; Recoveries the times Recover brought it back.
	Failures   uint64
	Recoveries uint64
}

type stats struct {
	appends, records, bytes, syncs, created, deleted, lostRegions, lostBytes atomic.Uint64
	failures, recoveries                                                     atomic.Uint64
}

// Log is an open write-ahead log. Its methods are safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	log  *slog.Logger
	lock *os.File

	mu   sync.Mutex
	cond sync.Cond // on mu; signalled when durableSeq or err changes
	// Lock mu for everything below.
	queue      []*pending
	spare      []*pending
	nextSeq    uint64   // ticket of the next Append
	writtenSeq uint64   // highest ticket written (not yet necessarily synced)
	written    Position // end of the written data
	durableSeq uint64   // highest ticket made durable; frozen once err is set
	doneSeq    uint64   // highest ticket the writer is done with (written or skipped)
	takenSeq   uint64   // highest ticket the writer took from the queue
	durable    Position // end of the durable data
	tail       Position // where the next record goes
	err        error    // sticky write/sync error; cleared by Recover; mirrored in errNow
	failedAt   time.Time
	epoch      uint64      // bumped by each recovery; the syncer drops results from an older one
	lost       []lostRange // tickets cut off by recovered failures
	closing    bool
	lazyArmed  bool // lazyTimer will nudge the writer for queued AppendAsyncs
	// passWanted says the queue holds something a pass must be started
	// for now: an Append, an AppendAsync whose LazyDelay passed or that a
	// WaitDurable waits for. A queue of AppendAsyncs alone waits for it.
	passWanted bool
	first      uint64 // oldest segment still present
	openDamage []Damage

	recoverReq chan chan error // to the writer, which owns the files

	wake       chan struct{} // cap 1; nudges the writer
	lazyTimer  *time.Timer   // nudges the writer LazyDelay after an AppendAsync
	syncWake   chan struct{} // cap 1; nudges the syncer
	writerDone chan struct{} // closed when the writer exits
	done       chan struct{} // closed when the syncer exits

	// fileMu is held by the syncer around Datasync and by the writer while
	// it replaces cur, so a sync never runs on a closed file.
	fileMu sync.Mutex
	// cur and curSeg are written only by the writer, under fileMu; cur is
	// nil while a failure has closed it and no new segment could be made.
	cur    SegmentFile
	curSeg uint64
	curOff int64 // writer only: bytes written to cur

	streak *logthrottle.Streak // tells a run of failures (a flapping disk repeats them) and its end

	// errNow is err, readable without mu: Err is called on every put
	// commit (is this dir usable?) and must not contend with appends.
	errNow atomic.Pointer[error]

	rmu     sync.Mutex
	readers map[uint64]*os.File // read-only handles by segment

	st stats
}

// Open opens (creating if needed) the log in dir, recovers its last
// segment (docs/format/wal.md, "Recovery") and starts a new segment for
// writing. Damage never makes Open fail; it is logged and counted in
// Stats. Open fails on I/O errors and when another Log holds dir.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentSize == 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.SegmentSize < minSegmentSize {
		return nil, fmt.Errorf("wal: segment size %d is below the minimum %d", opts.SegmentSize, minSegmentSize)
	}
	if opts.SegmentSize > maxSegmentSize {
		return nil, fmt.Errorf("wal: segment size %d is above the maximum %d", opts.SegmentSize, int64(maxSegmentSize))
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OpenSegment == nil {
		opts.OpenSegment = OpenSegmentFile
	}
	if opts.LazyDelay <= 0 {
		opts.LazyDelay = DefaultLazyDelay
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l := &Log{
		dir:        dir,
		opts:       opts,
		log:        opts.Logger,
		lock:       lock,
		wake:       make(chan struct{}, 1),
		syncWake:   make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		done:       make(chan struct{}),
		readers:    make(map[uint64]*os.File),
		recoverReq: make(chan chan error),
	}
	l.streak = &logthrottle.Streak{Log: opts.Logger, Level: slog.LevelError, Every: time.Minute,
		Failed:    "wal: write failed; appends are refused until the log recovers",
		Recovered: "wal: recovered; appends accepted again"}
	l.cond.L = &l.mu
	l.lazyTimer = time.AfterFunc(time.Hour, func() {
		defer panics.Guard("wal " + dir + ": lazy sync timer")
		l.mu.Lock()
		l.lazyArmed = false
		l.passWanted = true
		l.mu.Unlock()
		l.nudge()
	})
	l.lazyTimer.Stop()
	if err := l.recover(); err != nil {
		_ = lock.Close() // recovery's error is the one to report
		return nil, err
	}
	panics.Go("wal "+dir+": writer", l.runWriter)
	panics.Go("wal "+dir+": syncer", l.runSyncer)
	return l, nil
}

// Err returns the sticky error, if any: the log refuses appends until
// Recover succeeds.
func (l *Log) Err() error {
	if p := l.errNow.Load(); p != nil {
		return *p
	}
	return nil
}

// End returns the position after the last durable record: where a
// checkpoint taken now, with no Append in flight, would resume replay.
func (l *Log) End() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable
}

// FirstSegment returns the oldest segment still present.
func (l *Log) FirstSegment() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Stats returns a snapshot of the log's counters.
func (l *Log) Stats() Stats {
	return Stats{
		Appends:         l.st.appends.Load(),
		Records:         l.st.records.Load(),
		BytesWritten:    l.st.bytes.Load(),
		Syncs:           l.st.syncs.Load(),
		SegmentsCreated: l.st.created.Load(),
		SegmentsDeleted: l.st.deleted.Load(),
		LostRegions:     l.st.lostRegions.Load(),
		LostBytes:       l.st.lostBytes.Load(),
		Failures:        l.st.failures.Load(),
		Recoveries:      l.st.recoveries.Load(),
	}
}

func (l *Log) countLoss(regions uint64, bytes uint64) {
	l.st.lostRegions.Add(regions)
	l.st.lostBytes.Add(bytes)
}

// Close waits for queued Appends to finish, stops the writer and closes
// every file. Appends after Close fail with ErrClosed.
//
// It leaves an empty segment after the last one written (a failed log is
// first cut back to its durable end), so that segment is never the last
// one at the next Open: a torn end found in it then is damage to data
// that had been acknowledged, not a crash during a write.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closing = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
	l.lazyTimer.Stop()
	l.streak.Stop()
	var errs []error
	l.seal()
	if l.cur != nil {
		errs = append(errs, l.cur.Close())
	}
	l.rmu.Lock()
	for s, f := range l.readers {
		errs = append(errs, f.Close())
		delete(l.readers, s)
	}
	l.rmu.Unlock()
	errs = append(errs, l.lock.Close())
	return errors.Join(errs...)
}

// seal creates the empty segment Close leaves after the data, unless the
// current segment is already empty. Failing to is harmless (the next Open
// then takes a torn end for a crash, as it had to before), so it is only
// logged. The writer and syncer have stopped.
func (l *Log) seal() {
	l.mu.Lock()
	failed, d := l.err != nil, l.durable
	l.mu.Unlock()
	var err error
	switch {
	case failed:
		err = l.cutBack(d)
	case l.cur != nil && l.curOff > SegmentHeaderSize:
		old := l.cur
		err = l.createSegment(l.curSeg+1, l.curOff)
		if err == nil {
			_ = old.Close() // the next Open reads it back and finds any damage itself
		}
	}
	if err != nil {
		l.log.Debug("wal: could not leave an empty segment at close", "dir", l.dir, "err", err)
	}
}
