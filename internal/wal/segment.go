package wal

// Segment files: the SegmentFile the writer writes to, creating a segment
// (header, fdatasync, directory fsync), deleting the old ones
// (TruncateBefore) and listing them (Segments). Their names and layout are
// in format.go.

import (
	"errors"
	"fmt"
	"os"
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
