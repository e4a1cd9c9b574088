package taildirsource

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// fixture is a taildir source over one directory, feeding a memory channel.
type fixture struct {
	t     *testing.T
	dir   string
	pos   string
	props map[string]string
	pl    *sourcetest.Pipeline
	src   *Source
	logs  *testutil.LogBuffer
}

func newFixture(t *testing.T, extra map[string]string) *fixture {
	t.Helper()
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	fx := &fixture{t: t, dir: logs, pos: filepath.Join(dir, "state", "pos.json"), logs: &testutil.LogBuffer{}}
	fx.props = map[string]string{
		"filegroups":       "g1",
		"filegroups.g1":    logs + `/app\.log.*`,
		"positionFile":     fx.pos,
		"writePosInterval": "50",
		"idleTimeout":      "60000",
		"pollInterval":     "50",
		"batchSize":        "100",
	}
	for k, v := range extra {
		fx.props[k] = v
	}
	fx.pl = sourcetest.NewPipeline(t, 100000, 1000, 100*time.Millisecond)
	return fx
}

// newAppLogFixture watches app.log alone, not the names it is rotated to.
func newAppLogFixture(t *testing.T) *fixture {
	t.Helper()
	fx := newFixture(t, nil)
	fx.props["filegroups.g1"] = fx.dir + `/app\.log`
	return fx
}

func (fx *fixture) start() {
	fx.t.Helper()
	p := config.FromMap("a1.sources.r1.", fx.props)
	env := sourcetest.Env("r1", "taildir")
	env.Logger = slog.New(slog.NewTextHandler(fx.logs, nil))
	s, err := New(env, p)
	if err != nil {
		fx.t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		fx.t.Fatal(err)
	}
	fx.src = s.(*Source)
	if err := fx.src.Start(context.Background(), fx.pl.Processor); err != nil {
		fx.t.Fatal(err)
	}
	fx.t.Cleanup(fx.stop)
}

func (fx *fixture) stop() {
	if fx.src == nil {
		return
	}
	if err := fx.src.Stop(context.Background()); err != nil {
		fx.t.Error(err)
	}
	fx.src = nil
}

func (fx *fixture) path(name string) string { return filepath.Join(fx.dir, name) }

func (fx *fixture) append(name, text string) {
	fx.t.Helper()
	f, err := os.OpenFile(fx.path(name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fx.t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		fx.t.Fatal(err)
	}
	f.Close()
}

// expect drains exactly want (in order) and checks nothing more arrives soon.
func (fx *fixture) expect(want ...string) []event.Event {
	fx.t.Helper()
	got := fx.pl.Drain(fx.t, len(want), 5*time.Second)
	if !slices.Equal(sourcetest.Bodies(got), want) {
		fx.t.Fatalf("got %q, want %q", sourcetest.Bodies(got), want)
	}
	if extra := fx.pl.Take(fx.t, 10, 150*time.Millisecond); len(extra) > 0 {
		fx.t.Fatalf("unexpected extra events %q", sourcetest.Bodies(extra))
	}
	return got
}

// expectUnordered drains exactly want, in any order: lines of several files
// have no order between them.
func (fx *fixture) expectUnordered(want ...string) {
	fx.t.Helper()
	got := sourcetest.Bodies(fx.pl.Drain(fx.t, len(want), 5*time.Second))
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		fx.t.Fatalf("got %q, want %q", got, want)
	}
}

// reuseInode deletes name and writes text into new files under that name
// until one gets inode ino back, and skips the test when the file system
// does not hand it out again.
func (fx *fixture) reuseInode(name string, ino uint64, text string) {
	fx.t.Helper()
	for range 50 {
		os.Remove(fx.path(name))
		fx.append(name, text)
		if inode(fx.t, fx.path(name)) == ino {
			return
		}
	}
	fx.t.Skip("the file system did not reuse the inode")
}

