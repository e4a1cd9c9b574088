package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
)

// damageLog writes 3 full segments plus a partial 4th of 1000-byte records
// (60 per 64 KiB segment) and returns the records and their positions.
func damageLog(t *testing.T, dir string) ([][]byte, []Position) {
	t.Helper()
	l := mustOpen(t, dir, quietOpts(64<<10))
	var recs [][]byte
	var pos []Position
	for i := 0; i < 200; i += 10 {
		batch := make([][]byte, 10)
		for j := range batch {
			batch[j] = rec(i+j, 1000)
		}
		p := make([]Position, len(batch))
		if err := l.AppendPositions(p, batch...); err != nil {
			t.Fatal(err)
		}
		recs, pos = append(recs, batch...), append(pos, p...)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return recs, pos
}

func lastOf(pos []Position) uint64 { return pos[len(pos)-1].Segment }

func modify(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// unseal removes the empty segment a clean Close leaves after the data, as
// a crash would never have written it: the segment written last is then
// the last one again.
func unseal(t *testing.T, dir string) {
	t.Helper()
	segs, _ := listSegments(dir)
	last := segmentPath(dir, segs[len(segs)-1])
	if fi, err := os.Stat(last); err != nil || fi.Size() != SegmentHeaderSize {
		t.Fatalf("no empty segment after a clean close: %v %v", fi, err)
	}
	if err := os.Remove(last); err != nil {
		t.Fatal(err)
	}
}

// TestDamage applies one kind of damage to a closed log, reopens it and
// checks that every intact record is still read, the loss is counted and
// reported as what it is: a torn tail only where a crash can have left
// one (the log was not closed), a cut where a closed log lost bytes it had
// written.
func TestDamage(t *testing.T) {
	type result struct {
		lost    map[int]bool // indices of records that may not come back
		regions uint64       // LostRegions after Open + full replay
		damage  []Damage     // OpenDamage then the Reader's, in order
	}
	recEnd := func(p Position) int64 { return p.Offset + FrameSize(1000) }
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, pos []Position) result
	}{
		{"crash: torn last record", func(t *testing.T, dir string, pos []Position) result {
			unseal(t, dir)
			last := pos[len(pos)-1]
			modify(t, segmentPath(dir, last.Segment), func(b []byte) []byte { return b[:last.Offset+500] })
			return result{map[int]bool{len(pos) - 1: true}, 1, []Damage{{TornTail, last.Segment, last.Offset, 500, false}}}
		}},
		{"crash: torn last header", func(t *testing.T, dir string, pos []Position) result {
			unseal(t, dir)
			last := pos[len(pos)-1]
			modify(t, segmentPath(dir, last.Segment), func(b []byte) []byte { return b[:last.Offset+4] })
			return result{map[int]bool{len(pos) - 1: true}, 1, []Damage{{TornTail, last.Segment, last.Offset, 4, false}}}
		}},
		{"crash: garbage after last record", func(t *testing.T, dir string, pos []Position) result {
			unseal(t, dir)
			last := pos[len(pos)-1]
			modify(t, segmentPath(dir, lastOf(pos)), func(b []byte) []byte { return append(b, make([]byte, 5000)...) })
			return result{nil, 1, []Damage{{TornTail, last.Segment, recEnd(last), 5000, false}}}
		}},
		{"closed: last segment cut by 5 bytes", func(t *testing.T, dir string, pos []Position) result {
			last := pos[len(pos)-1]
			modify(t, segmentPath(dir, last.Segment), func(b []byte) []byte { return b[:len(b)-5] })
			return result{map[int]bool{len(pos) - 1: true}, 1, []Damage{{Cut, last.Segment, last.Offset, FrameSize(1000), false}}}
		}},
		{"closed: last segment cut at a record boundary", func(t *testing.T, dir string, pos []Position) result {
			last := pos[len(pos)-1]
			modify(t, segmentPath(dir, last.Segment), func(b []byte) []byte { return b[:last.Offset] })
			return result{map[int]bool{len(pos) - 1: true}, 1, []Damage{{Cut, last.Segment, last.Offset, FrameSize(1000), false}}}
		}},
		{"closed: garbage after last record is not part of the log", func(t *testing.T, dir string, pos []Position) result {
			modify(t, segmentPath(dir, lastOf(pos)), func(b []byte) []byte { return append(b, make([]byte, 5000)...) })
			return result{nil, 0, nil}
		}},
		{"flipped bit in last segment", func(t *testing.T, dir string, pos []Position) result {
			p := pos[len(pos)-5]
			modify(t, segmentPath(dir, p.Segment), func(b []byte) []byte { b[p.Offset+300] ^= 4; return b })
			return result{map[int]bool{len(pos) - 5: true}, 1, []Damage{{Region, p.Segment, p.Offset, FrameSize(1000), true}}}
		}},
		{"flipped bit in length of older segment", func(t *testing.T, dir string, pos []Position) result {
			p := pos[10]
			modify(t, segmentPath(dir, p.Segment), func(b []byte) []byte { b[p.Offset+1] ^= 0x20; return b })
			return result{map[int]bool{10: true}, 1, []Damage{{Region, p.Segment, p.Offset, FrameSize(1000), false}}}
		}},
		{"zeroed block in older segment", func(t *testing.T, dir string, pos []Position) result {
			p := pos[70]
			modify(t, segmentPath(dir, p.Segment), func(b []byte) []byte {
				clear(b[p.Offset+100 : p.Offset+100+4096])
				return b
			})
			// 4096 zeros from inside record 70 end inside record 74.
			return result{map[int]bool{70: true, 71: true, 72: true, 73: true, 74: true}, 1,
				[]Damage{{Region, p.Segment, p.Offset, pos[75].Offset - p.Offset, false}}}
		}},
		{"truncated older segment", func(t *testing.T, dir string, pos []Position) result {
			p := pos[80]
			modify(t, segmentPath(dir, p.Segment), func(b []byte) []byte { return b[:p.Offset+200] })
			lost := map[int]bool{}
			end := int64(0)
			for i, q := range pos {
				if q.Segment == p.Segment && i >= 80 {
					lost[i] = true
					end = recEnd(q)
				}
			}
			return result{lost, 1, []Damage{{Cut, p.Segment, p.Offset, end - p.Offset, false}}}
		}},
		{"missing middle segment", func(t *testing.T, dir string, pos []Position) result {
			seg := pos[0].Segment + 1
			fi, _ := os.Stat(segmentPath(dir, seg))
			os.Remove(segmentPath(dir, seg))
			lost := map[int]bool{}
			for i, q := range pos {
				if q.Segment == seg {
					lost[i] = true
				}
			}
			return result{lost, 1, []Damage{{Missing, seg, 0, fi.Size(), false}}}
		}},
		{"damaged segment header", func(t *testing.T, dir string, pos []Position) result {
			seg := pos[0].Segment + 1
			modify(t, segmentPath(dir, seg), func(b []byte) []byte { b[9] ^= 1; return b })
			return result{nil, 1, []Damage{{BadHeader, seg, 0, SegmentHeaderSize, false}}}
		}},
		{"last segment shorter than its header", func(t *testing.T, dir string, pos []Position) result {
			unseal(t, dir)
			if err := os.WriteFile(segmentPath(dir, lastOf(pos)+1), []byte("SLW"), 0o644); err != nil {
				t.Fatal(err)
			}
			return result{nil, 1, []Damage{{ShortSegment, lastOf(pos) + 1, 0, 3, false}}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			recs, pos := damageLog(t, dir)
			want := tc.damage(t, dir, pos)

			l := mustOpen(t, dir, quietOpts(64<<10))
			damage := append([]Damage(nil), l.OpenDamage()...)
			r := l.NewReader(Position{})
			at := map[Position][]byte{}
			n := 0
			for r.Next() {
				at[r.Position()] = bytes.Clone(r.Record())
				n++
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			damage = append(damage, r.Damage()...)
			r.Close()
			for i, p := range pos {
				if want.lost[i] {
					continue
				}
				if !bytes.Equal(at[p], recs[i]) {
					t.Errorf("intact record %d at %v not recovered", i, p)
				}
			}
			if n < len(recs)-len(want.lost) {
				t.Errorf("recovered %d records, want at least %d", n, len(recs)-len(want.lost))
			}
			st := l.Stats()
			if st.LostRegions != want.regions {
				t.Errorf("LostRegions = %d, want %d (stats %+v)", st.LostRegions, want.regions, st)
			}
			if fmt.Sprint(damage) != fmt.Sprint(want.damage) {
				t.Errorf("damage reported %v, want %v", damage, want.damage)
			}
			// The log is writable after recovery and a second open is clean.
			p, err := l.Append([]byte("after recovery"))
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			l = mustOpen(t, dir, quietOpts(64<<10))
			defer l.Close()
			if b, err := l.ReadAt(p, nil); err != nil || string(b) != "after recovery" {
				t.Fatalf("record appended after recovery: %q %v", b, err)
			}
		})
	}
}

func TestReadAtDamagedRecord(t *testing.T) {
	dir := t.TempDir()
	_, pos := damageLog(t, dir)
	p := pos[3]
	modify(t, segmentPath(dir, p.Segment), func(b []byte) []byte { b[p.Offset+50] ^= 1; return b })
	l := mustOpen(t, dir, quietOpts(64<<10))
	defer l.Close()
	var ce *CorruptionError
	if _, err := l.ReadAt(p, nil); !errors.As(err, &ce) {
		t.Fatalf("ReadAt damaged record = %v", err)
	}
	if _, err := l.ReadAt(pos[4], nil); err != nil {
		t.Fatalf("neighbour of damaged record: %v", err)
	}
	if l.Stats().LostRegions != 1 {
		t.Fatalf("LostRegions = %d", l.Stats().LostRegions)
	}
}
