package wal

import (
	"errors"
	"io"
)

// scanWindow is how much of a segment a scanner reads at a time.
const scanWindow = 1 << 20

// scanner walks the records of one segment, verifying each frame, and
// skips damaged regions by resynchronising on the next valid frame (see
// docs/format/wal.md, "Recovery").
type scanner struct {
	r    io.ReaderAt
	size int64 // bytes of the segment to consider
	off  int64 // offset of the next frame to read

	buf    []byte
	bufOff int64 // file offset of buf[0]

	// The record returned by the last next().
	recOff int64
	rec    []byte

	// Damage seen so far.
	regions   int   // damaged regions skipped, including a torn tail
	lostBytes int64 // bytes in those regions
	tail      int64 // offset where a torn tail (no valid frame after) starts, or -1
	// oneRecord says the last damaged region was exactly one record: its
	// frame header is intact and its length spans the region (a payload
	// that fails its checksum).
	oneRecord bool
	err       error // an I/O error; scanning stops
}

func newScanner(r io.ReaderAt, size, start int64, buf []byte) *scanner {
	if cap(buf) < scanWindow {
		buf = make([]byte, 0, scanWindow)
	}
	return &scanner{r: r, size: size, off: start, buf: buf[:0], tail: -1}
}

// window returns the n bytes at off, reading them into the scanner's buffer
// if needed. It returns nil on an I/O error (recorded in s.err) and for a
// range beyond s.size.
func (s *scanner) window(off int64, n int) []byte {
	if off+int64(n) > s.size {
		return nil
	}
	if off >= s.bufOff && off+int64(n) <= s.bufOff+int64(len(s.buf)) {
		i := off - s.bufOff
		return s.buf[i : i+int64(n)]
	}
	want := max(n, scanWindow)
	if rem := s.size - off; int64(want) > rem {
		want = int(rem)
	}
	if cap(s.buf) < want {
		s.buf = make([]byte, want)
	}
	s.buf = s.buf[:want]
	got, err := s.r.ReadAt(s.buf, off)
	if got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		s.err = err
		s.buf = s.buf[:0]
		return nil
	}
	s.buf, s.bufOff = s.buf[:got], off
	return s.buf[:n]
}

// frameAt returns the payload of a valid frame at off, or nil.
func (s *scanner) frameAt(off int64) []byte {
	h := s.window(off, FrameHeaderSize)
	if h == nil {
		return nil
	}
	n := frameLen(h)
	if n < 0 || off+FrameHeaderSize+int64(n) > s.size {
		return nil
	}
	f := s.window(off, FrameHeaderSize+n)
	if f == nil || !frameCRCOK(f[:FrameHeaderSize], f[FrameHeaderSize:]) {
		return nil
	}
	return f[FrameHeaderSize:]
}

// next advances to the next valid record and reports whether there is one.
// The record's bytes are valid until the next call.
func (s *scanner) next() bool {
	if s.err != nil || s.off+FrameHeaderSize > s.size {
		if s.err == nil && s.off < s.size {
			// A few bytes too short for a header: a torn tail.
			s.damage(s.off, s.size)
			s.tail = s.off
			s.off = s.size
		}
		return false
	}
	if p := s.frameAt(s.off); p != nil {
		s.recOff, s.rec = s.off, p
		s.off += FrameHeaderSize + int64(len(p))
		return true
	}
	if s.err != nil {
		return false
	}
	// Damaged: look for the next valid frame.
	bad := s.off
	for o := bad + 1; o+FrameHeaderSize <= s.size; o++ {
		h := s.window(o, FrameHeaderSize)
		if h == nil {
			return false
		}
		if n := frameLen(h); n < 0 || o+FrameHeaderSize+int64(n) > s.size {
			continue
		}
		if p := s.frameAt(o); p != nil {
			s.damage(bad, o)
			if h := s.window(bad, FrameHeaderSize); h != nil {
				n := frameLen(h)
				s.oneRecord = n >= 0 && bad+FrameSize(n) == o
			}
			s.recOff, s.rec = o, p
			s.off = o + FrameHeaderSize + int64(len(p))
			return true
		}
		if s.err != nil {
			return false
		}
	}
	s.damage(bad, s.size)
	s.tail = bad
	s.off = s.size
	return false
}

func (s *scanner) damage(from, to int64) {
	s.oneRecord = false
	s.regions++
	s.lostBytes += to - from
}
