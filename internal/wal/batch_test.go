package wal

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

// Records framed in a Batch read back like Appended ones, at the positions
// AppendBatch reported, including a batch that spans segments, and a Batch
// can be reused; concurrent AppendBatches group-commit like Appends.
func TestAppendBatch(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, quietOpts(minSegmentSize))
	var want []readRec
	var b Batch
	for round, sizes := range [][]int{{0, 1, 100}, {30000, 30000, 30000}, {5}} {
		b.Reset()
		for i, n := range sizes {
			buf := b.Begin()
			buf = append(buf, rec(round*10+i, n)...)
			if err := b.End(buf); err != nil {
				t.Fatal(err)
			}
		}
		if b.Len() != len(sizes) || b.PayloadLen(len(sizes)-1) != sizes[len(sizes)-1] {
			t.Fatalf("Len %d PayloadLen %d", b.Len(), b.PayloadLen(len(sizes)-1))
		}
		pos := make([]Position, b.Len())
		if err := l.AppendBatch(&b, pos); err != nil {
			t.Fatal(err)
		}
		for i, n := range sizes {
			want = append(want, readRec{pos[i], rec(round*10+i, n)})
			got, err := l.ReadAt(pos[i], nil)
			if err != nil || !bytes.Equal(got, rec(round*10+i, n)) {
				t.Fatalf("ReadAt %v: %v", pos[i], err)
			}
		}
	}
	if want[3].pos.Segment == want[5].pos.Segment {
		t.Fatalf("a 90 KB batch in 64 KiB segments did not span segments: %v", want)
	}
	l.Close()
	l = mustOpen(t, dir, quietOpts(minSegmentSize))
	defer l.Close()
	got := readAll(t, l, Position{})
	if len(got) != len(want) {
		t.Fatalf("read back %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].pos != want[i].pos || !bytes.Equal(got[i].b, want[i].b) {
			t.Fatalf("record %d at %v, want at %v", i, got[i].pos, want[i].pos)
		}
	}

	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b Batch
			for i := range 50 {
				b.Reset()
				buf := b.Begin()
				if err := b.End(append(buf, rec(w*1000+i, 200)...)); err != nil {
					t.Error(err)
					return
				}
				if err := l.AppendBatch(&b, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(readAll(t, l, Position{})); n != len(want)+400 {
		t.Fatalf("%d records after concurrent batches, want %d", n, len(want)+400)
	}
}

// A batch Appended to a failed log fails with the sticky error and is
// released by the writer before AppendBatch returns, so it can be reused.
func TestAppendBatchSticky(t *testing.T) {
	h := &fileHooks{}
	l := mustOpen(t, t.TempDir(), hookedOpts(h))
	defer l.Close()
	boom := errors.New("disk on fire")
	h.mu.Lock()
	h.failWrite = boom
	h.mu.Unlock()
	var b Batch
	for range 3 {
		b.Reset()
		buf := b.Begin()
		if err := b.End(append(buf, "x"...)); err != nil {
			t.Fatal(err)
		}
		if err := l.AppendBatch(&b, nil); !errors.Is(err, boom) {
			t.Fatalf("AppendBatch on a failed disk: %v", err)
		}
	}
}