func lines(prefix string, from, n int) (string, []string) {
	var b strings.Builder
	var want []string
	for i := from; i < from+n; i++ {
		l := fmt.Sprintf("%s%d", prefix, i)
		b.WriteString(l + "\n")
		want = append(want, l)
	}
	return b.String(), want
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func readPositions(t *testing.T, path string) []position {
	t.Helper()
	ps, err := loadPositions(path)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestTailsLinesAndHeaders(t *testing.T) {
	fx := newFixture(t, map[string]string{
		"fileHeader": "true", "fileHeaderKey": "path", "byteOffsetHeader": "true",
		"headers.g1.topic": "app", "headers.g1.env": "prod",
	})
	fx.append("app.log", "first\r\nsecond\n")
	fx.append("other.log", "not followed\n")
	fx.start()
	got := fx.expect("first", "second")
	for i, off := range []string{"0", "7"} {
		h := got[i].Headers
		if h.Value("path") != fx.path("app.log") || h.Value("byteoffset") != off || h.Value("topic") != "app" || h.Value("env") != "prod" {
			t.Errorf("event %d headers = %v", i, h)
		}
	}
	fx.append("app.log", "third\n")
	fx.expect("third")
}

func TestPartialLineWaitsForNewline(t *testing.T) {
	fx := newFixture(t, nil)
	fx.start()
	fx.append("app.log", "one\ntw")
	fx.expect("one")
	fx.append("app.log", "o\n")
	fx.expect("two")
}

func TestPartialLineSentWhenIdle(t *testing.T) {
	fx := newFixture(t, map[string]string{"idleTimeout": "200"})
	fx.start()
	fx.append("app.log", "one\nno newline")
	fx.expect("one", "no newline")
	fx.append("app.log", " more\n")
	fx.expect(" more")
}

func TestPositionsAdvanceOnlyAfterCommit(t *testing.T) {
	fx := newFixture(t, map[string]string{"backoffSleepIncrement": "20", "maxBackoffSleep": "50", "batchSize": "10"})
	fx.pl = sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
	text, want := lines("l", 0, 25)
	fx.append("app.log", text)
	fx.start()
	// The channel holds one batch of 10; the source retries the second.
	if !testutil.Eventually(func() bool { return fx.src.counters.ChannelWriteFail.Load() > 0 }, 5*time.Second) {
		t.Fatal("no failed put with a full channel")
	}
	fx.stop()
	ps := readPositions(t, fx.pos)
	if len(ps) != 1 || ps[0].Pos != int64(len(strings.Join(want[:10], "\n"))+1) {
		t.Fatalf("positions after a full channel = %+v, want the end of the 10 committed lines", ps)
	}
	got := fx.pl.Drain(t, 10, time.Second)
	fx.start()
	got = append(got, fx.pl.Drain(t, 15, 5*time.Second)...)
	if !slices.Equal(sourcetest.Bodies(got), want) {
		t.Fatalf("got %q, want %q", sourcetest.Bodies(got), want)
	}
}

func TestRestartContinues(t *testing.T) {
	fx := newFixture(t, nil)
	text, want := lines("a", 0, 50)
	fx.append("app.log", text)
	fx.start()
	fx.expect(want...)
	fx.stop()
	text, want = lines("a", 50, 50)
	fx.append("app.log", text)
	fx.start()
	fx.expect(want...)
}

// TestFlumePositionFile takes over a position file as Flume writes it
// (numbers, and the quoted numbers some Flume builds write) and continues
// each file where Flume stopped.
func TestFlumePositionFile(t *testing.T) {
	fx := newFixture(t, nil)
	text, _ := lines("a", 0, 10)
	fx.append("app.log", text)
	fx.append("app.log.1", "old1\nold2\nold3\n")
	cut := strings.Index(text, "a7\n")
	flume := fmt.Sprintf(`[{"inode":%d,"pos":%d,"file":"%s"},{"inode":"%d","pos":"5","file":"%s"},{"inode":1,"pos":99,"file":"/gone"}]`,
		inode(t, fx.path("app.log")), cut, fx.path("app.log"), inode(t, fx.path("app.log.1")), fx.path("app.log.1"))
	if err := os.MkdirAll(filepath.Dir(fx.pos), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fx.pos, []byte(flume), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.start()
	fx.expectUnordered("a7", "a8", "a9", "old2", "old3")
	fx.stop()
	ps := readPositions(t, fx.pos)
	if len(ps) != 2 || ps[0].File != fx.path("app.log") || ps[0].Pos != int64(len(text)) {
		t.Fatalf("positions written = %+v", ps)
	}
}

func TestSkipToEnd(t *testing.T) {
	fx := newFixture(t, map[string]string{"skipToEnd": "true"})
	fx.append("app.log", "old\n")
	fx.start()
	fx.append("app.log", "new\n")
	fx.append("app.log.2", "created after start\n")
	fx.expectUnordered("created after start", "new")
}

// TestRenameKeepsPosition: a file renamed to a name that still matches is
// not read again (Flume's duplicate bug), and one renamed to a name that does
// not match still has its unread tail read.
func TestRenameKeepsPosition(t *testing.T) {
	for _, tc := range []struct{ name, pattern string }{
		{"still matching", `app\.log.*`},
		{"no longer matching", `app\.log`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, map[string]string{"filegroups.g1": "", "idleTimeout": "300"})
			fx.props["filegroups.g1"] = fx.dir + "/" + tc.pattern
			fx.start()
			text, want := lines("a", 0, 20)
			fx.append("app.log", text)
			fx.expect(want...)
			// The writer still has the old file open when it is renamed.
			f, err := os.OpenFile(fx.path("app.log"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := os.Rename(fx.path("app.log"), fx.path("app.log.1")); err != nil {
				t.Fatal(err)
			}
			f.WriteString("late1\nlate2\n")
			fx.append("app.log", "new1\n")
			fx.expectUnordered("late1", "late2", "new1")
			if extra := fx.pl.Take(t, 10, 300*time.Millisecond); len(extra) > 0 {
				t.Fatalf("read again: %q", sourcetest.Bodies(extra))
			}
		})
	}
}

// TestRotatedWhileStopped: a file rotated while the source was stopped,
// or just before it stopped without its seeing it. The lines after the
// saved position are in the rotated file only (renamed, or logrotate's
// copy of a copytruncate): they are read from it at the start, and the
// file under the watched name from its start; a line before the position
// is not read again.
func TestRotatedWhileStopped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rotate func(fx *fixture)
	}{
		{"rename", func(fx *fixture) {
			if err := os.Rename(fx.path("app.log"), fx.path("app.log.1")); err != nil {
				fx.t.Fatal(err)
			}
		}},
		{"copytruncate", func(fx *fixture) {
			data, err := os.ReadFile(fx.path("app.log"))
			if err != nil {
				fx.t.Fatal(err)
			}
			testutil.WriteFile(fx.t, fx.path("app.log.1"), string(data))
			if err := os.Truncate(fx.path("app.log"), 0); err != nil {
				fx.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newAppLogFixture(t)
			fx.start()
			fx.append("app.log", "a\nb\n")
			fx.expect("a", "b")
			fx.stop()
			fx.append("app.log", "c\nd\n")
			tc.rotate(fx)
			fx.append("app.log", "e\n")
			fx.start()
			fx.expectUnordered("c", "d", "e")
		})
	}
}

func TestCopyTruncate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after string // written after the truncation, before the source looks
		want  []string
	}{
		{"shorter", "x\n", []string{"x"}},
		{"rewritten past the position", "a much longer line than before, longer than all\n", []string{"a much longer line than before, longer than all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, map[string]string{"watchFiles": "false", "pollInterval": "100"})
			fx.start()
			fx.append("app.log", "one\ntwo\n")
			fx.expect("one", "two")
			// Truncate and write in one go, between two polls.
			if err := os.Truncate(fx.path("app.log"), 0); err != nil {
				t.Fatal(err)
			}
			fx.append("app.log", tc.after)
			fx.expect(tc.want...)
		})
	}
}

