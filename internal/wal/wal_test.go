package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

func quietOpts(segSize int64) Options {
	return Options{SegmentSize: segSize, Logger: slog.New(slog.DiscardHandler)}
}

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// rec returns a deterministic record of size n for index i.
func rec(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*31 + j)
	}
	if n >= 4 {
		b[0], b[1], b[2], b[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
	}
	return b
}

type readRec struct {
	pos Position
	b   []byte
}

func readAll(t testing.TB, l *Log, from Position) []readRec {
	t.Helper()
	r := l.NewReader(from)
	defer r.Close()
	var out []readRec
	for r.Next() {
		out = append(out, readRec{r.Position(), bytes.Clone(r.Record())})
	}
	if err := r.Err(); err != nil {
		t.Fatalf("reader: %v", err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, quietOpts(0))
	var want [][]byte
	var pos []Position
	for i := range 100 {
		batch := [][]byte{rec(i, i*7), rec(i+1000, 3)}
		p := make([]Position, len(batch))
		if err := l.AppendPositions(p, batch...); err != nil {
			t.Fatal(err)
		}
		want = append(want, batch...)
		pos = append(pos, p...)
	}
	if _, err := l.Append([]byte{}); err != nil { // empty payloads are records too
		t.Fatal(err)
	}
	want = append(want, []byte{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}

	l = mustOpen(t, dir, quietOpts(0))
	defer l.Close()
	got := readAll(t, l, Position{})
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].b, want[i]) {
			t.Fatalf("record %d differs", i)
		}
		if i < len(pos) && got[i].pos != pos[i] {
			t.Fatalf("record %d at %v, Append said %v", i, got[i].pos, pos[i])
		}
	}
	for i, p := range pos {
		b, err := l.ReadAt(p, nil)
		if err != nil || !bytes.Equal(b, want[i]) {
			t.Fatalf("ReadAt(%v) = %v, %v", p, len(b), err)
		}
	}
	// Reading from a position skips what is before it.
	if rest := readAll(t, l, pos[50]); len(rest) != len(want)-50 || !bytes.Equal(rest[0].b, want[50]) {
		t.Fatalf("reader from %v returned %d records", pos[50], len(rest))
	}
	if s := l.Stats(); s.LostRegions != 0 {
		t.Fatalf("clean log reports losses: %+v", s)
	}
}

func TestRotationAndBigBatches(t *testing.T) {
	dir := t.TempDir()
	const seg = 64 << 10
	l := mustOpen(t, dir, quietOpts(seg))
	var want [][]byte
	var pos []Position
	add := func(batch ...[]byte) {
		p := make([]Position, len(batch))
		if err := l.AppendPositions(p, batch...); err != nil {
			t.Fatal(err)
		}
		want, pos = append(want, batch...), append(pos, p...)
	}
	for i := range 50 {
		add(rec(i, 3000), rec(i, 10)) // batches that fit stay in one segment
		if pos[len(pos)-1].Segment != pos[len(pos)-2].Segment {
			t.Fatalf("batch %d split across segments: %v %v", i, pos[len(pos)-2], pos[len(pos)-1])
		}
	}
	var big [][]byte
	for i := range 100 { // 300 KB: larger than a segment, so it is split
		big = append(big, rec(i, 3000))
	}
	add(big...)
	if _, err := l.Append(make([]byte, seg)); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	l.Close()

	segs, _ := listSegments(dir)
	if len(segs) < 6 {
		t.Fatalf("only %d segments after writing >450 KB in 64 KB segments", len(segs))
	}
	l = mustOpen(t, dir, quietOpts(seg))
	defer l.Close()
	got := readAll(t, l, Position{})
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].pos != pos[i] || !bytes.Equal(got[i].b, want[i]) {
			t.Fatalf("record %d: at %v want %v", i, got[i].pos, pos[i])
		}
	}
	for _, s := range segs {
		fi, _ := os.Stat(segmentPath(dir, s))
		if fi.Size() > seg {
			t.Fatalf("segment %d is %d bytes, over %d", s, fi.Size(), seg)
		}
	}
}

