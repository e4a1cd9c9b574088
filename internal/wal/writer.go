package wal

// The writer and the syncer, the log's two goroutines (docs/format/wal.md,
// "Writing and durability"): the writer writes each pass of queued Appends
// to the current segment, rotating where place put a segment boundary; the
// syncer fdatasyncs what was written and wakes every Append it covered. A
// write or sync error sticks (failLocked) until Recover.

import (
	"errors"
	"fmt"
	"time"
)

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