// TestDeletedWhileUnread: a file deleted before its last lines were read is
// read to the end through the open descriptor.
func TestDeletedWhileUnread(t *testing.T) {
	// The file must still be open when it is deleted: an idle file is
	// closed after idleTimeout, and one deleted after that is gone with
	// what was written into it (as with Flume). 200 ms was less than a
	// loaded machine took between reading "one" and deleting the file.
	fx := newFixture(t, map[string]string{"watchFiles": "false", "pollInterval": "100", "idleTimeout": "1500"})
	fx.start()
	fx.append("app.log", "one\n")
	fx.expect("one")
	f, err := os.OpenFile(fx.path("app.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(fx.path("app.log"))
	f.WriteString("two\n")
	f.Close()
	fx.expect("two")
	// Once idle and closed it is dropped from the positions.
	if !testutil.Eventually(func() bool {
		ps, _ := loadPositions(fx.pos)
		return len(ps) == 0
	}, 10*time.Second) {
		t.Fatalf("a deleted file stays in the positions: %+v", readPositions(t, fx.pos))
	}
}

// TestInodeReuse: a file deleted and replaced by one that gets the same
// inode while the source had it closed is read from the start.
func TestInodeReuse(t *testing.T) {
	fx := newFixture(t, map[string]string{"watchFiles": "false", "pollInterval": "300", "idleTimeout": "100"})
	fx.start()
	fx.append("app.log", "first file line\n")
	fx.expect("first file line")
	// Wait for the idle close, then replace the file between two scans.
	if !testutil.Eventually(func() bool { return fileClosed(fx.path("app.log")) }, 5*time.Second) {
		t.Fatal("the idle file was not closed")
	}
	ino := inode(t, fx.path("app.log"))
	fx.reuseInode("app.log", ino, "second file, different bytes!\n")
	fx.expect("second file, different bytes!")
}

// fileClosed reports whether no descriptor of this process refers to path.
func fileClosed(path string) bool {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && (l == path || l == path+" (deleted)") {
			return false
		}
	}
	return true
}

// TestInodeReusedWhileStopped: the file a saved position was for is
// replaced while the source is stopped by one that gets the same inode and
// grows past the position; the fingerprint tells them apart.
func TestInodeReusedWhileStopped(t *testing.T) {
	fx := newFixture(t, nil)
	fx.start()
	fx.append("app.log", "old line\n")
	fx.expect("old line")
	fx.stop()
	ino := inode(t, fx.path("app.log"))
	fx.reuseInode("app.log", ino, "new file with a longer first line\n")
	fx.start()
	fx.expect("new file with a longer first line")
}

// TestSpilledFileKeepsItsSignature: the unread end of a file rotated away
// is kept in a spill file at a stop, and the rotated file's position moves
// to its end, with the bytes before it: when the rotated file is then
// deleted and a new file under the watched name gets its inode (the
// kubelet compresses rotated logs while the agent is down), the new file
// is read from its start, not from the old file's end.
func TestSpilledFileKeepsItsSignature(t *testing.T) {
	fx := newAppLogFixture(t)
	fx.append("app.log", "one\n")
	gate := fx.startGated()
	fx.expect("one")
	if err := os.Rename(fx.path("app.log"), fx.path("app.log.1")); err != nil {
		t.Fatal(err)
	}
	fx.append("app.log.1", "tw") // a line in progress: not read before the stop
	ino := inode(t, fx.path("app.log.1"))
	fx.append("app.log", "") // the writer opens the new file
	if !testutil.Eventually(func() bool { return len(readPositions(t, fx.pos)) == 2 }, 5*time.Second) {
		t.Fatalf("the new file was not found: %+v", readPositions(t, fx.pos))
	}
	gate.closed.Store(true)
	fx.stop()
	var kept *fingerprint
	for p, fp := range loadFingerprints(fx.pos) {
		if p.Inode == ino {
			kept = &fp
		}
	}
	if kept == nil || kept.Pos != int64(len("one\ntw")) || kept.SigLen != len("one\ntw") {
		t.Fatalf("the rotated file's saved position: %+v, want at its end with the bytes before it", kept)
	}

	os.Remove(fx.path("app.log.1"))
	fx.reuseInode("app.log", ino, "a new file, longer than the old one\n")
	fx.start()
	fx.expectUnordered("a new file, longer than the old one", "tw")
}

func TestPollingFallback(t *testing.T) {
	fx := newFixture(t, map[string]string{"watchFiles": "false"})
	fx.start()
	text, want := lines("p", 0, 10)
	fx.append("app.log", text)
	fx.expect(want...)
}

func TestMaxBatchCountAndBatchSize(t *testing.T) {
	fx := newFixture(t, map[string]string{"batchSize": "7", "maxBatchCount": "1"})
	a, wantA := lines("a", 0, 30)
	b, wantB := lines("b", 0, 30)
	fx.append("app.log.1", a)
	fx.append("app.log.2", b)
	fx.start()
	got := fx.pl.Drain(t, 60, 5*time.Second)
	var ga, gb []string
	for _, body := range sourcetest.Bodies(got) {
		if body[0] == 'a' {
			ga = append(ga, body)
		} else {
			gb = append(gb, body)
		}
	}
	if !slices.Equal(ga, wantA) || !slices.Equal(gb, wantB) {
		t.Fatalf("got %q and %q", ga, gb)
	}
	// With maxBatchCount 1 the files take turns: the first 14 events are
	// two batches, one from each.
	first := sourcetest.Bodies(got[:14])
	na := 0
	for _, b := range first {
		if b[0] == 'a' {
			na++
		}
	}
	if na != 7 {
		t.Errorf("first two batches = %q, want one batch from each file", first)
	}
	// The counter moves just after the commit the drain saw.
	if !testutil.Eventually(func() bool { return fx.src.counters.AppendBatchAccepted.Load() == 10 }, time.Second) {
		t.Errorf("AppendBatchAcceptedCount = %d, want 10 (30 lines in batches of 7, twice)", fx.src.counters.AppendBatchAccepted.Load())
	}
}

// With batchSize left at its default a batch grows to the channel's
// transactionCapacity (1000 here) while the file holds more lines
// (flow.Batching): 3000 lines are 3 commits, not 30.
func TestDefaultBatchGrowsToTransactionCapacity(t *testing.T) {
	fx := newFixture(t, nil)
	delete(fx.props, "batchSize")
	text, want := lines("a", 0, 3000)
	fx.append("app.log", text)
	fx.start()
	fx.expect(want...)
	if !testutil.Eventually(func() bool { return fx.src.counters.AppendBatchAccepted.Load() == 3 }, time.Second) {
		t.Errorf("AppendBatchAcceptedCount = %d, want 3 (3000 lines in batches of 1000)", fx.src.counters.AppendBatchAccepted.Load())
	}
}

func TestPositionFileIsWrittenAtomically(t *testing.T) {
	fx := newFixture(t, nil)
	fx.append("app.log", "x\n")
	fx.start()
	fx.expect("x")
	fx.stop()
	ents, _ := os.ReadDir(filepath.Dir(fx.pos))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"pos.json", "pos.json.sluice"}; !slices.Equal(names, want) {
		t.Fatalf("position directory holds %q, want %q (no temporary files left)", names, want)
	}
	ps := readPositions(t, fx.pos)
	if len(ps) != 1 || ps[0].Inode != inode(t, fx.path("app.log")) || ps[0].Pos != 2 || ps[0].File != fx.path("app.log") {
		t.Fatalf("positions = %+v", ps)
	}
	raw, _ := os.ReadFile(fx.pos)
	if want := fmt.Sprintf(`[{"inode":%d,"pos":2,"file":%q}]`, ps[0].Inode, fx.path("app.log")); string(raw) != want {
		t.Fatalf("position file = %s, want Flume's format %s", raw, want)
	}
}

