package filechannel

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/wal"
)

// The file channel's WAL record payloads. Each starts with a kind byte; the
// WAL frames and checksums them (docs/format/wal.md). Integers are
// little-endian fixed width or unsigned varints (uv).
//
//	put      1 | txid u64 | committedAt i64 | receivedAt i64 | nheaders uv |
//	           (klen uv, key, vlen uv, value)* | body (the rest)
//	commit   2 | txid u64 | nputs u32
//	take     3 | n uv | (segment uv, offset uv)*     positions of taken puts
//	abort    4 | txid u64                             puts of txid never committed
//
// A put transaction is one WAL Append: its put records, then its commit
// record, contiguous in one segment. A take transaction is one take record.
// Rollbacks write nothing: a rolled-back put was never written, and a
// rolled-back take was never recorded.
const (
	kindPut    = 1
	kindCommit = 2
	kindTake   = 3
	kindAbort  = 4
)

const putFixed = 1 + 8 + 8 + 8

// commitSize is the size of a commit record (appendCommit).
const commitSize = 1 + 8 + 4

func appendPut(b []byte, txid uint64, committedAt int64, e *event.Event) []byte {
	b = append(b, kindPut)
	b = binary.LittleEndian.AppendUint64(b, txid)
	b = binary.LittleEndian.AppendUint64(b, uint64(committedAt))
	b = binary.LittleEndian.AppendUint64(b, uint64(e.ReceivedAt))
	b = binary.AppendUvarint(b, uint64(len(e.Headers)))
	if len(e.Headers) == 0 {
		return append(b, e.Body...)
	}
	for k, v := range e.Headers.All() {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return append(b, e.Body...)
}

// putSize is the size of e's put record, as appendPut writes it.
func putSize(e *event.Event) int {
	n := putFixed + binary.MaxVarintLen64 + len(e.Body)
	if len(e.Headers) > 0 {
		for k, v := range e.Headers.All() {
			n += 2*binary.MaxVarintLen64 + len(k) + len(v)
		}
	}
	return n
}

var errBadRecord = errors.New("malformed channel record")

// decodePut decodes a put record into an Event that owns its memory.
func decodePut(b []byte) (txid uint64, e event.Event, err error) {
	if len(b) < putFixed || b[0] != kindPut {
		return 0, e, errBadRecord
	}
	txid = binary.LittleEndian.Uint64(b[1:9])
	e.CommittedAt = int64(binary.LittleEndian.Uint64(b[9:17]))
	e.ReceivedAt = int64(binary.LittleEndian.Uint64(b[17:25]))
	b = b[putFixed:]
	nh, b, ok := uvarint(b)
	if !ok || nh > uint64(len(b)) {
		return 0, e, errBadRecord
	}
	if nh > 0 {
		// The headers' bytes are one string, each key and value a part of
		// it: one allocation for all of them.
		rest := b
		for range nh {
			if _, rest, ok = lenPrefixed(rest); !ok {
				return 0, e, errBadRecord
			}
			if _, rest, ok = lenPrefixed(rest); !ok {
				return 0, e, errBadRecord
			}
		}
		all := string(b[:len(b)-len(rest)])
		e.Headers = make(event.Headers, 0, nh)
		for range nh {
			var k, v string
			k, all = lenPrefixedString(all)
			v, all = lenPrefixedString(all)
			e.Headers = append(e.Headers, event.Header{Key: k, Value: v})
		}
		e.Headers.Dedupe()
		b = rest
	}
	e.Body = append([]byte(nil), b...)
	return txid, e, nil
}

// lenPrefixedString is lenPrefixed for a string already checked by it.
func lenPrefixedString(s string) (v, rest string) {
	n, w := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
	s = s[w:]
	return s[:n], s[n:]
}

func appendCommit(b []byte, txid uint64, n int) []byte {
	b = append(b, kindCommit)
	b = binary.LittleEndian.AppendUint64(b, txid)
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

func appendAbort(b []byte, txid uint64) []byte {
	b = append(b, kindAbort)
	return binary.LittleEndian.AppendUint64(b, txid)
}

func decodeTx(b []byte, kind byte) (txid uint64, n int, err error) {
	want := 9
	if kind == kindCommit {
		want = 13
	}
	if len(b) != want || b[0] != kind {
		return 0, 0, errBadRecord
	}
	txid = binary.LittleEndian.Uint64(b[1:9])
	if kind == kindCommit {
		n = int(binary.LittleEndian.Uint32(b[9:13]))
	}
	return txid, n, nil
}

func appendPositions(b []byte, pos []wal.Position) []byte {
	b = binary.AppendUvarint(b, uint64(len(pos)))
	for _, p := range pos {
		b = binary.AppendUvarint(b, p.Segment)
		b = binary.AppendUvarint(b, uint64(p.Offset))
	}
	return b
}

func appendTake(b []byte, pos []wal.Position) []byte {
	return appendPositions(append(b, kindTake), pos)
}

// appendTakeEntries is appendTake of the positions of es, in a buffer
// sized for them (a varint is at most 10 bytes; positions in a segment of
// up to 4 GiB take at most 1+5).
func appendTakeEntries(es []entry) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(es)*(binary.MaxVarintLen64+5))
	b = append(b, kindTake)
	b = binary.AppendUvarint(b, uint64(len(es)))
	for _, e := range es {
		b = binary.AppendUvarint(b, e.pos.Segment)
		b = binary.AppendUvarint(b, uint64(e.pos.Offset))
	}
	return b
}