func TestConcurrentAppendersAllAckedSurvive(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, quietOpts(256<<10))
	const writers, perWriter = 8, 200
	var wg sync.WaitGroup
	acked := make([][]Position, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				p, err := l.Append([]byte(fmt.Sprintf("w%d-%d", w, i)), rec(i, 500))
				if err != nil {
					t.Error(err)
					return
				}
				acked[w] = append(acked[w], p)
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	l.Close()
	if st.Appends != writers*perWriter || st.Records != 2*writers*perWriter {
		t.Fatalf("stats %+v", st)
	}

	l = mustOpen(t, dir, quietOpts(256<<10))
	defer l.Close()
	got := readAll(t, l, Position{})
	at := make(map[Position]string, len(got))
	for _, r := range got {
		at[r.pos] = string(r.b)
	}
	next := make([]int, writers)
	for _, r := range got { // each writer's records appear in its order
		var w, i int
		if _, err := fmt.Sscanf(string(r.b), "w%d-%d", &w, &i); err == nil {
			if i != next[w] {
				t.Fatalf("writer %d: record %d after %d", w, i, next[w]-1)
			}
			next[w]++
		}
	}
	for w := range writers {
		for i, p := range acked[w] {
			if at[p] != fmt.Sprintf("w%d-%d", w, i) {
				t.Fatalf("acked record w%d-%d missing at %v", w, i, p)
			}
		}
	}
}

// gateFile wraps a real segment file; its Datasync can be held or failed.
type gateFile struct {
	SegmentFile
	hooks *fileHooks
}

type fileHooks struct {
	mu        sync.Mutex
	hold      chan struct{} // when set, the next Datasync waits for it to close
	held      chan struct{} // closed when a Datasync is waiting on hold
	failWrite error
	partial   bool // a failing write writes half its bytes first, as a filling disk does
	failSync  error
	writes    int
}

func (f gateFile) Write(p []byte) (int, error) {
	h := f.hooks
	h.mu.Lock()
	err, partial := h.failWrite, h.partial
	h.writes++
	h.mu.Unlock()
	if err != nil {
		if partial {
			n, _ := f.SegmentFile.Write(p[:len(p)/2])
			return n, err
		}
		return 0, err
	}
	return f.SegmentFile.Write(p)
}

func (f gateFile) Datasync() error {
	h := f.hooks
	h.mu.Lock()
	hold, held, err := h.hold, h.held, h.failSync
	h.hold = nil
	h.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	if err != nil {
		return err
	}
	return f.SegmentFile.Datasync()
}

func hookedOpts(h *fileHooks) Options {
	o := quietOpts(0)
	o.OpenSegment = func(path string) (SegmentFile, error) {
		f, err := OpenSegmentFile(path)
		if err != nil {
			return nil, err
		}
		return gateFile{f, h}, nil
	}
	return o
}

func (l *Log) writtenUpTo() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writtenSeq
}

// While one sync is in progress, every Append that arrives is written to
// the page cache and then shares the next single fdatasync.
func TestGroupCommitSharesOneSync(t *testing.T) {
	h := &fileHooks{}
	l := mustOpen(t, t.TempDir(), hookedOpts(h))
	defer l.Close()

	hold, held := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.hold, h.held = hold, held
	h.mu.Unlock()
	first := make(chan error, 1)
	go func() { _, err := l.Append([]byte("first")); first <- err }()
	<-held // the writer is inside the first pass's fdatasync

	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() { _, err := l.Append(rec(i, 100)); errs <- err }()
	}
	for l.writtenUpTo() < n+1 { // wait until all n are written behind the held sync
		runtime.Gosched()
	}
	before := l.Stats().Syncs
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The held sync is counted once it completes; the 16 must share one.
	if got := l.Stats().Syncs - before; got != 2 {
		t.Fatalf("%d appends queued during a sync took %d syncs after it, want 1", n, got-1)
	}
}

