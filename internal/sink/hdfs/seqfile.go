package hdfssink

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
)

// Hadoop's SequenceFile (org.apache.hadoop.io.SequenceFile, version 6), as
// Flume's HDFSSequenceFile writes it through SequenceFile.Writer:
//
//	header:  "SEQ" 6, key class and value class (Text strings: vint length
//	         + UTF-8), compressed and block-compressed (one byte each),
//	         the codec class when compressed, metadata (int32 count = 0),
//	         then the 16-byte sync marker of this file.
//	records: (uncompressed) int32 record length, int32 key length, key,
//	         value; before a record, when 100 KiB (SYNC_INTERVAL) passed
//	         since the last sync, a sync entry: int32 -1 then the marker.
//	blocks:  (block-compressed, what Flume uses with a codec) a sync entry,
//	         then vint record count and four codec-compressed buffers, each
//	         vint length + data: key lengths (vints), keys, value lengths
//	         (vints), values. A block is written when 1,000,000 bytes of
//	         keys and values are buffered and at every sync().
//
// Flume calls writer.sync() at every flush (each batch): uncompressed, that
// writes a sync entry unless one was just written; block-compressed, it
// writes the buffered block. Keys are LongWritable (8 bytes, big endian): the
// event's timestamp header, else the current time. Values are
// BytesWritable (int32 length + bytes; writeFormat Writable) or Text
// (vint length + bytes; writeFormat Text).

const (
	seqSyncInterval   = 5 * 1024 * 20 // SYNC_INTERVAL: 100 KiB
	seqBlockThreshold = 1000000       // io.seqfile.compress.blocksize
	classLong         = "org.apache.hadoop.io.LongWritable"
	classBytes        = "org.apache.hadoop.io.BytesWritable"
	classText         = "org.apache.hadoop.io.Text"
)

// seqWriter produces the bytes of one SequenceFile. It writes into out,
// which the caller drains after each batch; pos counts every byte produced.
type seqWriter struct {
	codec *codec // nil: uncompressed
	text  bool   // Text values instead of BytesWritable
	sync  [16]byte

	out      []byte
	pos      int64 // file offset of the end of out
	lastSync int64

	// block buffers
	n                          int
	keyLens, keys, vLens, vals []byte
}

func newSeqWriter(c *codec, text bool) *seqWriter {
	w := &seqWriter{codec: c, text: text}
	rand.Read(w.sync[:])
	w.out = appendSeqHeader(w.out, c, text, w.sync)
	w.pos = int64(len(w.out))
	return w
}

func appendSeqHeader(dst []byte, c *codec, text bool, sync [16]byte) []byte {
	dst = append(dst, 'S', 'E', 'Q', 6)
	dst = appendText(dst, classLong)
	if text {
		dst = appendText(dst, classText)
	} else {
		dst = appendText(dst, classBytes)
	}
	if c != nil {
		dst = append(dst, 1, 1)
		dst = appendText(dst, c.class)
	} else {
		dst = append(dst, 0, 0)
	}
	dst = binary.BigEndian.AppendUint32(dst, 0) // no metadata
	return append(dst, sync[:]...)
}

func appendText(dst []byte, s string) []byte {
	dst = appendVLong(dst, int64(len(s)))
	return append(dst, s...)
}

// appendVLong appends Hadoop's WritableUtils.writeVLong encoding: -112..127
// in one byte; else a length byte (-113..-120 for positive numbers of 1..8
// bytes, -121..-128 for negative ones, stored as their complement) then
// the big-endian bytes.
func appendVLong(dst []byte, i int64) []byte {
	if i >= -112 && i <= 127 {
		return append(dst, byte(i))
	}
	l := int64(-112)
	if i < 0 {
		i ^= -1
		l = -120
	}
	for tmp := i; tmp != 0; tmp >>= 8 {
		l--
	}
	dst = append(dst, byte(l))
	n := -(l + 112)
	if l < -120 {
		n = -(l + 120)
	}
	for idx := n; idx != 0; idx-- {
		dst = append(dst, byte(i>>((idx-1)*8)))
	}
	return dst
}

func (w *seqWriter) appendValue(dst []byte, body []byte) []byte {
	if w.text {
		dst = appendVLong(dst, int64(len(body)))
	} else {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	}
	return append(dst, body...)
}

func (w *seqWriter) valueLen(body []byte) int {
	if w.text {
		return len(appendVLong(nil, int64(len(body)))) + len(body)
	}
	return 4 + len(body)
}

// add appends one record (key = timestamp in ms).
func (w *seqWriter) add(key int64, body []byte) error {
	if w.codec == nil {
		if w.pos >= w.lastSync+seqSyncInterval {
			w.writeSync()
		}
		vlen := w.valueLen(body)
		start := len(w.out)
		w.out = binary.BigEndian.AppendUint32(w.out, uint32(8+vlen))
		w.out = binary.BigEndian.AppendUint32(w.out, 8)
		w.out = binary.BigEndian.AppendUint64(w.out, uint64(key))
		w.out = w.appendValue(w.out, body)
		w.pos += int64(len(w.out) - start)
		return nil
	}
	w.keyLens = appendVLong(w.keyLens, 8)
	w.keys = binary.BigEndian.AppendUint64(w.keys, uint64(key))
	before := len(w.vals)
	w.vals = w.appendValue(w.vals, body)
	w.vLens = appendVLong(w.vLens, int64(len(w.vals)-before))
	w.n++
	if len(w.keys)+len(w.vals) >= seqBlockThreshold {
		return w.flush()
	}
	return nil
}

