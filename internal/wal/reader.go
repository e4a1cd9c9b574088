package wal

// Reading the log back: a Reader replays the records in log order from a
// position; ReadAt and RecordEnd read the one record a position names.

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Reader replays records in log order from a position up to the end of the
// durable data at the time it was made. Damaged regions, segments cut
// short and missing segments are skipped, counted (in the Reader and in the
// Log's Stats) and listed (Damage); the Reader logs them only at debug
// level. A Reader is used by one goroutine; Close it when done.
type Reader struct {
	l    *Log
	from Position
	end  Position
	seg  uint64

	f   *os.File
	sc  *scanner
	buf []byte
	// cut is how many bytes of the current segment are gone from its end
	// (its successor's header says how long it was); reported when the
	// scan reaches the end.
	cut int64

	pos Position
	rec []byte
	err error

	regions   int
	lostBytes int64
	damage    []Damage
}

// NewReader returns a Reader of the records at or after from. A from
// before the oldest segment present starts at that segment.
func (l *Log) NewReader(from Position) *Reader {
	l.mu.Lock()
	end, first := l.durable, l.first
	l.mu.Unlock()
	if from.Segment < first {
		from = Position{Segment: first, Offset: SegmentHeaderSize}
	}
	return &Reader{l: l, from: from, end: end, seg: from.Segment}
}

// Next advances to the next intact record and reports whether there is
// one. It returns false at the end or on an I/O error (see Err).
func (r *Reader) Next() bool {
	for r.err == nil && r.seg <= r.end.Segment {
		if r.sc == nil && !r.openSegment() {
			continue
		}
		regions, lost := r.sc.regions, r.sc.lostBytes
		ok := r.sc.next()
		if d := r.sc.regions - regions; d > 0 {
			b := r.sc.lostBytes - lost
			from := r.sc.recOff - b
			if !ok {
				from = r.sc.off - b
			}
			kind := Region
			if !ok && r.sc.tail >= 0 && r.cut > 0 {
				// The segment ends inside a record because its end was
				// cut off: one damaged place, the torn record and the rest.
				kind, b = Cut, b+r.cut
				r.cut = 0
			}
			r.report(Damage{Kind: kind, Segment: r.seg, Offset: from, Bytes: b, OneRecord: ok && d == 1 && r.sc.oneRecord}, d)
		}
		if ok {
			r.pos = Position{Segment: r.seg, Offset: r.sc.recOff}
			r.rec = r.sc.rec
			return true
		}
		if r.sc.err != nil {
			r.err = fmt.Errorf("wal: read %s: %w", r.f.Name(), r.sc.err)
			return false
		}
		if r.cut > 0 {
			// Cut at a record boundary: the scan alone cannot see it.
			r.report(Damage{Kind: Cut, Segment: r.seg, Offset: r.sc.size, Bytes: r.cut}, 1)
			r.cut = 0
		}
		r.buf = r.sc.buf
		r.closeSegment()
		r.seg++
	}
	return false
}

// openSegment opens r.seg for scanning; it returns false when the segment
// was skipped (missing) or r.err was set.
func (r *Reader) openSegment() bool {
	path := segmentPath(r.l.dir, r.seg)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			size := r.l.writtenSize(r.seg)
			if size == 0 {
				size = -1
			}
			r.report(Damage{Kind: Missing, Segment: r.seg, Bytes: size}, 1)
			r.seg++
			return false
		}
		r.err = fmt.Errorf("wal: open %s: %w", path, err)
		return false
	}
	size := r.end.Offset
	r.cut = 0
	if r.seg < r.end.Segment {
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close() // read only
			r.err = fmt.Errorf("wal: stat %s: %w", path, err)
			return false
		}
		size = fi.Size()
		// The next segment's header says how long this one was written.
		// Bytes past that are not part of the log (the unsynced tail of a
		// failed write that could not be truncated); fewer bytes mean its
		// end was cut off.
		if w := r.l.writtenSize(r.seg); w > 0 {
			if w < size {
				size = w
			} else {
				r.cut = w - size
			}
		}
	}
	var hdr [SegmentHeaderSize]byte
	if n, _ := f.ReadAt(hdr[:], 0); n < SegmentHeaderSize || checkSegmentHeader(hdr[:], r.seg) != "" {
		r.report(Damage{Kind: BadHeader, Segment: r.seg, Bytes: SegmentHeaderSize}, 1)
	}
	start := int64(SegmentHeaderSize)
	if r.seg == r.from.Segment && r.from.Offset > start {
		start = r.from.Offset
	}
	r.f = f
	r.sc = newScanner(f, size, start, r.buf)
	return true
}

func (r *Reader) closeSegment() {
	if r.f != nil {
		_ = r.f.Close() // read only
	}
	r.f, r.sc = nil, nil
}

// report records d, which counts as regions damaged regions.
func (r *Reader) report(d Damage, regions int) {
	bytes := max(d.Bytes, 0)
	r.regions += regions
	r.lostBytes += bytes
	r.damage = append(r.damage, d)
	r.l.countLoss(uint64(regions), uint64(bytes))
	r.l.log.Debug("wal: "+d.Kind.String(), "dir", r.l.dir, "damage", d.String())
}

// Record returns the current record's payload; it is valid until the next
// call to Next.
func (r *Reader) Record() []byte { return r.rec }

// Position returns the current record's position.
func (r *Reader) Position() Position { return r.pos }

// Err returns the I/O error that stopped the Reader, if any. Damage is not
// an error.
func (r *Reader) Err() error { return r.err }

// Damaged returns how many damaged regions (and missing segments) the
// Reader has skipped so far, and their known size in bytes.
func (r *Reader) Damaged() (regions int, bytes int64) { return r.regions, r.lostBytes }

// Damage returns every damaged place the Reader has found so far, in log
// order.
func (r *Reader) Damage() []Damage { return r.damage }

// Close releases the Reader's file.
func (r *Reader) Close() error {
	r.closeSegment()
	return nil
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
