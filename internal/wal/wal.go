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
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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

// SegmentFile is the part of a segment file the writer uses. It exists so
// tests can inject write and sync failures (Options.OpenSegment).
type SegmentFile interface {
	Write(p []byte) (int, error)
	Datasync() error
	Close() error
}

type osFile struct{ *os.File }

func (f osFile) Datasync() error { return datasync(f.File) }

// StartWriteback starts writing [off, off+n) to disk without waiting.
func (f osFile) StartWriteback(off, n int64) { startWriteback(f.File, off, n) }

// writebacker is a SegmentFile that can start writeback early.
type writebacker interface{ StartWriteback(off, n int64) }

// OpenSegmentFile is the default Options.OpenSegment: a new file opened
// with O_EXCL, synced with fdatasync(2).
func OpenSegmentFile(path string) (SegmentFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

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

// lostRange is a run of tickets whose records a failure cut off.
type lostRange struct {
	from, to uint64 // inclusive
	err      error
}

// chunk is the part of an Append's buffer that goes into one segment.
type chunk struct {
	seg        uint64
	start, end int
}

// pending is one Append waiting for the writer.
type pending struct {
	seq    uint64
	buf    *[]byte
	pooled bool // buf came from bufPool and goes back to it
	chunks []chunk
	one    [1]chunk // backing array for the common single-chunk case
	end    Position // position after its last record
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

// recover repairs the last segment and creates the next one.
func (l *Log) recover() error {
	segs, err := listSegments(l.dir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	next, prevEnd := uint64(1), int64(0)
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		size, removed, err := l.repairLast(last)
		if err != nil {
			return err
		}
		next, prevEnd = last+1, size
		if removed {
			// Its number is reused so no gap appears; the segment before
			// it is now the last one and may have a torn tail too.
			next, prevEnd = last, 0
			segs = segs[:len(segs)-1]
			if len(segs) > 0 {
				if prevEnd, _, err = l.repairLast(segs[len(segs)-1]); err != nil {
					return err
				}
			}
		}
		l.first = next
		if len(segs) > 0 {
			l.first = segs[0]
		}
	} else {
		l.first = 1
	}
	if err := l.createSegment(next, prevEnd); err != nil {
		if !outOfSpace(err) {
			return err
		}
		// No room for a new segment: the log opens failed, as if a write
		// had just failed, so what it holds can still be read; Recover
		// starts the segment once there is room.
		var end Position
		if len(segs) > 0 {
			end = Position{Segment: segs[len(segs)-1], Offset: prevEnd}
		}
		l.tail, l.durable, l.written = end, end, end
		l.curSeg = end.Segment
		l.failLocked(err)
		return nil
	}
	l.tail = Position{Segment: next, Offset: SegmentHeaderSize}
	l.durable, l.written = l.tail, l.tail
	return nil
}

// outOfSpace reports whether err says the disk (or the user's quota) is
// full.
func outOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// repairLast scans segment n, the last one, and cuts off a torn tail; it
// returns the segment's size after that. A file too short to hold its
// header is removed (and removed is true). Only the last segment can have
// been torn by a crash: every older one was synced whole before the next
// was created, and a clean Close leaves an empty segment after the last
// one written, so damage there is never mistaken for a crash.
func (l *Log) repairLast(n uint64) (size int64, removed bool, err error) {
	path := segmentPath(l.dir, n)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, false, fmt.Errorf("wal: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, false, fmt.Errorf("wal: stat %s: %w", path, err)
	}
	size = fi.Size()
	if size < SegmentHeaderSize {
		// Crashed while creating it: no record in it was acknowledged.
		l.log.Debug("wal: removing segment shorter than its header", "segment", path, "size", size)
		l.openDamage = append(l.openDamage, Damage{Kind: ShortSegment, Segment: n, Bytes: size})
		if size > 0 {
			l.countLoss(1, uint64(size))
		}
		_ = f.Close() // read only
		if err := os.Remove(path); err != nil {
			return 0, false, fmt.Errorf("wal: remove %s: %w", path, err)
		}
		return 0, true, syncDir(l.dir)
	}
	// A damaged header is counted by the Reader that replays this segment.
	s := newScanner(f, size, SegmentHeaderSize, nil)
	records := 0
	for s.next() {
		records++
	}
	if s.err != nil {
		return 0, false, fmt.Errorf("wal: read %s: %w", path, s.err)
	}
	if s.tail >= 0 {
		// Damaged regions before the tail stay in the file and are counted
		// by the Reader that replays them; the tail is counted here.
		l.log.Debug("wal: cutting torn tail of the last segment", "segment", path,
			"offset", s.tail, "bytes", size-s.tail, "records_kept", records)
		l.openDamage = append(l.openDamage, Damage{Kind: TornTail, Segment: n, Offset: s.tail, Bytes: size - s.tail})
		l.countLoss(1, uint64(size-s.tail))
		if err := f.Truncate(s.tail); err != nil {
			return 0, false, fmt.Errorf("wal: truncate %s at %d: %w", path, s.tail, err)
		}
		if err := datasync(f); err != nil {
			return 0, false, fmt.Errorf("wal: sync %s: %w", path, err)
		}
		size = s.tail
	}
	return size, false, nil
}

// OpenDamage returns what Open found and repaired in the last segment: a
// torn tail cut off, a segment shorter than its header removed. Damage in
// older segments is found by the Readers that replay them.
func (l *Log) OpenDamage() []Damage { return l.openDamage }

func (l *Log) countLoss(regions uint64, bytes uint64) {
	l.st.lostRegions.Add(regions)
	l.st.lostBytes.Add(bytes)
}

// createSegment creates segment n, whose header records prevEnd (the size
// of segment n-1), and makes both the file and its directory entry
// durable. It becomes the writer's current segment. A file it could not
// finish is removed, so that a later attempt can create it again.
func (l *Log) createSegment(n uint64, prevEnd int64) error {
	path := segmentPath(l.dir, n)
	f, err := l.opts.OpenSegment(path)
	if err != nil {
		return fmt.Errorf("wal: create segment %s: %w", path, err)
	}
	fail := func(err error) error {
		// err is the failure; the half-made segment is only removed.
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	var hdr [SegmentHeaderSize]byte
	encodeSegmentHeader(hdr[:], n, prevEnd)
	if _, err := f.Write(hdr[:]); err != nil {
		return fail(fmt.Errorf("wal: write segment header %s: %w", path, err))
	}
	if err := f.Datasync(); err != nil {
		return fail(fmt.Errorf("wal: fdatasync %s: %w", path, err))
	}
	if err := syncDir(l.dir); err != nil {
		return fail(fmt.Errorf("wal: sync dir %s: %w", l.dir, err))
	}
	l.st.bytes.Add(SegmentHeaderSize)
	l.st.syncs.Add(1)
	l.st.created.Add(1)
	l.cur, l.curSeg, l.curOff = f, n, SegmentHeaderSize
	return nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

const maxPooledBuf = 16 << 20

// Append writes recs as consecutive records and returns once they are
// durable, with the position of the first. The records of one call are
// contiguous in one segment unless together they exceed a segment.
func (l *Log) Append(recs ...[]byte) (Position, error) {
	var one [1]Position
	var pos []Position
	if len(recs) > 0 {
		pos = one[:]
	}
	err := l.append(pos, recs)
	return one[0], err
}

// AppendPositions is Append that also reports where each record went: pos
// must be nil or have len(recs), and receives each record's position.
func (l *Log) AppendPositions(pos []Position, recs ...[]byte) error {
	if pos != nil && len(pos) != len(recs) {
		return fmt.Errorf("wal: AppendPositions got %d positions for %d records", len(pos), len(recs))
	}
	return l.append(pos, recs)
}

func (l *Log) append(pos []Position, recs [][]byte) error {
	p, err := l.frame(recs)
	if err != nil || p == nil {
		return err
	}
	return l.enqueueWait(p, pos, len(recs), func(i int) int64 { return FrameSize(len(recs[i])) })
}

// Ticket names an AppendAsync for WaitDurable.
type Ticket uint64

// AppendAsync queues recs as Append does but returns at once, without
// waiting for them to be written or synced, and without starting a write
// pass of their own: they go out with the next pass another Append starts
// (sharing its write and its fdatasync), or when WaitDurable is called for
// them, or at the latest LazyDelay later. A crash before they are synced
// loses them. It suits records whose loss only repeats work, such as the
// file channel's take records: at low rates each take record then costs
// no fdatasync of its own. It fails only when the log has already failed
// or is closed; a later write or sync error sticks as usual.
func (l *Log) AppendAsync(recs ...[]byte) (Ticket, error) {
	p, err := l.frame(recs)
	if err != nil || p == nil {
		return 0, err
	}
	seq, err := l.enqueue(p, nil, len(recs), func(i int) int64 { return FrameSize(len(recs[i])) }, true)
	if err != nil {
		return 0, err
	}
	l.st.appends.Add(1)
	l.st.records.Add(uint64(len(recs)))
	return Ticket(seq), nil
}

// WaitDurable blocks until the records of the AppendAsync that returned t
// are durable, and returns the log's sticky error if they never will be.
// The zero Ticket is durable at once.
func (l *Log) WaitDurable(t Ticket) error {
	if t == 0 {
		return nil
	}
	return l.wait(uint64(t))
}

// frame checks recs and frames them into a pooled buffer (nil for no
// records). It runs outside the lock, so callers checksum in parallel.
func (l *Log) frame(recs [][]byte) (*pending, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	capacity := l.opts.SegmentSize - SegmentHeaderSize
	total := 0
	for _, r := range recs {
		if len(r) > MaxRecordSize || FrameSize(len(r)) > capacity {
			return nil, fmt.Errorf("%w: %d bytes (segment size %d)", ErrRecordTooLarge, len(r), l.opts.SegmentSize)
		}
		total += FrameHeaderSize + len(r)
	}
	bp := bufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	if cap(buf) < total {
		buf = make([]byte, 0, total)
	}
	for _, r := range recs {
		buf = appendFrame(buf, r)
	}
	*bp = buf
	return &pending{buf: bp, pooled: true}, nil
}

// AppendBatch appends the records of b, as Append does, and reports each
// record's position in pos (nil, or b.Len() long). The log writes b's
// buffer itself: b must not change until AppendBatch returns.
func (l *Log) AppendBatch(b *Batch, pos []Position) error {
	n := b.Len()
	if pos != nil && len(pos) != n {
		return fmt.Errorf("wal: AppendBatch got %d positions for %d records", len(pos), n)
	}
	if n == 0 {
		return nil
	}
	capacity := l.opts.SegmentSize - SegmentHeaderSize
	for i := range n {
		if FrameSize(b.PayloadLen(i)) > capacity {
			return fmt.Errorf("%w: %d bytes (segment size %d)", ErrRecordTooLarge, b.PayloadLen(i), l.opts.SegmentSize)
		}
	}
	return l.enqueueWait(&pending{buf: &b.buf}, pos, n, func(i int) int64 { return FrameSize(b.PayloadLen(i)) })
}

// nudge wakes the writer.
func (l *Log) nudge() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// enqueue queues p's n framed records (frame(i) is the size of record i)
// and returns its ticket without waiting. p's buffer belongs to the writer
// until wait(ticket) returns; a pooled one it releases itself. A lazy one
// does not wake the writer (see AppendAsync).
func (l *Log) enqueue(p *pending, pos []Position, n int, frame func(int) int64, lazy bool) (uint64, error) {
	total := int64(len(*p.buf))
	capacity := l.opts.SegmentSize - SegmentHeaderSize
	l.mu.Lock()
	if l.err != nil || l.closing {
		err := l.err
		if err == nil {
			err = ErrClosed
		}
		l.mu.Unlock()
		if p.pooled {
			putBuf(p.buf)
		}
		return 0, err
	}
	l.place(p, n, frame, pos, total, capacity)
	p.end = l.tail
	l.nextSeq++
	p.seq = l.nextSeq
	l.queue = append(l.queue, p)
	if lazy {
		if !l.lazyArmed {
			l.lazyArmed = true
			l.lazyTimer.Reset(l.opts.LazyDelay)
		}
		l.mu.Unlock()
		return p.seq, nil
	}
	l.passWanted = true
	l.mu.Unlock()
	l.nudge()
	return p.seq, nil
}

// wait blocks until the Append with ticket seq is durable, or the log
// failed and the writer is done with that Append's buffer. A ticket whose
// records a failure cut off fails with that failure's error, also after
// the log recovered.
func (l *Log) wait(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.takenSeq < seq {
		// It may be a lazy AppendAsync no pass has taken yet.
		l.passWanted = true
		l.nudge()
	}
	for l.doneSeq < seq || (l.durableSeq < seq && l.err == nil) {
		l.cond.Wait()
	}
	for i := len(l.lost) - 1; i >= 0; i-- {
		if r := l.lost[i]; seq >= r.from && seq <= r.to {
			return r.err
		}
	}
	if l.durableSeq < seq {
		return l.err
	}
	return nil
}

// enqueueWait is enqueue then wait, counting the Append once durable.
func (l *Log) enqueueWait(p *pending, pos []Position, n int, frame func(int) int64) error {
	seq, err := l.enqueue(p, pos, n, frame, false)
	if err == nil {
		err = l.wait(seq)
	}
	if err != nil {
		return err
	}
	l.st.appends.Add(1)
	l.st.records.Add(uint64(n))
	return nil
}

// place assigns the records of p their positions, rotating segments as
// needed. Lock mu.
func (l *Log) place(p *pending, nrec int, frame func(int) int64, pos []Position, total, capacity int64) {
	end := l.opts.SegmentSize
	if l.tail.Offset+total > end && total <= capacity {
		// Start a new segment so the whole batch stays in one.
		l.tail = Position{Segment: l.tail.Segment + 1, Offset: SegmentHeaderSize}
	}
	if l.tail.Offset+total <= end {
		p.one[0] = chunk{seg: l.tail.Segment, start: 0, end: int(total)}
		p.chunks = p.one[:]
		o := l.tail.Offset
		for i := range nrec {
			if i < len(pos) {
				pos[i] = Position{Segment: l.tail.Segment, Offset: o}
			}
			o += frame(i)
		}
		l.tail.Offset = o
		return
	}
	// Larger than a segment: split at record boundaries.
	bufOff := 0
	c := chunk{seg: l.tail.Segment}
	for i := range nrec {
		n := frame(i)
		if l.tail.Offset+n > end {
			if c.end > c.start {
				p.chunks = append(p.chunks, c)
			}
			l.tail = Position{Segment: l.tail.Segment + 1, Offset: SegmentHeaderSize}
			c = chunk{seg: l.tail.Segment, start: bufOff, end: bufOff}
		}
		if i < len(pos) {
			pos[i] = l.tail
		}
		l.tail.Offset += n
		bufOff += int(n)
		c.end = bufOff
	}
	p.chunks = append(p.chunks, c)
}

func putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBuf {
		*bp = (*bp)[:0]
		bufPool.Put(bp)
	}
}

// runWriter is the writer goroutine: it takes every queued Append and
// writes it to the current segment, then hands the syncer the new end.
// Writing into the page cache overlaps the syncer's fdatasync of what was
// written before.
func (l *Log) runWriter() {
	defer close(l.writerDone)
	var recoverReply chan error // a Recover that came while Appends were queued
	for {
		l.mu.Lock()
		// A queue of AppendAsyncs alone waits for a pass another Append
		// starts (or LazyDelay, or a WaitDurable), also when it came in
		// while the writer was finishing the last pass.
		for len(l.queue) == 0 || !l.passWanted && !l.closing && recoverReply == nil && l.err == nil {
			if len(l.queue) == 0 && recoverReply != nil {
				// The queue is settled (each Append failed): cut back now.
				l.mu.Unlock()
				recoverReply <- l.repair()
				recoverReply = nil
				l.mu.Lock()
				continue
			}
			if len(l.queue) == 0 && l.closing {
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
			select {
			case <-l.wake:
			case reply := <-l.recoverReq:
				l.mu.Lock()
				queued := len(l.queue) > 0
				l.mu.Unlock()
				if !queued {
					reply <- l.repair()
				} else {
					// Lazy Appends came in without waking the writer; they
					// were placed before the cut, so settle them first.
					recoverReply = reply
				}
			}
			l.mu.Lock()
		}
		batch := l.queue
		l.queue, l.spare = l.spare[:0], nil
		l.passWanted = false
		l.takenSeq = batch[len(batch)-1].seq
		failed := l.err != nil
		l.mu.Unlock()

		var err error
		if !failed {
			err = l.writeBatch(batch)
		}
		l.mu.Lock()
		last := batch[len(batch)-1]
		if err != nil {
			l.failLocked(err)
		} else if !failed {
			l.writtenSeq, l.written = last.seq, last.end
		}
		l.doneSeq = last.seq
		if l.err != nil {
			l.cond.Broadcast() // failed Appends wait for doneSeq
		}
		for i := range batch {
			if batch[i].pooled {
				putBuf(batch[i].buf)
			}
			batch[i] = nil
		}
		l.spare = batch[:0]
		l.mu.Unlock()
		select {
		case l.syncWake <- struct{}{}:
		default:
		}
	}
}

// runSyncer is the syncer goroutine: whenever data was written since its
// last fdatasync it syncs once and wakes every Append that sync covered.
func (l *Log) runSyncer() {
	defer close(l.done)
	var synced uint64
	for {
		l.mu.Lock()
		seq, end, failed, epoch := l.writtenSeq, l.written, l.err != nil, l.epoch
		l.mu.Unlock()
		if seq > synced && !failed {
			l.fileMu.Lock()
			err := errors.New("no segment open")
			if l.cur != nil {
				err = l.cur.Datasync()
			}
			seg := l.curSeg
			l.fileMu.Unlock()
			l.mu.Lock()
			switch {
			case l.epoch != epoch:
				// A recovery replaced the segment meanwhile: this result
				// is about data it cut off.
			case err != nil:
				l.failLocked(fmt.Errorf("wal: fdatasync segment %d: %w", seg, err))
			case l.err == nil:
				l.st.syncs.Add(1)
				l.durableSeq, l.durable = seq, end
			}
			l.cond.Broadcast()
			l.mu.Unlock()
			synced = seq
			continue
		}
		select {
		case <-l.syncWake:
		case <-l.writerDone:
			l.mu.Lock()
			idle := l.writtenSeq <= synced || l.err != nil
			l.mu.Unlock()
			if idle {
				return
			}
		}
	}
}

// failLocked makes err the log's sticky error. From then on nothing more
// becomes durable (after a failed fdatasync Linux may drop dirty pages and
// report a later sync as clean), so every waiting Append fails, until
// Recover. Lock mu.
func (l *Log) failLocked(err error) {
	if l.err == nil {
		l.err = err
		l.errNow.Store(&err)
		l.failedAt = time.Now()
		l.st.failures.Add(1)
		l.streak.Fail(err, "dir", l.dir)
	}
	l.cond.Broadcast()
}

// writeBatch writes the batch's chunks, rotating segments as they say.
// Only the writer calls it.
func (l *Log) writeBatch(batch []*pending) error {
	passStart := l.curOff
	for _, p := range batch {
		buf := *p.buf
		for _, c := range p.chunks {
			if c.seg != l.curSeg {
				if err := l.rotate(c.seg); err != nil {
					return err
				}
				passStart = l.curOff
			}
			n, err := l.cur.Write(buf[c.start:c.end])
			l.st.bytes.Add(uint64(n))
			l.curOff += int64(n)
			if err != nil {
				return fmt.Errorf("wal: write segment %d: %w", l.curSeg, err)
			}
		}
	}
	// Start the disk on this pass now: the syncer's fdatasync, which may
	// still be busy with the previous pass, then finds it mostly written.
	if wb, ok := l.cur.(writebacker); ok && !l.opts.noWriteback && l.curOff > passStart {
		wb.StartWriteback(passStart, l.curOff-passStart)
	}
	return nil
}

// rotate makes the current segment durable, creates segment n and closes
// the old one. The syncer waits meanwhile, so its next fdatasync covers the
// new segment and everything before it is already durable.
func (l *Log) rotate(n uint64) error {
	if n != l.curSeg+1 {
		return fmt.Errorf("wal: BUG: rotate from segment %d to %d", l.curSeg, n)
	}
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	if err := l.cur.Datasync(); err != nil {
		return fmt.Errorf("wal: fdatasync segment %d: %w", l.curSeg, err)
	}
	l.st.syncs.Add(1)
	old, oldSeg := l.cur, l.curSeg
	if err := l.createSegment(n, l.curOff); err != nil {
		return err
	}
	if err := old.Close(); err != nil {
		return fmt.Errorf("wal: close segment %d: %w", oldSeg, err)
	}
	return nil
}

// Recover brings a log that failed (Err is not nil) back into use, and
// returns nil once it is usable, or why it still is not. It cuts the log
// back to its durable end: the segment that failed is truncated there,
// segments begun after it are removed, and a fresh segment is created
// after it, whose header records where the old one ends, so readers ignore
// whatever of the failed writes is still in it (truncating is best effort:
// on a broken disk it may fail too). Creating that segment (write, fdatasync,
// directory fsync) is the probe: if it fails, the log stays failed and
// Recover may be called again later.
//
// Appends that failed stay failed: their records are gone, and
// WaitDurable on their tickets keeps returning the failure. Callers that
// must keep such records append them again after Recover.
func (l *Log) Recover() error {
	l.mu.Lock()
	err, closing := l.err, l.closing
	l.mu.Unlock()
	if err == nil {
		return nil
	}
	if closing {
		return ErrClosed
	}
	reply := make(chan error, 1)
	select {
	case l.recoverReq <- reply:
		return <-reply
	case <-l.writerDone:
		return ErrClosed
	}
}

// repair is Recover's work, in the writer goroutine (which owns the
// segment files) between write passes.
func (l *Log) repair() error {
	l.mu.Lock()
	failure, d, since := l.err, l.durable, l.failedAt
	l.mu.Unlock()
	if failure == nil {
		return nil
	}
	// The syncer leaves durable alone while err is set, and the writer is
	// here: the files are ours.
	l.fileMu.Lock()
	err := l.cutBack(d)
	l.fileMu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w (failing since %s: %v)", err, since.Format(time.RFC3339), failure)
		l.streak.Fail(err, "dir", l.dir) // a failed probe is one more attempt of the streak
		return err
	}
	l.mu.Lock()
	if l.nextSeq > l.durableSeq {
		l.lost = append(l.lost, lostRange{from: l.durableSeq + 1, to: l.nextSeq, err: failure})
	}
	// Every ticket issued so far is settled: durable, or lost above.
	l.writtenSeq, l.durableSeq, l.doneSeq, l.takenSeq = l.nextSeq, l.nextSeq, l.nextSeq, l.nextSeq
	l.tail = Position{Segment: d.Segment + 1, Offset: SegmentHeaderSize}
	l.written, l.durable = l.tail, l.tail
	l.err = nil
	l.errNow.Store(nil)
	l.epoch++
	l.st.recoveries.Add(1)
	l.cond.Broadcast()
	l.mu.Unlock()
	l.streak.Ok("dir", l.dir, "segment", segmentName(d.Segment+1))
	return nil
}

// cutBack ends the log at d, which must be durable: it closes the current
// segment, removes every segment after d's, truncates d's segment at d
// (best effort) and creates the next one, which records d as the end of
// the one before. Only the writer calls it, or Close after the writer
// stopped; lock fileMu.
func (l *Log) cutBack(d Position) error {
	if l.cur != nil {
		_ = l.cur.Close() // its error is the failure we are recovering from, or one like it
		l.cur = nil
	}
	// No record past d was acknowledged, so no reader should have opened
	// those segments; drop any handle all the same, since their numbers
	// are about to be reused.
	l.rmu.Lock()
	for s, f := range l.readers {
		if s > d.Segment {
			_ = f.Close() // a reader
			delete(l.readers, s)
		}
	}
	l.rmu.Unlock()
	segs, err := listSegments(l.dir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	removed := false
	for _, s := range segs {
		if s > d.Segment {
			if err := os.Remove(segmentPath(l.dir, s)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("wal: remove unacknowledged segment: %w", err)
			}
			removed = true
		}
	}
	if removed {
		if err := syncDir(l.dir); err != nil {
			return fmt.Errorf("wal: sync dir %s: %w", l.dir, err)
		}
	}
	if err := truncateFile(segmentPath(l.dir, d.Segment), d.Offset); err != nil {
		// The next segment's header says where this one ends; readers
		// stop there.
		l.log.Debug("wal: could not truncate the failed segment", "segment", segmentName(d.Segment), "err", err)
	}
	return l.createSegment(d.Segment+1, d.Offset)
}

func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = datasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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

// TruncateBefore deletes every segment numbered below n (never the one
// being written). Reading a position in a deleted segment then fails.
func (l *Log) TruncateBefore(n uint64) error {
	l.mu.Lock()
	if n > l.tail.Segment {
		n = l.tail.Segment
	}
	from := l.first
	if n <= from {
		l.mu.Unlock()
		return nil
	}
	l.first = n
	l.mu.Unlock()

	l.rmu.Lock()
	for s, f := range l.readers {
		if s < n {
			_ = f.Close() // a reader
			delete(l.readers, s)
		}
	}
	l.rmu.Unlock()

	segs, err := listSegments(l.dir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	removed := 0
	for _, s := range segs {
		if s >= n {
			break
		}
		if err := os.Remove(segmentPath(l.dir, s)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal: delete segment: %w", err)
		}
		removed++
	}
	l.st.deleted.Add(uint64(removed))
	if removed > 0 {
		return syncDir(l.dir)
	}
	return nil
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

// SegmentInfo describes one segment file present in the log's directory.
type SegmentInfo struct {
	Seq  uint64
	Size int64 // bytes in the file now
	// Written is how long the segment was when the next one was created,
	// read from that one's header: what it should hold. 0 when unknown
	// (no next segment, its header damaged, or written before the field
	// existed).
	Written int64
}

// Segments lists the segments present, oldest first. Gaps in Seq are
// missing segments.
func (l *Log) Segments() ([]SegmentInfo, error) {
	segs, err := listSegments(l.dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	out := make([]SegmentInfo, 0, len(segs))
	for _, s := range segs {
		si := SegmentInfo{Seq: s}
		if fi, err := os.Stat(segmentPath(l.dir, s)); err == nil {
			si.Size = fi.Size()
		}
		si.Written = l.writtenSize(s)
		out = append(out, si)
	}
	return out, nil
}

// writtenSize reads from segment n+1's header how long segment n was when
// n+1 was created; 0 when it cannot tell.
func (l *Log) writtenSize(n uint64) int64 {
	f, err := os.Open(segmentPath(l.dir, n+1))
	if err != nil {
		return 0
	}
	defer f.Close()
	var hdr [SegmentHeaderSize]byte
	if k, _ := f.ReadAt(hdr[:], 0); k < SegmentHeaderSize || checkSegmentHeader(hdr[:], n+1) != "" {
		return 0
	}
	return headerPrevEnd(hdr[:])
}

// readerFor returns a read-only handle on segment n, cached.
func (l *Log) readerFor(n uint64) (*os.File, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if f, ok := l.readers[n]; ok {
		return f, nil
	}
	f, err := os.Open(segmentPath(l.dir, n))
	if err != nil {
		return nil, err
	}
	l.readers[n] = f
	return f, nil
}

// ReadAt returns the payload of the record at pos, appended to buf. A
// record that fails its check returns a *CorruptionError and is counted
// in Stats.LostRegions.
func (l *Log) ReadAt(pos Position, buf []byte) ([]byte, error) {
	f, err := l.readerFor(pos.Segment)
	if err != nil {
		return buf, fmt.Errorf("wal: read %v: %w", pos, err)
	}
	var h [FrameHeaderSize]byte
	if _, err := f.ReadAt(h[:], pos.Offset); err != nil {
		return buf, l.readErr(f, pos, err)
	}
	n := frameLen(h[:])
	if n < 0 {
		l.countLoss(1, 0)
		return buf, &CorruptionError{Path: f.Name(), Offset: pos.Offset, Reason: "bad frame header"}
	}
	start := len(buf)
	buf = append(buf, make([]byte, n)...)
	if _, err := f.ReadAt(buf[start:], pos.Offset+FrameHeaderSize); err != nil {
		return buf[:start], l.readErr(f, pos, err)
	}
	if !frameCRCOK(h[:], buf[start:]) {
		l.countLoss(1, uint64(FrameSize(n)))
		return buf[:start], &CorruptionError{Path: f.Name(), Offset: pos.Offset, Reason: "checksum mismatch"}
	}
	return buf, nil
}

// RecordEnd reads the frame header of the record at pos and returns the
// offset just past that record, without reading or checking its payload:
// enough to tell whether a record lies wholly inside a segment that was cut
// short. It fails when the header cannot be read or is not a valid one.
func (l *Log) RecordEnd(pos Position) (int64, error) {
	f, err := l.readerFor(pos.Segment)
	if err != nil {
		return 0, fmt.Errorf("wal: read %v: %w", pos, err)
	}
	var h [FrameHeaderSize]byte
	if _, err := f.ReadAt(h[:], pos.Offset); err != nil {
		return 0, fmt.Errorf("wal: read %v: %w", pos, err)
	}
	n := frameLen(h[:])
	if n < 0 {
		return 0, &CorruptionError{Path: f.Name(), Offset: pos.Offset, Reason: "bad frame header"}
	}
	return pos.Offset + FrameSize(n), nil
}

func (l *Log) readErr(f *os.File, pos Position, err error) error {
	if errors.Is(err, io.EOF) {
		l.countLoss(1, 0)
		return &CorruptionError{Path: f.Name(), Offset: pos.Offset, Reason: "record beyond end of segment"}
	}
	return fmt.Errorf("wal: read %v: %w", pos, err)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