func (w *seqWriter) writeSync() {
	if w.lastSync == w.pos {
		return
	}
	start := len(w.out)
	w.out = binary.BigEndian.AppendUint32(w.out, 0xFFFFFFFF)
	w.out = append(w.out, w.sync[:]...)
	w.pos += int64(len(w.out) - start)
	w.lastSync = w.pos
}

// flush is SequenceFile.Writer.sync(), which Flume calls at every batch.
func (w *seqWriter) flush() error {
	if w.codec == nil {
		w.writeSync()
		return nil
	}
	if w.n == 0 {
		return nil
	}
	w.writeSync()
	start := len(w.out)
	w.out = appendVLong(w.out, int64(w.n))
	for _, b := range [][]byte{w.keyLens, w.keys, w.vLens, w.vals} {
		c, err := w.codec.compress(nil, b)
		if err != nil {
			return err
		}
		w.out = appendVLong(w.out, int64(len(c)))
		w.out = append(w.out, c...)
	}
	w.pos += int64(len(w.out) - start)
	w.n = 0
	w.keyLens, w.keys, w.vLens, w.vals = w.keyLens[:0], w.keys[:0], w.vLens[:0], w.vals[:0]
	return nil
}

// readVLong decodes WritableUtils.readVLong from p, returning the value and
// the bytes used (0 when p is too short).
func readVLong(p []byte) (int64, int) {
	if len(p) == 0 {
		return 0, 0
	}
	first := int8(p[0])
	if first >= -112 {
		return int64(first), 1
	}
	neg := first < -120
	n := -111 - int(first)
	if neg {
		n = -119 - int(first)
	}
	if len(p) < n {
		return 0, 0
	}
	var i int64
	for k := 1; k < n; k++ {
		i = i<<8 | int64(p[k])
	}
	if neg {
		i ^= -1
	}
	return i, n
}

var errSeqHeader = errors.New("not a SequenceFile header")

// seqHeaderLen walks a SequenceFile header (magic, key and value class
// names, two flags, the codec class when compressed, metadata, sync) and
// returns its length; ok is false when data ends inside it.
func seqHeaderLen(data []byte) (int, bool) {
	pos := 4
	text := func() bool {
		l, n := readVLong(data[pos:])
		if n == 0 || l < 0 || l > int64(len(data)) || pos+n+int(l) > len(data) {
			return false
		}
		pos += n + int(l)
		return true
	}
	if !text() { // the key's class name
		return 0, false
	}
	if !text() || pos+2 > len(data) { // the value's, and the two flags
		return 0, false
	}
	compressed := data[pos] != 0
	pos += 2
	if compressed && !text() {
		return 0, false
	}
	if pos+4 > len(data) {
		return 0, false
	}
	meta := int(binary.BigEndian.Uint32(data[pos:]))
	pos += 4
	if meta < 0 || meta > len(data) {
		return 0, false
	}
	for range 2 * meta {
		if !text() {
			return 0, false
		}
	}
	if pos+16 > len(data) {
		return 0, false
	}
	return pos + 16, true
}

// scanSeq returns the length of the longest prefix of a SequenceFile made
// of its header and complete records, sync entries and blocks, for
// recovery after a crash (a batch whose write was torn is cut off; its
// events were not committed and come again). A whole file that is not a
// SequenceFile gives 0.
func scanSeq(data []byte, c *codec) (int, error) {
	if len(data) < 4 {
		return 0, nil
	}
	if string(data[:4]) != "SEQ\x06" {
		return 0, errSeqHeader
	}
	hdr, ok := seqHeaderLen(data)
	if !ok {
		return 0, nil
	}
	var sync [16]byte
	copy(sync[:], data[hdr-16:hdr])
	pos, good := hdr, hdr
	for pos+4 <= len(data) {
		l := int32(binary.BigEndian.Uint32(data[pos:]))
		if l == -1 {
			if pos+20 > len(data) || string(data[pos+4:pos+20]) != string(sync[:]) {
				return good, nil
			}
			pos += 20
			if c == nil {
				good = pos
			}
			continue
		}
		if c == nil {
			// Records count only once a sync entry follows them: Flume's
			// sync() ends every batch with one.
			if l < 8 || pos+8+int(l) > len(data) {
				return good, nil
			}
			pos += 8 + int(l)
			continue
		}
		// A block: count, then four length-prefixed buffers that must
		// decompress whole.
		p := pos
		_, n := readVLong(data[p:])
		if n == 0 {
			return good, nil
		}
		p += n
		for range 4 {
			bl, n := readVLong(data[p:])
			if n == 0 || bl < 0 || p+n+int(bl) > len(data) {
				return good, nil
			}
			p += n
			if c.scan(data[p:p+int(bl)]) != int(bl) {
				return good, nil
			}
			p += int(bl)
		}
		pos = p
		good = pos
	}
	return good, nil
}
