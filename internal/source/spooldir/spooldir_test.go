package spooldirsource

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

type fixture struct {
	t     *testing.T
	dir   string
	props map[string]string
	pl    *sourcetest.Pipeline
	src   *Source
	logs  *testutil.LogBuffer
}

func newFixture(t *testing.T, extra map[string]string) *fixture {
	t.Helper()
	t.Parallel()
	fx := &fixture{t: t, dir: t.TempDir(), logs: &testutil.LogBuffer{}}
	fx.props = map[string]string{"spoolDir": fx.dir, "pollDelay": "20"}
	for k, v := range extra {
		fx.props[k] = v
	}
	fx.pl = sourcetest.NewPipeline(t, 100000, 1000, 100*time.Millisecond)
	return fx
}

func (fx *fixture) start() {
	fx.t.Helper()
	p := config.FromMap("a1.sources.r1.", fx.props)
	env := sourcetest.Env("r1", "spooldir")
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

func (fx *fixture) write(name, text string, mtime time.Time) string {
	fx.t.Helper()
	// Written aside and moved in, as files must arrive complete.
	tmp := filepath.Join(fx.t.TempDir(), name)
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		fx.t.Fatal(err)
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			fx.t.Fatal(err)
		}
	}
	path := filepath.Join(fx.dir, name)
	if err := os.Rename(tmp, path); err != nil {
		fx.t.Fatal(err)
	}
	return path
}

func (fx *fixture) expect(want ...string) {
	fx.t.Helper()
	got := fx.pl.Drain(fx.t, len(want), 5*time.Second)
	if !slices.Equal(sourcetest.Bodies(got), want) {
		fx.t.Fatalf("got %q, want %q", sourcetest.Bodies(got), want)
	}
	if extra := fx.pl.Take(fx.t, 10, 100*time.Millisecond); len(extra) > 0 {
		fx.t.Fatalf("unexpected extra events %q", sourcetest.Bodies(extra))
	}
}

