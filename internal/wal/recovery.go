package wal

// Recovery: Open repairs the last segment, which a crash may have torn
// (docs/format/wal.md, "Recovery"), and Recover brings a log that failed
// back into use by cutting it back to its durable end and starting a fresh
// segment ("Write failures").

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

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

// lostRange is a run of tickets whose records a failure cut off.
type lostRange struct {
	from, to uint64 // inclusive
	err      error
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
