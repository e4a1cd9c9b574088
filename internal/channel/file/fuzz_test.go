package filechannel

import (
	"testing"

	"github.com/sluicehq/sluice/internal/wal"
)

// FuzzDecodeCheckpoint: any payload decodes or fails cleanly, and what
// decodes encodes back to the same bytes.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(7, []ckDir{{"/a", wal.Position{Segment: 2, Offset: 24}}, {"/b", wal.Position{Segment: 1, Offset: 900}}},
		[]ckEntry{{0, wal.Position{Segment: 2, Offset: 24}}, {1, wal.Position{Segment: 1, Offset: 100}}}))
	f.Add(encodeCheckpoint(0, nil, nil))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		nextTx, dirs, held, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		for _, h := range held {
			if h.dir < 0 || h.dir >= len(dirs) {
				t.Fatalf("held event in dir %d of %d", h.dir, len(dirs))
			}
		}
		if again := encodeCheckpoint(nextTx, dirs, held); string(again) != string(b) {
			// Non-minimal varints decode too; they must decode the same.
			n2, d2, h2, err := decodeCheckpoint(again)
			if err != nil || n2 != nextTx || len(d2) != len(dirs) || len(h2) != len(held) {
				t.Fatalf("re-encoding changed the checkpoint")
			}
		}
	})
}