func TestSplitLines(t *testing.T) {
	// f checks the events splitLines cuts from data (max events, pieces of
	// at most limit bytes), written "body" for a whole line and
	// "body#n" or "body#n!" for piece n (! on the last piece).
	f := func(data string, max, limit, piece int, partial bool, want []string, wantConsumed, wantPiece int) {
		t.Helper()
		chunks, consumed, gotPiece := splitLines([]byte(data), max, limit, piece, partial)
		var got []string
		for _, c := range chunks {
			s := data[c.lo:c.hi]
			if c.hi-c.lo > limit {
				t.Errorf("splitLines(%q, limit %d): piece %q longer than the limit", data, limit, s)
			}
			if c.piece > 0 {
				s += fmt.Sprintf("#%d", c.piece)
				if c.last {
					s += "!"
				}
			} else if c.last {
				t.Errorf("a whole line marked last")
			}
			got = append(got, s)
		}
		if !slices.Equal(got, want) || consumed != wantConsumed || gotPiece != wantPiece {
			t.Errorf("splitLines(%q, %d, %d, %d, %v) = %q, %d, %d; want %q, %d, %d",
				data, max, limit, piece, partial, got, consumed, gotPiece, want, wantConsumed, wantPiece)
		}
	}
	const big = 1 << 20
	f("", 10, big, 0, false, nil, 0, 0)
	f("a\nb\n", 10, big, 0, false, []string{"a", "b"}, 4, 0)
	f("a\r\nb\rc\n", 10, big, 0, false, []string{"a", "b\rc"}, 7, 0)
	f("a\nb\nc\n", 2, big, 0, false, []string{"a", "b"}, 4, 0)
	f("a\npart", 10, big, 0, false, []string{"a"}, 2, 0)
	f("a\npart", 10, big, 0, true, []string{"a", "part"}, 6, 0)
	f("\n\n", 10, big, 0, false, []string{"", ""}, 2, 0)
	f("\r\n", 10, big, 0, false, []string{""}, 2, 0)

	// Lines longer than the limit: pieces of exactly the limit, the last
	// holding the rest; a line of exactly the limit is whole.
	f("abcdefghij\nxy\n", 10, 4, 0, false, []string{"abcd#1", "efgh#2", "ij#3!", "xy"}, 14, 0)
	f("abcd\nabcd\r\nabcde\r\n", 10, 4, 0, false, []string{"abcd", "abcd", "abcd#1", "e#2!"}, 18, 0)
	// At most max events: the line's state carries over.
	f("abcdefghij\n", 2, 4, 0, false, []string{"abcd#1", "efgh#2"}, 8, 2)
	f("ij\nx\n", 10, 4, 2, false, []string{"ij#3!", "x"}, 5, 0)
	// No newline yet: cut only what is surely longer than the limit.
	f("abcdefghij", 10, 4, 0, false, []string{"abcd#1", "efgh#2"}, 8, 2)
	f("abcde", 10, 4, 0, false, []string{"abcd#1"}, 4, 1) // 5 bytes at least
	f("abcd\r", 10, 4, 0, false, nil, 0, 0)               // may be "abcd" + "\r\n"
	f("abcde\r", 10, 4, 0, false, []string{"abcd#1"}, 4, 1)
	f("abcdefghij", 10, 4, 0, true, []string{"abcd#1", "efgh#2", "ij#3!"}, 10, 0)
	// A cut never splits a UTF-8 character.
	f("ab日本\n", 10, 4, 0, false, []string{"ab#1", "日#2", "本#3!"}, 9, 0)
	f("\xff\xfe\xfd\xfc\xfb\n", 10, 4, 0, false, []string{"\xff\xfe\xfd\xfc#1", "\xfb#2!"}, 6, 0)
}