// decodePositions decodes what appendPositions wrote, calling fn for each
// position, and returns the rest of b.
func decodePositions(b []byte, fn func(wal.Position)) ([]byte, error) {
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, errBadRecord
	}
	for range n {
		var s, o uint64
		if s, b, ok = uvarint(b); !ok {
			return nil, errBadRecord
		}
		if o, b, ok = uvarint(b); !ok {
			return nil, errBadRecord
		}
		fn(wal.Position{Segment: s, Offset: int64(o)})
	}
	return b, nil
}

func uvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, b, false
	}
	return v, b[n:], true
}

func lenPrefixed(b []byte) (field, rest []byte, ok bool) {
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, b, false
	}
	return b[:n], b[n:], true
}

// Checkpoint payload (version 2):
//
//	version u8 (2) | nextTxID u64 |
//	ndirs uv | (pathlen uv, path, segment uv, offset uv)*   each data dir and where its replay resumes
//	npos uv | (dir uv, segment uv, offset uv)*              every event held, in queue order
//
// The events held are the queued ones and those taken by open transactions;
// dir is an index into the dir list of this checkpoint. A data dir is known
// by its absolute path, so dataDirs may be reordered, extended or shortened
// between runs. Version 1 (one dir, positions only) is no longer read: such
// a checkpoint is unusable and the logs are replayed in full.
const checkpointVersion = 2

// ckDir is one data dir's part of a checkpoint.
type ckDir struct {
	path string
	from wal.Position
}

// ckEntry is one held event in a checkpoint.
type ckEntry struct {
	dir int
	pos wal.Position
}

func encodeCheckpoint(nextTx uint64, dirs []ckDir, held []ckEntry) []byte {
	b := make([]byte, 0, 32+len(held)*8)
	b = append(b, checkpointVersion)
	b = binary.LittleEndian.AppendUint64(b, nextTx)
	b = binary.AppendUvarint(b, uint64(len(dirs)))
	for _, d := range dirs {
		b = binary.AppendUvarint(b, uint64(len(d.path)))
		b = append(b, d.path...)
		b = binary.AppendUvarint(b, d.from.Segment)
		b = binary.AppendUvarint(b, uint64(d.from.Offset))
	}
	b = binary.AppendUvarint(b, uint64(len(held)))
	for _, e := range held {
		b = binary.AppendUvarint(b, uint64(e.dir))
		b = binary.AppendUvarint(b, e.pos.Segment)
		b = binary.AppendUvarint(b, uint64(e.pos.Offset))
	}
	return b
}

func decodeCheckpoint(b []byte) (nextTx uint64, dirs []ckDir, held []ckEntry, err error) {
	bad := func() (uint64, []ckDir, []ckEntry, error) {
		return 0, nil, nil, fmt.Errorf("checkpoint payload: %w", errBadRecord)
	}
	if len(b) < 9 || b[0] != checkpointVersion {
		if len(b) > 0 && b[0] != checkpointVersion {
			return 0, nil, nil, fmt.Errorf("checkpoint payload version %d, want %d: %w", b[0], checkpointVersion, errBadRecord)
		}
		return bad()
	}
	nextTx = binary.LittleEndian.Uint64(b[1:9])
	b = b[9:]
	nd, b, ok := uvarint(b)
	if !ok || nd > uint64(len(b)) {
		return bad()
	}
	for range nd {
		var path []byte
		var s, o uint64
		if path, b, ok = lenPrefixed(b); !ok {
			return bad()
		}
		if s, b, ok = uvarint(b); !ok {
			return bad()
		}
		if o, b, ok = uvarint(b); !ok {
			return bad()
		}
		dirs = append(dirs, ckDir{path: string(path), from: wal.Position{Segment: s, Offset: int64(o)}})
	}
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return bad()
	}
	held = make([]ckEntry, 0, n)
	for range n {
		var d, s, o uint64
		if d, b, ok = uvarint(b); !ok || d >= nd {
			return bad()
		}
		if s, b, ok = uvarint(b); !ok {
			return bad()
		}
		if o, b, ok = uvarint(b); !ok {
			return bad()
		}
		held = append(held, ckEntry{dir: int(d), pos: wal.Position{Segment: s, Offset: int64(o)}})
	}
	if len(b) != 0 {
		return bad()
	}
	return nextTx, dirs, held, nil
}