// With batchSize left at its default a batch grows to the channel's
// transactionCapacity (1000 here; flow.Batching): 3000 lines are 3 commits
// and 3 saves of the progress, not 30.
func TestDefaultBatchGrowsToTransactionCapacity(t *testing.T) {
	fx := newFixture(t, nil)
	text, want := lines("a", 3000)
	fx.write("f1", text, time.Time{})
	fx.start()
	fx.expect(want...)
	if !testutil.Eventually(func() bool { return fx.src.counters.AppendBatchAccepted.Load() == 3 }, time.Second) {
		t.Errorf("AppendBatchAcceptedCount = %d, want 3 (3000 lines in batches of 1000)", fx.src.counters.AppendBatchAccepted.Load())
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func lines(prefix string, n int) (string, []string) {
	var b strings.Builder
	var want []string
	for i := 0; i < n; i++ {
		l := fmt.Sprintf("%s%d", prefix, i)
		b.WriteString(l + "\n")
		want = append(want, l)
	}
	return b.String(), want
}

func TestLinesHeadersAndRename(t *testing.T) {
	fx := newFixture(t, map[string]string{"fileHeader": "true", "basenameHeader": "true", "basenameHeaderKey": "base"})
	path := fx.write("a.log", "one\ntwo\r\nlast without newline", time.Time{})
	fx.start()
	got := fx.pl.Drain(t, 3, 5*time.Second)
	if want := []string{"one", "two\r", "last without newline"}; !slices.Equal(sourcetest.Bodies(got), want) {
		t.Fatalf("got %q, want %q", sourcetest.Bodies(got), want)
	}
	for _, e := range got {
		if e.Headers.Value("file") != path || e.Headers.Value("base") != "a.log" {
			t.Errorf("headers = %v", e.Headers)
		}
	}
	if !testutil.Eventually(func() bool { return exists(path + ".COMPLETED") }, 5*time.Second) || exists(path) {
		t.Fatal("the file was not renamed with .COMPLETED")
	}
}

func TestDeleteAndTrackerDir(t *testing.T) {
	t.Run("deletePolicy immediate", func(t *testing.T) {
		fx := newFixture(t, map[string]string{"deletePolicy": "immediate"})
		path := fx.write("a.log", "x\n", time.Time{})
		fx.start()
		fx.expect("x")
		if !testutil.Eventually(func() bool { return !exists(path) }, 5*time.Second) || exists(path+".COMPLETED") {
			t.Fatal("the file was not deleted")
		}
	})
	t.Run("trackingPolicy tracker_dir", func(t *testing.T) {
		tracker := filepath.Join(t.TempDir(), "tracker")
		fx := newFixture(t, map[string]string{"trackingPolicy": "tracker_dir", "trackerDir": tracker})
		path := fx.write("a.log", "x\n", time.Time{})
		fx.start()
		fx.expect("x")
		if !testutil.Eventually(func() bool { return exists(filepath.Join(tracker, "a.log.COMPLETED")) }, 5*time.Second) || !exists(path) {
			t.Fatal("no marker in the tracker directory, or the file was moved")
		}
		// The marker keeps the file from being read again after a restart.
		fx.stop()
		fx.start()
		fx.expect()
	})
}

func TestWhichFiles(t *testing.T) {
	fx := newFixture(t, map[string]string{"includePattern": `.*\.log`, "ignorePattern": `skip.*`})
	fx.write("a.log", "a\n", time.Time{})
	fx.write("skip.log", "ignored\n", time.Time{})
	fx.write("b.txt", "not included\n", time.Time{})
	fx.write(".hidden.log", "hidden\n", time.Time{})
	fx.write("c.log.COMPLETED", "done before\n", time.Time{})
	fx.start()
	fx.expect("a")
}

func TestConsumeOrder(t *testing.T) {
	base := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		order string
		want  []string
	}{
		{"oldest", []string{"old", "mid", "new"}},
		{"youngest", []string{"new", "mid", "old"}},
	} {
		t.Run(tc.order, func(t *testing.T) {
			fx := newFixture(t, map[string]string{"consumeOrder": tc.order})
			fx.write("b", "mid\n", base.Add(time.Minute))
			fx.write("c", "old\n", base)
			fx.write("a", "new\n", base.Add(2*time.Minute))
			fx.start()
			fx.expect(tc.want...)
		})
	}
	t.Run("random", func(t *testing.T) {
		fx := newFixture(t, map[string]string{"consumeOrder": "random"})
		fx.write("a", "1\n", time.Time{})
		fx.write("b", "2\n", time.Time{})
		fx.start()
		got := sourcetest.Bodies(fx.pl.Drain(t, 2, 5*time.Second))
		slices.Sort(got)
		if !slices.Equal(got, []string{"1", "2"}) {
			t.Fatalf("got %q", got)
		}
	})
}

func TestMaxLineLength(t *testing.T) {
	fx := newFixture(t, map[string]string{"deserializer.maxLineLength": "4"})
	fx.write("a", "abcdefghij\nabcd\nxy\n日本語のテキ\n", time.Time{})
	fx.start()
	// Longer lines are cut into pieces of 4 characters, as Flume's
	// LineDeserializer does; a cut right before the newline ends the line.
	fx.expect("abcd", "efgh", "ij", "abcd", "xy", "日本語の", "テキ")
}

// Flume's BlobDeserializer: a file is one event, its bytes as they are (not
// decoded, newlines kept); a file longer than maxBlobLength comes in
// pieces of that many bytes, as Flume reads it; an empty file gives none.
func TestBlobDeserializer(t *testing.T) {
	fx := newFixture(t, map[string]string{"deserializer": blobDeserializer, "deserializer.maxBlobLength": "10",
		"fileHeader": "true", "consumeOrder": "oldest"})
	t0 := time.Now().Add(-time.Hour)
	fx.write("a", "one\ntwo\n\xff\x00", t0)
	fx.write("b", "0123456789abcdefghij0123", t0.Add(time.Second))
	fx.write("c", "", t0.Add(2*time.Second))
	fx.write("d", "0123456789", t0.Add(3*time.Second))
	fx.start()
	fx.expect("one\ntwo\n\xff\x00", "0123456789", "abcdefghij", "0123", "0123456789")
	if !testutil.Eventually(func() bool { return exists(filepath.Join(fx.dir, "c.COMPLETED")) }, 5*time.Second) {
		t.Fatal("the empty file was not marked done")
	}
}

func TestDecodeErrorPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{"REPLACE", []string{"ok", "a\uFFFDb"}},
		{"IGNORE", []string{"ok", "ab"}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			fx := newFixture(t, map[string]string{"decodeErrorPolicy": tc.policy})
			fx.write("a", "ok\na\xffb\n", time.Time{})
			fx.start()
			fx.expect(tc.want...)
		})
	}
	t.Run("FAIL", func(t *testing.T) {
		fx := newFixture(t, nil)
		path := fx.write("a", "ok\na\xffb\n", time.Time{})
		fx.start()
		fx.expect("ok")
		if !testutil.Eventually(func() bool { return strings.Contains(fx.logs.String(), "not UTF-8") }, 5*time.Second) {
			t.Fatalf("no error logged: %s", fx.logs.String())
		}
		if !exists(path) || exists(path+".COMPLETED") {
			t.Fatal("a file that failed was marked done")
		}
	})
}

