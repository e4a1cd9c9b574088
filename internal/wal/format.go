package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The on-disk format is specified in docs/format/wal.md; keep the two in
// step.
const (
	segmentMagic   = "SLWL"
	segmentVersion = 1
	// SegmentHeaderSize is the size of the header at the start of every
	// segment; the first record of a segment is at this offset.
	SegmentHeaderSize = 24

	// FrameHeaderSize is the size of a record's frame header: length(4),
	// crc(4), type(1).
	FrameHeaderSize = 9
	// MaxRecordSize is the largest payload a record may have.
	MaxRecordSize = 64 << 20

	recordTypeData = 1

	segmentSuffix = ".wal"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Position is where a record's frame starts: its segment number and the
// byte offset in that segment. Positions order records as written.
type Position struct {
	Segment uint64
	Offset  int64
}

// Less reports whether p comes before q in the log.
func (p Position) Less(q Position) bool {
	if p.Segment != q.Segment {
		return p.Segment < q.Segment
	}
	return p.Offset < q.Offset
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Offset) }

// FrameSize is the number of bytes a record with an n-byte payload takes in
// a segment.
func FrameSize(n int) int64 { return int64(FrameHeaderSize + n) }

// CorruptionError reports a damaged record, segment header or checkpoint.
type CorruptionError struct {
	Path   string
	Offset int64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: corrupt %s at offset %d: %s", e.Path, e.Offset, e.Reason)
}

// ErrRecordTooLarge is returned by Append for a record whose frame cannot
// fit in one segment or whose payload exceeds MaxRecordSize.
var ErrRecordTooLarge = errors.New("wal: record too large")

// ErrClosed is returned by operations on a closed Log.
var ErrClosed = errors.New("wal: log closed")

func segmentName(n uint64) string { return fmt.Sprintf("%08d%s", n, segmentSuffix) }

// parseSegmentName returns the number of a segment file name, or false.
func parseSegmentName(name string) (uint64, bool) {
	num, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(num) == 0 {
		return 0, false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return n, true
}

// listSegments returns the numbers of the segments in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []uint64
	for _, e := range ents {
		if n, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			segs = append(segs, n)
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	return segs, nil
}

func segmentPath(dir string, n uint64) string { return filepath.Join(dir, segmentName(n)) }

// encodeSegmentHeader writes the header of segment seq; prevEnd is the
// size of segment seq-1 when seq was created (0: unknown or none).
func encodeSegmentHeader(b []byte, seq uint64, prevEnd int64) {
	_ = b[SegmentHeaderSize-1]
	copy(b[0:4], segmentMagic)
	binary.LittleEndian.PutUint16(b[4:6], segmentVersion)
	binary.LittleEndian.PutUint16(b[6:8], 0)
	binary.LittleEndian.PutUint64(b[8:16], seq)
	binary.LittleEndian.PutUint32(b[16:20], uint32(prevEnd))
	binary.LittleEndian.PutUint32(b[20:24], crc32.Checksum(b[0:20], castagnoli))
}

// checkSegmentHeader returns "" when b is a valid header of segment seq,
// else why not.
func checkSegmentHeader(b []byte, seq uint64) string {
	if len(b) < SegmentHeaderSize {
		return "short segment header"
	}
	if string(b[0:4]) != segmentMagic {
		return "bad segment magic"
	}
	if crc32.Checksum(b[0:20], castagnoli) != binary.LittleEndian.Uint32(b[20:24]) {
		return "segment header checksum mismatch"
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != segmentVersion {
		return fmt.Sprintf("unknown segment version %d", v)
	}
	if s := binary.LittleEndian.Uint64(b[8:16]); s != seq {
		return fmt.Sprintf("segment header says %d, file name says %d", s, seq)
	}
	return ""
}

// headerPrevEnd returns the prev_end field of a valid segment header: how
// long the segment before it was when it was created, or 0 if unknown.
func headerPrevEnd(b []byte) int64 { return int64(binary.LittleEndian.Uint32(b[16:20])) }

// appendFrame appends rec framed as a data record to dst.
func appendFrame(dst, rec []byte) []byte {
	var h [FrameHeaderSize]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(rec)))
	h[8] = recordTypeData
	c := crc32.Update(0, castagnoli, h[0:4])
	c = crc32.Update(c, castagnoli, h[8:9])
	c = crc32.Update(c, castagnoli, rec)
	binary.LittleEndian.PutUint32(h[4:8], c)
	dst = append(dst, h[:]...)
	return append(dst, rec...)
}

// frameLen checks the cheap parts of a frame header: the type and the
// length bound. It returns the payload length, or -1.
func frameLen(h []byte) int {
	if h[8] != recordTypeData {
		return -1
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	if n > MaxRecordSize {
		return -1
	}
	return int(n)
}

// frameCRCOK reports whether the crc in header h matches payload p.
func frameCRCOK(h, p []byte) bool {
	c := crc32.Update(0, castagnoli, h[0:4])
	c = crc32.Update(c, castagnoli, h[8:9])
	c = crc32.Update(c, castagnoli, p)
	return c == binary.LittleEndian.Uint32(h[4:8])
}
