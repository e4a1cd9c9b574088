package wal

import (
	"bytes"
	"testing"
)

func FuzzScanner(f *testing.F) {
	var seg []byte
	for i := range 5 {
		seg = appendFrame(seg, rec(i, i*40))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-7])
	f.Add(append(bytes.Clone(seg[:30]), seg...))
	flipped := bytes.Clone(seg)
	flipped[12] ^= 1
	f.Add(flipped)
	f.Add(make([]byte, 64))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := newScanner(bytes.NewReader(b), int64(len(b)), 0, nil)
		last := int64(-1)
		for s.next() {
			if s.recOff <= last || s.recOff+FrameSize(len(s.rec)) > int64(len(b)) {
				t.Fatalf("record at %d (after %d) of %d bytes out of bounds", s.recOff, last, len(s.rec))
			}
			h := b[s.recOff : s.recOff+FrameHeaderSize]
			if !frameCRCOK(h, s.rec) || frameLen(h) != len(s.rec) {
				t.Fatalf("scanner returned an invalid frame at %d", s.recOff)
			}
			last = s.recOff
		}
		if s.err != nil {
			t.Fatalf("scanner I/O error on an in-memory reader: %v", s.err)
		}
		if s.tail > int64(len(b)) || s.lostBytes > int64(len(b)) {
			t.Fatalf("tail %d, lost %d beyond %d bytes", s.tail, s.lostBytes, len(b))
		}
		// A clean, untouched stream is read back exactly.
		if bytes.Equal(b, seg) && s.regions != 0 {
			t.Fatalf("clean segment reported %d damaged regions", s.regions)
		}
	})
}