// TestLongLineDefaultLimit is issue 13's row "taildir: a 50 MB line" (at 20
// MiB, same mechanism): with the default maxLineLength of 8 MiB the line
// arrives in pieces of at most 8 MiB (the first had been up to about twice
// that), marked by linePiece and linePieceLast, counted in SplitLineCount;
// the lines around it are untouched.
func TestLongLineDefaultLimit(t *testing.T) {
	fx := newFixture(t, nil)
	const mib = 1 << 20
	long := strings.Repeat("0123456789abcdef", 20*mib/16)
	fx.append("app.log", "before\n"+long+"\nafter\n")
	fx.start()
	got := fx.pl.Drain(t, 5, 30*time.Second)
	if len(got) != 5 {
		var sizes []int
		for _, e := range got {
			sizes = append(sizes, len(e.Body))
		}
		t.Fatalf("got %d events of %v bytes, want 5: before, 8, 8 and 4 MiB, after", len(got), sizes)
	}
	if string(got[0].Body) != "before" || string(got[4].Body) != "after" || got[0].Headers != nil || got[4].Headers != nil {
		t.Fatalf("the lines around the long one: %q %v, %q %v", got[0].Body, got[0].Headers, got[4].Body, got[4].Headers)
	}
	var joined []byte
	for i, e := range got[1:4] {
		if len(e.Body) > 8*mib {
			t.Errorf("piece %d is %d bytes, more than the 8 MiB limit", i+1, len(e.Body))
		}
		if want := []int{8 * mib, 8 * mib, 4 * mib}[i]; len(e.Body) != want {
			t.Errorf("piece %d is %d bytes, want %d", i+1, len(e.Body), want)
		}
		wantHeaders := map[string]string{"linePiece": fmt.Sprint(i + 1), "linePieceLast": fmt.Sprint(i == 2)}
		if !event.HeadersOf(wantHeaders).Equal(e.Headers) {
			t.Errorf("piece %d headers %v, want %v", i+1, e.Headers, wantHeaders)
		}
		joined = append(joined, e.Body...)
	}
	if string(joined) != long {
		t.Error("the pieces do not add up to the line")
	}
	testutil.Eventually(func() bool { return fx.src.splitLines.Load() == 1 }, 2*time.Second)
	if n := fx.src.splitLines.Load(); n != 1 {
		t.Errorf("SplitLineCount = %d, want 1", n)
	}
}