// TestDoneOnlyAfterCommit: with a channel too small for the file, the file
// is not marked done before its last line was committed.
func TestDoneOnlyAfterCommit(t *testing.T) {
	fx := newFixture(t, map[string]string{"batchSize": "10"})
	fx.pl = sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
	text, want := lines("l", 25)
	path := fx.write("a", text, time.Time{})
	fx.start()
	var got []string
	for len(got) < 25 {
		if !exists(path) {
			t.Fatalf("the file was marked done with %d of 25 lines taken", len(got))
		}
		got = append(got, sourcetest.Bodies(fx.pl.Take(t, 10, 5*time.Second))...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !testutil.Eventually(func() bool { return exists(path + ".COMPLETED") }, 5*time.Second) {
		t.Fatal("not marked done after every line was committed")
	}
}

// TestRestartResumes: a source stopped in the middle of a file continues
// after its last committed line: no line lost, none repeated.
func TestRestartResumes(t *testing.T) {
	fx := newFixture(t, map[string]string{"batchSize": "10"})
	fx.pl = sourcetest.NewPipeline(t, 20, 10, 20*time.Millisecond)
	text, want := lines("l", 95)
	fx.write("a", text, time.Time{})
	fx.start()
	got := sourcetest.Bodies(fx.pl.Drain(t, 30, 5*time.Second))
	fx.stop()
	got = append(got, sourcetest.Bodies(fx.pl.Drain(t, 20, time.Second))...) // what the channel still held
	fx.start()
	got = append(got, sourcetest.Bodies(fx.pl.Drain(t, 95-len(got), 5*time.Second))...)
	if !slices.Equal(got, want) {
		t.Fatalf("got %d lines %q, want %d", len(got), got, len(want))
	}
	if extra := fx.pl.Take(t, 10, 200*time.Millisecond); len(extra) > 0 {
		t.Fatalf("repeated lines %q", sourcetest.Bodies(extra))
	}
}

// TestChangedWhileRead: a file that grows while it is read is reported
// once, at WARN, naming it; what was committed stays committed, the file is
// left in place and skipped while other files are read; a restarted source
// continues it after its last committed line, so the appended line comes
// once and nothing twice, and then the file is done.
func TestChangedWhileRead(t *testing.T) {
	fx := newFixture(t, map[string]string{"batchSize": "10"})
	fx.pl = sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
	text, want := lines("l", 30)
	path := fx.write("growing.log", text, time.Now().Add(-time.Minute))
	fx.start()
	got := sourcetest.Bodies(fx.pl.Take(t, 10, 5*time.Second)) // the source is now blocked in the file
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("appended\n")
	f.Close()
	other := fx.write("other.log", "other\n", time.Time{})
	got = append(got, sourcetest.Bodies(fx.pl.Drain(t, 21, 5*time.Second))...)
	if !slices.Equal(got, append(want, "other")) {
		t.Fatalf("got %q, want the file's first 30 lines, then the other file", got)
	}
	if !testutil.Eventually(func() bool { return exists(other + ".COMPLETED") }, 5*time.Second) {
		t.Fatal("the other file was not read while the changed one is left")
	}
	var reports []string
	for _, l := range strings.Split(fx.logs.String(), "\n") {
		if strings.Contains(l, "growing.log") {
			reports = append(reports, l)
		}
	}
	if len(reports) != 1 || !strings.Contains(reports[0], "level=WARN") || !strings.Contains(reports[0], "changed while it was read") ||
		!strings.Contains(reports[0], "delivered_lines=30") {
		t.Fatalf("want one WARN naming the file and what was delivered, got %q", reports)
	}
	if exists(path+".COMPLETED") || !exists(path) {
		t.Fatal("a changed file was marked done")
	}
	if fx.src.counters.GenericProcessingFail.Load() != 1 {
		t.Errorf("GenericProcessingFail = %d, want 1", fx.src.counters.GenericProcessingFail.Load())
	}

	fx.stop()
	fx.start()
	fx.expect("appended")
	if !testutil.Eventually(func() bool { return exists(path + ".COMPLETED") }, 5*time.Second) {
		t.Fatal("the file was not marked done once continued")
	}
	if l := fx.logs.String(); !strings.Contains(l, "continues a file that changed while it was read") {
		t.Errorf("the restart does not say it continues the changed file: %s", l)
	}
}

// TestChangedFileMovedAway: once the operator moves a changed file out of
// the directory, its progress is forgotten, and a new file under its name
// is read from its start in the same run.
func TestChangedFileMovedAway(t *testing.T) {
	fx := newFixture(t, map[string]string{"batchSize": "10"})
	fx.pl = sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
	text, want := lines("l", 20)
	path := fx.write("a.log", text, time.Time{})
	fx.start()
	got := sourcetest.Bodies(fx.pl.Take(t, 10, 5*time.Second))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("appended\n")
	f.Close()
	got = append(got, sourcetest.Bodies(fx.pl.Drain(t, 10, 5*time.Second))...)
	if !slices.Equal(got, want) {
		t.Fatalf("got %q", got)
	}
	if !testutil.Eventually(func() bool { return strings.Contains(fx.logs.String(), "changed while it was read") }, 5*time.Second) {
		t.Fatal("the change was not reported")
	}
	if err := os.Rename(path, filepath.Join(t.TempDir(), "a.log")); err != nil {
		t.Fatal(err)
	}
	progressFile := filepath.Join(fx.dir, ".flumespool", progressName)
	if !testutil.Eventually(func() bool {
		p, err := loadProgress(progressFile)
		return err == nil && len(p.entries) == 0
	}, 5*time.Second) {
		data, _ := os.ReadFile(progressFile)
		t.Fatalf("the progress of the file moved away is kept: %s", data)
	}
	fx.write("a.log", "fresh\n", time.Time{})
	fx.expect("fresh")
	if !testutil.Eventually(func() bool { return exists(path + ".COMPLETED") }, 5*time.Second) {
		t.Fatal("the new file was not marked done")
	}
}

// TestProgressEveryBatch: the progress file holds the end of every
// committed batch as soon as it is committed (not a second later, not only
// at stop), so a crash at any moment repeats at most the batch in flight.
func TestProgressEveryBatch(t *testing.T) {
	fx := newFixture(t, map[string]string{"batchSize": "10"})
	fx.pl = sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
	text, _ := lines("line", 100)
	path := fx.write("a", text, time.Time{})
	fx.start()
	progressFile := filepath.Join(fx.dir, ".flumespool", progressName)
	for batch := 1; batch <= 5; batch++ {
		// The channel holds one batch: batch k is committed and k+1
		// waits, so the progress must say exactly k batches.
		wantPos := int64(len(strings.Join(strings.SplitAfter(text, "\n")[:10*batch], "")))
		if !testutil.Eventually(func() bool {
			p, err := loadProgress(progressFile)
			if err != nil || len(p.entries) != 1 {
				return false
			}
			e := p.entries[0]
			return e.File == path && e.Pos == wantPos && e.Lines == int64(10*batch)
		}, 5*time.Second) {
			data, _ := os.ReadFile(progressFile)
			t.Fatalf("after %d committed batches the progress file is %s, want pos %d and %d lines", batch, data, wantPos, 10*batch)
		}
		fx.pl.Take(t, 10, 5*time.Second)
	}
}

// TestCannotContinue: a file that became shorter than what was delivered of
// it, or a different file under the name of one begun, is not read again
// from its start: it is reported once and left for the operator.
func TestCannotContinue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
		want   string
	}{
		{"shrunk", func(t *testing.T, path string) {
			if err := os.Truncate(path, 5); err != nil {
				t.Fatal(err)
			}
		}, "shorter than the"},
		{"replaced", func(t *testing.T, path string) {
			data, _ := os.ReadFile(path)
			tmp := path + ".new"
			if err := os.WriteFile(tmp, data, 0o644); err != nil {
				t.Fatal(err)
			}
			// Keep the old inode alive so the new file cannot reuse it.
			if err := os.Rename(path, filepath.Join(t.TempDir(), "old")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, "another inode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, map[string]string{"batchSize": "10"})
			fx.pl = sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
			text, want := lines("l", 50)
			path := fx.write("a.log", text, time.Time{})
			fx.start()
			got := sourcetest.Bodies(fx.pl.Drain(t, 20, 5*time.Second))
			fx.stop()
			got = append(got, sourcetest.Bodies(fx.pl.Drain(t, 10, time.Second))...)
			if !slices.Equal(got, want[:len(got)]) || len(got) < 20 {
				t.Fatalf("before the change: got %q", got)
			}
			tc.change(t, path)
			fx.start()
			fx.expect()
			if !testutil.Eventually(func() bool { return strings.Contains(fx.logs.String(), tc.want) }, 5*time.Second) {
				t.Fatalf("no report of %q: %s", tc.want, fx.logs.String())
			}
			if n := strings.Count(fx.logs.String(), "leaves a file it cannot continue"); n != 1 {
				t.Errorf("reported %d times, want once: %s", n, fx.logs.String())
			}
			if !exists(path) || exists(path+".COMPLETED") {
				t.Fatal("the file was not left in place")
			}
		})
	}
}

// TestOlderProgressFile: the one-file progress file sluice wrote before
// (no inode) is still read, and a file it names that changed since is
// continued after its last committed line, not read again from its start.
func TestOlderProgressFile(t *testing.T) {
	fx := newFixture(t, nil)
	text, want := lines("l", 20)
	path := fx.write("a", text, time.Time{})
	pos := len(strings.Join(strings.SplitAfter(text, "\n")[:12], ""))
	if err := os.MkdirAll(filepath.Join(fx.dir, ".flumespool"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf(`{"file":%q,"pos":%d,"size":%d,"mtime":1}`, path, pos, len(text)-1)
	if err := os.WriteFile(filepath.Join(fx.dir, ".flumespool", progressName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.start()
	fx.expect(want[12:]...)
}

// TestDamagedProgressFile: a progress file that cannot be read stops the
// source from starting, with what to do, instead of reading the files it
// had begun again from their start.
func TestDamagedProgressFile(t *testing.T) {
	fx := newFixture(t, nil)
	fx.write("a", "x\n", time.Time{})
	if err := os.MkdirAll(filepath.Join(fx.dir, ".flumespool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fx.dir, ".flumespool", progressName), []byte(`{"files":[{"fi`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := config.FromMap("a1.sources.r1.", fx.props)
	s, err := New(sourcetest.Env("r1", "spooldir"), p)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background(), fx.pl.Processor)
	if err == nil {
		s.Stop(context.Background())
		t.Fatal("started with a damaged progress file")
	}
	for _, want := range []string{progressName, "remove it to have those files read again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestProgressNotWritable: while the progress file cannot be written, the
// source reads no further (so a crash would not repeat more than the batch
// in flight), says so once and in Health, and goes on once it can.
func TestProgressNotWritable(t *testing.T) {
	fx := newFixture(t, map[string]string{"batchSize": "10"})
	text, want := lines("l", 30)
	fx.start()
	// A directory where the progress file goes makes every save fail,
	// even for root.
	blocker := filepath.Join(fx.dir, ".flumespool", progressName)
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	fx.write("a", text, time.Time{})
	got := sourcetest.Bodies(fx.pl.Drain(t, 30, 700*time.Millisecond))
	if !slices.Equal(got, want[:10]) {
		t.Fatalf("with no progress saved the source read on: got %q, want only the first batch", got)
	}
	if err := fx.src.Health(); err == nil || !strings.Contains(err.Error(), "cannot save its progress") {
		t.Fatalf("Health() = %v", err)
	}
	if n := strings.Count(fx.logs.String(), "cannot save its progress"); n != 1 {
		t.Errorf("%d log lines about it, want 1 (throttled): %s", n, fx.logs.String())
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	got = append(got, sourcetest.Bodies(fx.pl.Drain(t, 20, 10*time.Second))...)
	if !slices.Equal(got, want) {
		t.Fatalf("got %q", got)
	}
	if err := fx.src.Health(); err != nil {
		t.Fatalf("Health() = %v once the progress is saved again", err)
	}
	// The streak ends with one line saying so, after the summary of the
	// failures held back, and nothing of it after that.
	var about []string
	for _, l := range strings.Split(fx.logs.String(), "\n") {
		if strings.Contains(l, "its progress") {
			about = append(about, l)
		}
	}
	if n := len(about); n < 2 || !strings.Contains(about[n-1], "spooldir source saves its progress again") ||
		!strings.Contains(about[n-1], "recovered_after=") || strings.Count(fx.logs.String(), "saves its progress again") != 1 {
		t.Errorf("the lines about saving the progress: want the failure, its summary, then one recovery:\n%s", strings.Join(about, "\n"))
	}
}

// TestLastLineWithoutNewlineGrew: a last line with no newline is held back
// when the file is longer than when reading began by the time it is read
// (it is being written), instead of being sent cut.
func TestLastLineWithoutNewlineGrew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x\npartial line and more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// What the reader saw: the file as it was, 9 bytes.
	lr := &lineReader{r: bufio.NewReader(strings.NewReader("x\npartial")), max: 100, policy: "fail"}
	r := &reader{s: &Source{}, limit: 10}
	bodies, end, err := r.readBatch(lr, f, 9)
	if !errors.Is(err, errChanged) || len(bodies) != 1 || string(bodies[0]) != "x" || end != 2 {
		t.Fatalf("readBatch = %q, %d, %v; want [x], 2, changed", bodies, end, err)
	}
}

func TestNameUsedTwice(t *testing.T) {
	fx := newFixture(t, nil)
	fx.write("a.COMPLETED", "", time.Time{})
	path := fx.write("a", "x\n", time.Time{})
	fx.start()
	fx.expect("x")
	if !testutil.Eventually(func() bool { return strings.Contains(fx.logs.String(), "that file exists") }, 5*time.Second) || !exists(path) {
		t.Fatalf("no error for a done name already taken: %s", fx.logs.String())
	}
}

func TestBadProperties(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{}, "spoolDir: missing required property"},
		{map[string]string{"spoolDir": "/x", "deletePolicy": "later"}, `"later" is not one of never, immediate`},
		{map[string]string{"spoolDir": "/x", "trackingPolicy": "x"}, "is not one of rename, tracker_dir"},
		{map[string]string{"spoolDir": "/x", "consumeOrder": "newest"}, "is not one of oldest, youngest, random"},
		{map[string]string{"spoolDir": "/x", "includePattern": "("}, "not a valid regular expression"},
		{map[string]string{"spoolDir": "/x", "deserializer": "AVRO"}, "sluice has the LINE deserializer and org.apache.flume.sink.solr.morphline.BlobDeserializer$Builder"},
		{map[string]string{"spoolDir": "/x", "deserializer": blobDeserializer, "deserializer.maxBlobLength": "0"}, "out of range"},
		{map[string]string{"spoolDir": "/x", "deserializer.maxLineLength": "0"}, "out of range"},
		{map[string]string{"spoolDir": "/x", "inputCharset": "UTF-16"}, "not supported"},
		{map[string]string{"spoolDir": "/x", "recursiveDirectorySearch": "true"}, "set it to false"},
		{map[string]string{"spoolDir": "/x", "fileSuffix": ""}, "must not be empty"},
	} {
		p := config.FromMap("a1.sources.r1.", tc.props)
		if _, err := New(sourcetest.Env("r1", "spooldir"), p); err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.props, err, tc.want)
		}
	}
}

func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbc\r\n"), 4)
	f.Add([]byte("日本語のテキスト\n\xff\xfe"), 3)
	f.Add([]byte("\U0001F600\U0001F600x"), 1)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 1 || max > 100 {
			return
		}
		lr := &lineReader{r: bufio.NewReader(bytes.NewReader(data)), max: max, policy: "ignore"}
		var total int64
		for i := 0; ; i++ {
			if i > len(data)+1 {
				t.Fatal("more pieces than bytes")
			}
			body, err := lr.next()
			if err != nil {
				break
			}
			if len(body) > 4*max+4 {
				t.Fatalf("piece of %d bytes with max %d characters", len(body), max)
			}
			total = lr.off
		}
		if total > int64(len(data)) {
			t.Fatalf("offset %d past the %d bytes", total, len(data))
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
// failed put, records no progress, and stops at once when asked.
func TestIntakeClosed(t *testing.T) {
	fx := newFixture(t, nil)
	fx.write("a", "x\ny\n", time.Time{})
	proc := &stoppingProcessor{}
	p := config.FromMap("a1.sources.r1.", fx.props)
	env := sourcetest.Env("r1", "spooldir")
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
	time.Sleep(600 * time.Millisecond) // longer than the first retry would wait
	t0 := time.Now()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Stop took %v", d)
	}
	if n := proc.calls.Load(); n != 1 {
		t.Errorf("%d puts tried after the intake closed, want 1", n)
	}
	if strings.Contains(fx.logs.String(), "could not put") {
		t.Errorf("the closed intake was logged as a failed put: %s", fx.logs.String())
	}
	c := s.(*Source).counters
	if c.ChannelWriteFail.Load() != 0 || c.GenericProcessingFail.Load() != 0 {
		t.Errorf("ChannelWriteFail %d, GenericProcessingFail %d; want 0", c.ChannelWriteFail.Load(), c.GenericProcessingFail.Load())
	}
	if prog, err := loadProgress(filepath.Join(fx.dir, ".flumespool", progressName)); err != nil || len(prog.entries) != 0 {
		t.Errorf("progress recorded for a batch never put: %+v, %v", prog, err)
	}
}