// Under free-running concurrency group commit must still do fewer syncs
// than appends.
func TestGroupCommitUnderLoad(t *testing.T) {
	l := mustOpen(t, t.TempDir(), quietOpts(0))
	defer l.Close()
	before := l.Stats()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if _, err := l.Append(rec(w*1000+i, 1024)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	appends, syncs := st.Appends-before.Appends, st.Syncs-before.Syncs
	t.Logf("%d appends, %d syncs (%.1f appends per sync)", appends, syncs, float64(appends)/float64(syncs))
	if syncs*2 > appends {
		t.Fatalf("%d syncs for %d concurrent appends: not grouping", syncs, appends)
	}
}

// A write or sync error sticks: every Append fails at once, without
// touching the disk, even once the disk works again, until Recover. Recover
// fails while the disk still does, then cuts off what was not durable and
// starts a fresh segment: the failed records are gone (also after a
// reopen, with no damage reported), their tickets stay failed, and new
// appends are durable.
func TestFailureAndRecover(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(h *fileHooks, err error)
	}{
		{"write", func(h *fileHooks, err error) { h.failWrite = err }},
		{"partial write", func(h *fileHooks, err error) { h.failWrite, h.partial = err, true }},
		{"sync", func(h *fileHooks, err error) { h.failSync = err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h := &fileHooks{}
			l := mustOpen(t, dir, hookedOpts(h))
			okPos, err := l.Append([]byte("before"))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Recover(); err != nil {
				t.Fatalf("Recover on a healthy log: %v", err)
			}
			boom := errors.New("disk on fire")
			h.mu.Lock()
			tc.set(h, boom)
			h.mu.Unlock()
			lostTicket, err := l.AppendAsync([]byte("lost async"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append([]byte("during")); !errors.Is(err, boom) {
				t.Fatalf("Append during failure = %v", err)
			}
			if err := l.WaitDurable(lostTicket); !errors.Is(err, boom) {
				t.Fatalf("WaitDurable of a record written into the failure = %v", err)
			}
			if err := l.Recover(); err == nil || l.Err() == nil {
				t.Fatalf("Recover while the disk still fails = %v, Err %v", err, l.Err())
			}
			// Healed disk, but the error sticks and fails fast.
			h.mu.Lock()
			tc.set(h, nil)
			writes := h.writes
			h.mu.Unlock()
			for range 3 {
				if _, err := l.Append([]byte("after")); !errors.Is(err, boom) {
					t.Fatalf("Append after failure = %v, want the sticky error", err)
				}
				if _, err := l.AppendAsync([]byte("after")); !errors.Is(err, boom) {
					t.Fatalf("AppendAsync after failure = %v, want the sticky error", err)
				}
			}
			h.mu.Lock()
			if h.writes != writes {
				t.Fatalf("appends after a sticky error still wrote")
			}
			h.mu.Unlock()
			if !errors.Is(l.Err(), boom) {
				t.Fatalf("Err() = %v", l.Err())
			}

			if err := l.Recover(); err != nil {
				t.Fatalf("Recover on a healed disk: %v", err)
			}
			if l.Err() != nil {
				t.Fatalf("Err() after Recover = %v", l.Err())
			}
			if err := l.WaitDurable(lostTicket); !errors.Is(err, boom) {
				t.Fatalf("WaitDurable of a lost record after Recover = %v", err)
			}
			newPos, err := l.Append([]byte("recovered"))
			if err != nil {
				t.Fatalf("Append after Recover: %v", err)
			}
			if newPos.Segment != okPos.Segment+1 {
				t.Fatalf("first record after Recover at %v, want the start of segment %d", newPos, okPos.Segment+1)
			}
			tk, err := l.AppendAsync([]byte("recovered async"))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.WaitDurable(tk); err != nil {
				t.Fatal(err)
			}
			if st := l.Stats(); st.Failures != 1 || st.Recoveries != 1 {
				t.Fatalf("stats %+v, want 1 failure and 1 recovery", st)
			}
			l.Close()

			l = mustOpen(t, dir, quietOpts(0))
			defer l.Close()
			var got []string
			r := l.NewReader(Position{})
			for r.Next() {
				got = append(got, string(r.Record()))
			}
			if fmt.Sprint(got) != "[before recovered recovered async]" || len(r.Damage()) != 0 || len(l.OpenDamage()) != 0 {
				t.Fatalf("after reopen: %q, damage %v %v", got, r.Damage(), l.OpenDamage())
			}
			r.Close()
		})
	}
}

// When the failed segment cannot be truncated (a broken disk), the fresh
// segment's header still says where it ends: whatever of the failed writes
// is in the file is never read back.
func TestRecoverIgnoresAFailedTailThatStayed(t *testing.T) {
	dir := t.TempDir()
	h := &fileHooks{}
	l := mustOpen(t, dir, hookedOpts(h))
	p, err := l.Append([]byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.failSync = errors.New("EIO")
	h.mu.Unlock()
	if _, err := l.Append([]byte("failed")); err == nil {
		t.Fatal("append on a failing sync succeeded")
	}
	h.mu.Lock()
	h.failSync = nil
	h.mu.Unlock()
	if err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("later")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// Put back what truncation removed: a whole, valid record.
	f, err := os.OpenFile(segmentPath(dir, p.Segment), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(appendFrame(nil, []byte("failed")))
	f.Close()
	l = mustOpen(t, dir, quietOpts(0))
	defer l.Close()
	var got []string
	for _, r := range readAll(t, l, Position{}) {
		got = append(got, string(r.b))
	}
	if fmt.Sprint(got) != "[kept later]" || l.Stats().LostRegions != 0 {
		t.Fatalf("read %q, LostRegions %d", got, l.Stats().LostRegions)
	}
}

// A failure while rotating (no room for the next segment's header) is
// recovered like any other, with no gap in the segment numbers.
func TestRecoverFromFailedRotation(t *testing.T) {
	dir := t.TempDir()
	h := &fileHooks{}
	o := hookedOpts(h)
	o.SegmentSize = 64 << 10
	l := mustOpen(t, dir, o)
	var acked []string
	for i := 0; ; i++ {
		if i == 20 {
			h.mu.Lock()
			h.failWrite = errors.New("ENOSPC")
			h.mu.Unlock()
		}
		body := fmt.Sprintf("%d:%s", i, bytes.Repeat([]byte("x"), 10000))
		if _, err := l.Append([]byte(body)); err != nil {
			break
		}
		acked = append(acked, body)
	}
	h.mu.Lock()
	h.failWrite = nil
	h.mu.Unlock()
	if err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		body := fmt.Sprintf("after %d:%s", i, bytes.Repeat([]byte("y"), 10000))
		if _, err := l.Append([]byte(body)); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, body)
	}
	l.Close()
	l = mustOpen(t, dir, quietOpts(64<<10))
	defer l.Close()
	var got []string
	for _, r := range readAll(t, l, Position{}) {
		got = append(got, string(r.b))
	}
	if len(got) != len(acked) || l.Stats().LostRegions != 0 {
		t.Fatalf("read %d records, %d acknowledged; LostRegions %d", len(got), len(acked), l.Stats().LostRegions)
	}
	for i := range got {
		if got[i] != acked[i] {
			t.Fatalf("record %d differs", i)
		}
	}
}

// AppendAsync returns before its records are durable; they become durable
// by themselves (no later Append is needed) and WaitDurable waits for that.
func TestAppendAsyncSyncsByItself(t *testing.T) {
	h := &fileHooks{}
	dir := t.TempDir()
	l := mustOpen(t, dir, hookedOpts(h))
	first, err := l.Append([]byte("durable"))
	if err != nil {
		t.Fatal(err)
	}
	// Hold the next sync: AppendAsync must not wait for it.
	hold, held := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.hold, h.held = hold, held
	h.mu.Unlock()
	tk, err := l.AppendAsync([]byte("take-1"), []byte("take-2"))
	if err != nil {
		t.Fatal(err)
	}
	<-held // its sync started on its own
	if got := l.End(); got != (Position{first.Segment, first.Offset + FrameSize(len("durable"))}) {
		t.Fatalf("End = %v while the sync is held: reported durable too early", got)
	}
	waited := make(chan error, 1)
	go func() { waited <- l.WaitDurable(tk) }()
	select {
	case err := <-waited:
		t.Fatalf("WaitDurable returned %v while the sync is held", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	want := Position{first.Segment, first.Offset + FrameSize(len("durable")) + FrameSize(len("take-1")) + FrameSize(len("take-2"))}
	deadline := time.Now().Add(10 * time.Second)
	for l.End() != want {
		if time.Now().After(deadline) {
			t.Fatalf("End = %v after WaitDurable, want %v", l.End(), want)
		}
		time.Sleep(time.Millisecond)
	}
	if st := l.Stats(); st.Appends != 2 || st.Records != 3 {
		t.Fatalf("stats %+v, want 2 appends of 3 records", st)
	}
	l.Close()
	if _, err := l.AppendAsync([]byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("AppendAsync after Close = %v, want ErrClosed", err)
	}

	l = mustOpen(t, dir, quietOpts(0))
	defer l.Close()
	var got []string
	for _, r := range readAll(t, l, first) {
		got = append(got, string(r.b))
	}
	if fmt.Sprint(got) != "[durable take-1 take-2]" {
		t.Fatalf("after reopen: %q", got)
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, quietOpts(0))
	if _, err := Open(dir, quietOpts(0)); err == nil {
		t.Fatal("second Open of the same dir succeeded")
	}
	l.Close()
	mustOpen(t, dir, quietOpts(0)).Close()
}

func TestTruncateBefore(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, quietOpts(64<<10))
	defer l.Close()
	var pos []Position
	for i := range 100 {
		p, err := l.Append(rec(i, 4000))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	cut := pos[60].Segment
	if err := l.TruncateBefore(cut); err != nil {
		t.Fatal(err)
	}
	if l.FirstSegment() != cut {
		t.Fatalf("FirstSegment = %d, want %d", l.FirstSegment(), cut)
	}
	segs, _ := listSegments(dir)
	if segs[0] != cut {
		t.Fatalf("oldest segment on disk %d, want %d", segs[0], cut)
	}
	if _, err := l.ReadAt(pos[0], nil); err == nil {
		t.Fatal("ReadAt in a deleted segment succeeded")
	}
	got := readAll(t, l, Position{})
	if got[0].pos.Segment != cut || l.Stats().LostRegions != 0 {
		t.Fatalf("reader after truncation starts at %v, lost %d", got[0].pos, l.Stats().LostRegions)
	}
	if err := l.TruncateBefore(1 << 40); err != nil { // clamps to the open segment
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("still writable")); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadCheckpoint(dir); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("missing checkpoint: %v", err)
	}
	c := Checkpoint{Position: Position{Segment: 7, Offset: 1234}, Payload: []byte("queue state")}
	if err := WriteCheckpoint(dir, c); err != nil {
		t.Fatal(err)
	}
	c.Payload = []byte("newer state")
	if err := WriteCheckpoint(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCheckpoint(dir)
	if err != nil || got.Position != c.Position || string(got.Payload) != "newer state" {
		t.Fatalf("ReadCheckpoint = %+v, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("temporary checkpoint file left behind")
	}
	path := filepath.Join(dir, CheckpointFile)
	good, _ := os.ReadFile(path)
	for name, damage := range map[string]func([]byte) []byte{
		"flipped bit": func(b []byte) []byte { b[40] ^= 0x10; return b },
		"truncated":   func(b []byte) []byte { return b[:len(b)-3] },
		"empty":       func(b []byte) []byte { return nil },
		"bad magic":   func(b []byte) []byte { b[0] = 'X'; return b },
	} {
		if err := os.WriteFile(path, damage(bytes.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		var ce *CorruptionError
		if _, err := ReadCheckpoint(dir); !errors.As(err, &ce) {
			t.Errorf("%s: ReadCheckpoint = %v, want a CorruptionError", name, err)
		}
	}
}

// An AppendAsync starts no write pass and no fdatasync of its own: it goes
// out with the next Append's, which one sync covers (issue 17: a take
// record per event cost a second fdatasync per event at low rates).
func TestAppendAsyncRidesTheNextAppend(t *testing.T) {
	o := quietOpts(0)
	o.LazyDelay = time.Hour // never, in this test
	l := mustOpen(t, t.TempDir(), o)
	defer l.Close()
	first, err := l.Append([]byte("put-1"))
	if err != nil {
		t.Fatal(err)
	}
	before := l.Stats()
	tk, err := l.AppendAsync([]byte("take-1"))
	if err != nil {
		t.Fatal(err)
	}
	// A wake-up the writer gets anyway (as when it comes round from its
	// last pass and finds the record queued) must not start a pass either.
	l.nudge()
	time.Sleep(50 * time.Millisecond) // an eager log would have written and synced it by now
	if st := l.Stats(); st.Syncs != before.Syncs || st.BytesWritten != before.BytesWritten {
		t.Fatalf("an AppendAsync alone wrote %d bytes and synced %d times; want it to wait for the next pass",
			st.BytesWritten-before.BytesWritten, st.Syncs-before.Syncs)
	}
	if _, err := l.Append([]byte("put-2")); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats().Syncs - before.Syncs; got != 1 {
		t.Fatalf("the AppendAsync and the Append after it took %d fdatasyncs, want 1", got)
	}
	if err := l.WaitDurable(tk); err != nil {
		t.Fatal(err)
	}
	want := Position{first.Segment, first.Offset + FrameSize(len("put-1")) + FrameSize(len("take-1")) + FrameSize(len("put-2"))}
	if got := l.End(); got != want {
		t.Fatalf("End = %v, want %v (the take record before put-2)", got, want)
	}
}

// Waiting for a lazy AppendAsync starts its pass at once, without waiting
// for LazyDelay.
func TestWaitDurableStartsALazyPass(t *testing.T) {
	o := quietOpts(0)
	o.LazyDelay = time.Hour
	l := mustOpen(t, t.TempDir(), o)
	defer l.Close()
	tk, err := l.AppendAsync([]byte("take"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.WaitDurable(tk) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitDurable on a lazy AppendAsync did not return within 10 s")
	}
}

// A Recover that arrives while lazy AppendAsyncs are queued (no pass took
// them) settles them as failed before it cuts the log back: they were
// placed in the failed segment.
func TestRecoverWithLazyAppendsQueued(t *testing.T) {
	dir := t.TempDir()
	h := &fileHooks{}
	o := hookedOpts(h)
	o.LazyDelay = time.Hour
	l := mustOpen(t, dir, o)
	if _, err := l.Append([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk on fire")
	hold, held := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.hold, h.held, h.failSync = hold, held, boom
	h.mu.Unlock()
	failed := make(chan error, 1)
	go func() { _, err := l.Append([]byte("failing")); failed <- err }()
	<-held // its fdatasync is under way (and will fail)
	tk, err := l.AppendAsync([]byte("lazy, queued"))
	if err != nil {
		t.Fatal(err)
	}
	close(hold)
	if err := <-failed; !errors.Is(err, boom) {
		t.Fatalf("Append = %v, want the sync failure", err)
	}
	h.mu.Lock()
	h.failSync = nil
	h.mu.Unlock()
	if err := l.Recover(); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if err := l.WaitDurable(tk); !errors.Is(err, boom) {
		t.Fatalf("WaitDurable of the lazy append queued at the failure = %v, want the failure", err)
	}
	if _, err := l.Append([]byte("after")); err != nil {
		t.Fatalf("Append after Recover: %v", err)
	}
	l.Close()
	l = mustOpen(t, dir, quietOpts(0))
	defer l.Close()
	var got []string
	for _, r := range readAll(t, l, Position{Segment: 1, Offset: SegmentHeaderSize}) {
		got = append(got, string(r.b))
	}
	if fmt.Sprint(got) != "[kept after]" {
		t.Fatalf("after reopen: %q", got)
	}
}