// TestLongLinePieces: with a small maxLineLength every long line is split,
// each piece's byteoffset is its own, the counter counts the lines split
// (shown in the source's metrics), and the log says so once for many.
func TestLongLinePieces(t *testing.T) {
	fx := newFixture(t, map[string]string{"maxLineLength": "1000", "byteOffsetHeader": "true"})
	l1 := strings.Repeat("a", 3500)
	l2 := strings.Repeat("b", 1001)
	l3 := strings.Repeat("c", 1000)
	text := "short\n" + l1 + "\n" + l2 + "\r\n" + l3 + "\r\n"
	for range 4 {
		text += strings.Repeat("d", 1500) + "\n"
	}
	fx.append("app.log", text)
	fx.start()
	got := fx.pl.Drain(t, 16, 5*time.Second)
	type piece struct {
		size      int
		off       int
		num, last string
	}
	want := []piece{
		{5, 0, "", ""},
		{1000, 6, "1", "false"}, {1000, 1006, "2", "false"}, {1000, 2006, "3", "false"}, {500, 3006, "4", "true"},
		{1000, 3507, "1", "false"}, {1, 4507, "2", "true"},
		{1000, 4510, "", ""},
	}
	off := 5512
	for range 4 {
		want = append(want, piece{1000, off, "1", "false"}, piece{500, off + 1000, "2", "true"})
		off += 1501
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i, e := range got {
		g := piece{len(e.Body), 0, e.Headers.Value("linePiece"), e.Headers.Value("linePieceLast")}
		g.off, _ = strconv.Atoi(e.Headers.Value("byteoffset"))
		if g != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, g, want[i])
		}
	}
	// Counted once the batch is committed, which may be just after the
	// events can be taken.
	testutil.Eventually(func() bool { return fx.src.splitLines.Load() == 6 }, 2*time.Second)
	if n := fx.src.splitLines.Load(); n != 6 {
		t.Errorf("SplitLineCount = %d, want 6", n)
	}
	if shown := testutil.Metric(fx.src.counters.Set, "SplitLineCount"); shown != "6" {
		t.Errorf("metrics show SplitLineCount %q, want 6", testutil.Metric(fx.src.counters.Set, "SplitLineCount"))
	}
	if n := strings.Count(fx.logs.String(), "longer than maxLineLength"); n != 1 {
		t.Errorf("%d log lines about split lines, want 1 (throttled): %s", n, fx.logs.String())
	}
}

// TestLongLineAcrossRestart: a split line whose end is written after a
// restart goes on with the next piece number; its first pieces are not sent
// again.
func TestLongLineAcrossRestart(t *testing.T) {
	fx := newFixture(t, map[string]string{"maxLineLength": "100"})
	fx.append("app.log", strings.Repeat("a", 350))
	fx.start()
	got := fx.pl.Drain(t, 3, 5*time.Second)
	for i, e := range got {
		if len(e.Body) != 100 || e.Headers.Value("linePiece") != fmt.Sprint(i+1) || e.Headers.Value("linePieceLast") != "false" {
			t.Fatalf("piece %d: %d bytes, headers %v", i+1, len(e.Body), e.Headers)
		}
	}
	fx.stop()
	fx.append("app.log", "\nnext\n")
	fx.start()
	got = fx.expect(strings.Repeat("a", 50), "next")
	if h := got[0].Headers; h.Value("linePiece") != "4" || h.Value("linePieceLast") != "true" {
		t.Fatalf("the last piece after the restart has headers %v, want piece 4, last", h)
	}
}

func TestBadProperties(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{}, "filegroups: missing required property"},
		{map[string]string{"filegroups": "g1"}, "filegroups.g1: missing required property"},
		{map[string]string{"filegroups": "g1", "filegroups.g1": "relative/x.log"}, "not an absolute path"},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/"}, "no file name pattern"},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/a(.log"}, "not a valid regular expression"},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/a", "headers.g2.k": "v"}, `file group "g2" is not listed`},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/a", "batchSize": "0"}, "batchSize: 0 is out of range"},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/a", "idleTimeout": "0"}, "idleTimeout: 0 is too small"},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/a", "maxBatchCount": "0"}, "maxBatchCount: must be at least 1"},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/a", "skipToEnd": "yes"}, `"yes" is not a boolean`},
		{map[string]string{"filegroups": "g1", "filegroups.g1": dir + "/a", "maxLineLength": "0"}, "maxLineLength: 0 is out of range"},
	} {
		p := config.FromMap("a1.sources.r1.", tc.props)
		if _, err := New(sourcetest.Env("r1", "taildir"), p); err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.props, err, tc.want)
		}
	}
}

func TestMissingDirectoryFailsStart(t *testing.T) {
	p := config.FromMap("a1.sources.r1.", map[string]string{
		"filegroups": "g1", "filegroups.g1": filepath.Join(t.TempDir(), "nope") + "/x", "positionFile": filepath.Join(t.TempDir(), "p.json"),
	})
	s, _ := New(sourcetest.Env("r1", "taildir"), p)
	pl := sourcetest.NewPipeline(t, 10, 10, time.Second)
	if err := s.Start(context.Background(), pl.Processor); err == nil || !strings.Contains(err.Error(), "nope") {
		s.Stop(context.Background())
		t.Fatalf("Start = %v, want an error naming the missing directory", err)
	}
}

