package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// Batch is a set of records framed in place, in one buffer, for
// Log.AppendBatch: the caller encodes each payload straight into the
// buffer the log writes, so a record is copied once (when it is encoded)
// instead of twice. A Batch may be reused after AppendBatch returns; it is
// not safe for concurrent use.
type Batch struct {
	buf   []byte
	ends  []int // end offset of each record's frame in buf
	start int   // offset of the frame being built
}

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.buf, b.ends = b.buf[:0], b.ends[:0]
}

// Grow makes room for n more bytes of frames (payloads and their headers,
// FrameSize each), so that encoding a batch of known size grows its buffer
// once.
func (b *Batch) Grow(n int) {
	b.buf = slices.Grow(b.buf, n)
}

// Len is the number of records in the batch.
func (b *Batch) Len() int { return len(b.ends) }

// Size is the framed size of the batch in bytes.
func (b *Batch) Size() int { return len(b.buf) }

// PayloadLen is the payload length of record i.
func (b *Batch) PayloadLen(i int) int {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.ends[i] - start - FrameHeaderSize
}

// Begin starts a record: it returns the batch's buffer with room for the
// frame header; append the payload to it and pass the result to End.
func (b *Batch) Begin() []byte {
	b.start = len(b.buf)
	var h [FrameHeaderSize]byte
	return append(b.buf, h[:]...)
}

// End finishes the record begun by Begin; buf is what Begin returned with
// the payload appended. It fails for a payload over MaxRecordSize, and the
// record is then not in the batch.
func (b *Batch) End(buf []byte) error {
	h := buf[b.start : b.start+FrameHeaderSize]
	n := len(buf) - b.start - FrameHeaderSize
	if n > MaxRecordSize {
		b.buf = buf[:b.start]
		return fmt.Errorf("%w: %d bytes", ErrRecordTooLarge, n)
	}
	binary.LittleEndian.PutUint32(h[0:4], uint32(n))
	h[8] = recordTypeData
	c := crc32.Update(0, castagnoli, h[0:4])
	c = crc32.Update(c, castagnoli, h[8:9])
	c = crc32.Update(c, castagnoli, buf[b.start+FrameHeaderSize:])
	binary.LittleEndian.PutUint32(h[4:8], c)
	b.buf = buf
	b.ends = append(b.ends, len(buf))
	return nil
}