func TestParsePositions(t *testing.T) {
	f := func(in string, want []position, wantErr string) {
		t.Helper()
		got, err := parsePositions([]byte(in))
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("parsePositions(%q) error = %v, want %q", in, err, wantErr)
			}
			return
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parsePositions(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	f("", nil, "")
	f("  \n", nil, "")
	f("[]", []position{}, "")
	f(`[{"inode":12,"pos":34,"file":"/a"}]`, []position{{12, 34, "/a"}}, "")
	f(`[{"file":"/a","pos":"34","inode":"12"}]`, []position{{12, 34, "/a"}}, "")
	f(`[{"inode":12,"pos":34,"file":"/a","extra":true}]`, []position{{12, 34, "/a"}}, "")
	f(`[{"inode":12,"pos":34}]`, nil, "file is missing")
	f(`[{"inode":-1,"pos":34,"file":"/a"}]`, nil, "not a non-negative whole number")
	f(`[{"inode":1,"pos":1.5,"file":"/a"}]`, nil, "not a non-negative whole number")
	f(`[{"inode":1,"pos":34,"file":"/a"}`, nil, "not a JSON array")
	f(`{"inode":1}`, nil, "not a JSON array")
}

func FuzzParsePositions(f *testing.F) {
	f.Add([]byte(`[{"inode":12,"pos":34,"file":"/a"}]`))
	f.Add([]byte(`[{"inode":"12","pos":"34","file":"/a"},{"inode":1,"pos":0,"file":"/b"}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"inode":1e3,"pos":-0,"file":""}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := parsePositions(data)
		if err != nil {
			return
		}
		// What parses survives a write and a read unchanged.
		again, err := parsePositions(encodePositions(ps))
		if err != nil || len(again) != len(ps) {
			t.Fatalf("round trip of %+v: %+v, %v", ps, again, err)
		}
		for i := range ps {
			if ps[i] != again[i] || ps[i].Pos < 0 {
				t.Fatalf("round trip of %+v: %+v", ps[i], again[i])
			}
		}
	})
}

var _ flow.Source = (*Source)(nil)

// FuzzSplitLines checks splitLines on any bytes: no event is longer than
// the limit, the events and the line ends between them make up exactly the
// bytes consumed, and the pieces of a line are numbered 1, 2, ... with only
// the last marked so.
func FuzzSplitLines(f *testing.F) {
	f.Add([]byte("a\nbc\r\n"), 4, 10, 0, false)
	f.Add([]byte("abcdefghij\r\nxy"), 3, 2, 1, true)
	f.Add([]byte("日本語のテキスト\n\xff\xfe\xfd\xfc"), 4, 100, 0, true)
	f.Add([]byte("\r\r\r\r\n\n"), 1, 3, 0, false)
	f.Fuzz(func(t *testing.T, data []byte, limit, max, piece int, partial bool) {
		if limit < 1 || limit > 64 || max < 1 || max > 1000 || piece < 0 || piece > 5 {
			return
		}
		chunks, consumed, next := splitLines(data, max, limit, piece, partial)
		if len(chunks) > max || consumed < 0 || consumed > len(data) || next < 0 {
			t.Fatalf("%d chunks (max %d), consumed %d of %d, next piece %d", len(chunks), max, consumed, len(data), next)
		}
		pos, p := 0, piece
		for i, c := range chunks {
			if c.lo != pos || c.hi < c.lo || c.hi-c.lo > limit {
				t.Fatalf("chunk %d = [%d,%d) at %d, limit %d", i, c.lo, c.hi, pos, limit)
			}
			pos = c.hi
			if c.piece > 0 && c.piece != p+1 || c.piece == 0 && p != 0 {
				t.Fatalf("chunk %d is piece %d after piece %d", i, c.piece, p)
			}
			if c.piece > 0 && !c.last {
				p = c.piece
				if c.hi-c.lo == 0 {
					t.Fatalf("empty piece %d", c.piece)
				}
				continue // a cut: the next piece starts right here
			}
			p = 0
			// A line's end follows: "\n", "\r\n", or nothing at a partial end.
			switch {
			case pos < len(data) && data[pos] == '\n':
				pos++
			case pos+1 < len(data) && data[pos] == '\r' && data[pos+1] == '\n':
				pos += 2
			case pos == len(data) && partial:
			default:
				t.Fatalf("chunk %d [%d,%d) is not followed by a line end", i, c.lo, c.hi)
			}
		}
		if pos != consumed || p != next {
			t.Fatalf("chunks end at %d with piece %d; splitLines says %d and %d", pos, p, consumed, next)
		}
	})
}

// stoppingProcessor refuses every put as a closed intake gate does.
type stoppingProcessor struct{ calls atomic.Int64 }

func (p *stoppingProcessor) Process(context.Context, []event.Event) error {
	p.calls.Add(1)
	return fmt.Errorf("source r1: %w", flow.ErrStopping)
}

// TestIntakeClosed: once the agent closes the source's intake (a stop or a
// reload), the source puts nothing more, does not log the refusal as a
// failed put, keeps its position, and stops at once when asked.
func TestIntakeClosed(t *testing.T) {
	fx := newFixture(t, nil)
	fx.append("app.log", "x\ny\n")
	proc := &stoppingProcessor{}
	p := config.FromMap("a1.sources.r1.", fx.props)
	env := sourcetest.Env("r1", "taildir")
	env.Logger = slog.New(slog.NewTextHandler(fx.logs, nil))
	s, err := New(env, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background(), proc); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(func() bool { return proc.calls.Load() > 0 }, 5*time.Second) {
		t.Fatal("no put was tried")
	}
	time.Sleep(1200 * time.Millisecond) // longer than the first retry would wait
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := proc.calls.Load(); n != 1 {
		t.Errorf("%d puts tried after the intake closed, want 1", n)
	}
	if strings.Contains(fx.logs.String(), "could not put") {
		t.Errorf("the closed intake was logged as a failed put: %s", fx.logs.String())
	}
	if ps := readPositions(t, fx.pos); len(ps) != 1 || ps[0].Pos != 0 {
		t.Errorf("positions %+v, want the file at 0", ps)
	}
}

// gatedProcessor passes puts to a pipeline until closed, then refuses them
// as the agent's closed intake does.
type gatedProcessor struct {
	inner   flow.Processor
	closed  atomic.Bool
	refused atomic.Int64
}

func (p *gatedProcessor) Process(ctx context.Context, events []event.Event) error {
	if p.closed.Load() {
		p.refused.Add(1)
		return fmt.Errorf("source r1: %w", flow.ErrStopping)
	}
	return p.inner.Process(ctx, events)
}

// startGated starts the source behind a gate the test can close, as the
// agent closes a source's intake before it stops it.
func (fx *fixture) startGated() *gatedProcessor {
	gate := &gatedProcessor{inner: fx.pl.Processor}
	fx.startWith(gate)
	return gate
}

func (fx *fixture) startWith(proc flow.Processor) {
	fx.t.Helper()
	p := config.FromMap("a1.sources.r1.", fx.props)
	env := sourcetest.Env("r1", "taildir")
	env.Logger = slog.New(slog.NewTextHandler(fx.logs, nil))
	s, err := New(env, p)
	if err != nil {
		fx.t.Fatal(err)
	}
	fx.src = s.(*Source)
	if err := fx.src.Start(context.Background(), proc); err != nil {
		fx.t.Fatal(err)
	}
	fx.t.Cleanup(fx.stop)
}

// TestRotatedTailKeptAcrossStop: the agent closes a source's intake before
// it stops it, so the unread lines of a file rotated away cannot be sent at
// the stop; they are kept in a spill file beside the position file, sent
// at the next start even though the rotated file was deleted (compressed)
// in between, exactly once, and the spill file is then deleted.
func TestRotatedTailKeptAcrossStop(t *testing.T) {
	fx := newFixture(t, nil)
	fx.append("app.log", "a\n")
	gate := fx.startGated()
	fx.expect("a")

	gate.closed.Store(true) // the agent closes the intake
	rotated := filepath.Join(fx.dir, "rotated.old")
	if err := os.Rename(fx.path("app.log"), rotated); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(rotated, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("b\nc\n")
	f.Close()
	fx.append("app.log", "d\n")
	if !testutil.Eventually(func() bool { return gate.refused.Load() > 0 }, 5*time.Second) {
		t.Fatal("no put was refused")
	}
	fx.stop()
	spills, _ := filepath.Glob(fx.pos + ".spill-*")
	if len(spills) != 1 {
		t.Fatalf("spill files %v, want one", spills)
	}
	if err := os.Remove(rotated); err != nil { // compressed by logrotate while down
		t.Fatal(err)
	}

	fx.start()
	got := sourcetest.Bodies(fx.pl.Drain(t, 3, 5*time.Second))
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("after the restart got %q, want b, c (kept from the rotated file) and d", got)
	}
	if extra := fx.pl.Take(t, 10, 200*time.Millisecond); len(extra) > 0 {
		t.Fatalf("sent again: %q", sourcetest.Bodies(extra))
	}
	if !testutil.Eventually(func() bool {
		m, _ := filepath.Glob(fx.pos + ".spill-*")
		return len(m) == 0
	}, 5*time.Second) {
		t.Fatal("the spill file was not deleted once sent")
	}
	fx.stop()
	fx.start()
	fx.expect() // nothing again after another restart
}

// TestFileFoundAtStop: a file that came while the source could not look
// (the intake closed, a stop pending) is found at the stop and its inode
// kept, so that renamed away while the agent is down (a rotation) it is
// still read after the restart.
func TestFileFoundAtStop(t *testing.T) {
	fx := newAppLogFixture(t)
	fx.append("app.log", "a\n")
	gate := fx.startGated()
	fx.expect("a")
	gate.closed.Store(true)
	fx.append("app.log", "b\n")
	if !testutil.Eventually(func() bool { return gate.refused.Load() > 0 }, 5*time.Second) {
		t.Fatal("no put was refused")
	}
	// Rotated while the source waits for its stop: a new app.log the
	// source has not looked at, then renamed away while it is down.
	if err := os.Rename(fx.path("app.log"), fx.path("app.log.1")); err != nil {
		t.Fatal(err)
	}
	fx.append("app.log", "c\n")
	fx.stop()
	if err := os.Rename(fx.path("app.log"), fx.path("app.log.2")); err != nil {
		t.Fatal(err)
	}
	fx.append("app.log", "d\n")
	fx.start()
	got := sourcetest.Bodies(fx.pl.Drain(t, 3, 5*time.Second))
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("got %q, want b (kept at the stop), c (the file found at the stop) and d", got)
	}
	fx.expect()
}

// TestReadRoom: a read is sized by what the file holds past the offset
// (one byte more, to see its end), asking the size again once the last
// one known is behind.
func TestReadRoom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	if err := os.WriteFile(path, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tf := &tailFile{f: f, size: 100}
	var tl tailer
	if got := tl.readRoom(tf, 40); got != 61 {
		t.Errorf("60 bytes past the offset: room %d, want 61", got)
	}
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 50))
	w.Close()
	if got := tl.readRoom(tf, 40); got != 61 {
		t.Errorf("the size known is ahead of the offset, so not asked again: room %d, want 61", got)
	}
	if got := tl.readRoom(tf, 100); got != 51 || tf.size != 150 {
		t.Errorf("at the size known: room %d, size %d, want 51 and 150 (asked again)", got, tf.size)
	}
	if got := tl.readRoom(tf, 150); got != 1 {
		t.Errorf("at the end: room %d, want 1", got)
	}
	tf.size = 1 << 40
	if got := tl.readRoom(tf, 0); got != maxRead+1 {
		t.Errorf("a huge file: room %d, want maxRead+1", got)
	}
}
