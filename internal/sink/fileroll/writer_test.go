package filerollsink

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
)

func newTestWriter(t *testing.T, opt Options) (*Writer, *metrics.SinkCounters) {
	t.Helper()
	if opt.Directory == "" {
		opt.Directory = filepath.Join(t.TempDir(), "out")
	}
	c := metrics.NewSinkCounters("k1", "file_roll")
	w := NewWriter(opt, c, nil)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	return w, c
}

func batch(from, n int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i].Body = []byte("event-" + strconv.Itoa(from+i))
	}
	return evs
}

func lines(from, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "event-%d\n", from+i)
	}
	return b.String()
}

// files returns the files of dir in the order they were written (by the
// number after the last '-').
func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	num := regexp.MustCompile(`-(\d+)(\.[^.]*)?$`)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	n := func(s string) int {
		m := num.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("file name %q has no index", s)
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	slices.SortFunc(out, func(a, b string) int { return n(a) - n(b) })
	return out
}

func readAll(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range files(t, dir) {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// openIn returns the files under dir that this process holds open.
func openIn(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	var out []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			out = append(out, filepath.Base(target))
		}
	}
	return out
}

func TestWriteFlushesEachBatch(t *testing.T) {
	w, c := newTestWriter(t, Options{AppendNewline: true})
	ctx := context.Background()
	if err := w.Write(ctx, batch(0, 3)); err != nil {
		t.Fatal(err)
	}
	// Visible to a reader before Stop: the batch was handed to the OS.
	if got := readAll(t, w.opt.Directory); got != lines(0, 3) {
		t.Fatalf("after one batch the files hold %q", got)
	}
	if err := w.Write(ctx, batch(3, 2)); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, w.opt.Directory); got != lines(0, 5) {
		t.Fatalf("files hold %q", got)
	}
	if n := len(files(t, w.opt.Directory)); n != 1 {
		t.Fatalf("%d files, want 1 (no roll)", n)
	}
	if c.ConnectionCreated.Load() != 1 || c.ConnectionClosed.Load() != 1 || c.ConnectionFailed.Load() != 0 {
		t.Fatalf("counters created=%d closed=%d failed=%d, want 1 1 0",
			c.ConnectionCreated.Load(), c.ConnectionClosed.Load(), c.ConnectionFailed.Load())
	}
	if open := openIn(t, w.opt.Directory); len(open) != 0 {
		t.Fatalf("files still open after Stop: %v", open)
	}
}

func TestFileNames(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		re   string
	}{
		{"default", Options{}, `^(\d{13})-1$`},
		{"prefix and extension", Options{Prefix: "app-", Extension: "log"}, `^app-(\d{13})-1\.log$`},
		{"rolltime", Options{RollTime: true, Extension: "txt"}, `^(\d{14})-1\.txt$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			w, _ := newTestWriter(t, tt.opt)
			w.Write(context.Background(), batch(0, 1))
			w.mu.Lock()
			err := w.closeFile() // roll by hand
			w.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			w.Write(context.Background(), batch(1, 1))
			w.Stop(context.Background())
			got := files(t, w.opt.Directory)
			if len(got) != 2 {
				t.Fatalf("files %v, want 2", got)
			}
			m := regexp.MustCompile(tt.re).FindStringSubmatch(got[0])
			if m == nil {
				t.Fatalf("first file %q does not match %s", got[0], tt.re)
			}
			if tt.opt.RollTime {
				if !strings.HasSuffix(got[1], "-2.txt") && !strings.HasSuffix(got[1], "-1.txt") {
					t.Fatalf("second file %q", got[1])
				}
				return
			}
			ms, _ := strconv.ParseInt(m[1], 10, 64)
			if ms < before.UnixMilli() || ms > time.Now().UnixMilli() {
				t.Fatalf("series %d is not the start time", ms)
			}
			i := strings.LastIndex(got[0], "-1")
			if want := got[0][:i] + "-2" + got[0][i+2:]; got[1] != want {
				t.Fatalf("second file %q, want %q", got[1], want)
			}
		})
	}
}

func TestNoNewline(t *testing.T) {
	w, _ := newTestWriter(t, Options{})
	w.Write(context.Background(), []event.Event{{Body: []byte("a")}, {Body: []byte("b")}})
	w.Stop(context.Background())
	if got := readAll(t, w.opt.Directory); got != "ab" {
		t.Fatalf("got %q", got)
	}
}

// TestRollsBetweenBatches writes batches while a fast timer rolls, and
// checks that each rolled file is closed when the roll is reported, holds
// only whole batches, and that nothing is lost or reordered.
func TestRollsBetweenBatches(t *testing.T) {
	rolled := make(chan string, 1000)
	c := metrics.NewSinkCounters("k1", "file_roll")
	dir := filepath.Join(t.TempDir(), "out")
	w := NewWriter(Options{Directory: dir, RollInterval: 5 * time.Millisecond, AppendNewline: true, Fsync: true}, c, nil)
	w.rolled = rolled
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	const batchLen = 10
	n := 0
	for rolls := 0; rolls < 5; {
		if err := w.Write(context.Background(), batch(n, batchLen)); err != nil {
			t.Fatal(err)
		}
		n += batchLen
		select {
		case path := <-rolled:
			rolls++
			if open := openIn(t, dir); slices.Contains(open, filepath.Base(path)) {
				t.Fatalf("rolled file %s still open", path)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if k := bytes.Count(data, []byte("\n")); k == 0 || k%batchLen != 0 {
				t.Fatalf("rolled file %s holds %d lines, not whole batches of %d", path, k, batchLen)
			}
		default:
		}
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, dir); got != lines(0, n) {
		t.Fatalf("events lost or reordered across rolls: %d bytes, want %d", len(got), len(lines(0, n)))
	}
	if open := openIn(t, dir); len(open) != 0 {
		t.Fatalf("files still open after Stop: %v", open)
	}
	if c.ConnectionCreated.Load() != c.ConnectionClosed.Load() || c.ConnectionCreated.Load() < 5 {
		t.Fatalf("created=%d closed=%d", c.ConnectionCreated.Load(), c.ConnectionClosed.Load())
	}
}

// TestIdleRollLeavesNoEmptyFile checks that a roll with no open file does
// not create one.
func TestIdleRollLeavesNoEmptyFile(t *testing.T) {
	rolled := make(chan string, 10)
	w := NewWriter(Options{Directory: t.TempDir(), RollInterval: time.Millisecond}, metrics.NewSinkCounters("k1", "file_roll"), nil)
	w.rolled = rolled
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Write(context.Background(), batch(0, 1))
	<-rolled // the one file was closed by the timer
	w.Stop(context.Background())
	if got := files(t, w.opt.Directory); len(got) != 1 {
		t.Fatalf("files %v, want just one", got)
	}
}

func TestNeverTruncatesExistingFile(t *testing.T) {
	w, _ := newTestWriter(t, Options{AppendNewline: true})
	w.mu.Lock()
	first := filepath.Join(w.opt.Directory, strconv.FormatInt(w.series, 10)+"-1")
	w.mu.Unlock()
	if err := os.WriteFile(first, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Write(context.Background(), batch(0, 1))
	w.Stop(context.Background())
	if data, _ := os.ReadFile(first); string(data) != "precious\n" {
		t.Fatalf("existing file overwritten: %q", data)
	}
	if got := readAll(t, w.opt.Directory); got != "precious\n"+lines(0, 1) {
		t.Fatalf("got %q", got)
	}
}

// TestWriteErrorMovesToNewFile breaks the open file under the writer: the
// batch fails, is counted, and the retry goes to a new file.
func TestWriteErrorMovesToNewFile(t *testing.T) {
	w, c := newTestWriter(t, Options{AppendNewline: true})
	ctx := context.Background()
	w.Write(ctx, batch(0, 1))
	w.mu.Lock()
	w.f.Close() // fault injection: the descriptor goes bad
	w.mu.Unlock()
	if err := w.Write(ctx, batch(1, 1)); err == nil {
		t.Fatal("write to a closed file succeeded")
	}
	if c.ConnectionFailed.Load() != 1 {
		t.Fatalf("ConnectionFailed = %d", c.ConnectionFailed.Load())
	}
	if err := w.Write(ctx, batch(1, 1)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	w.Stop(ctx)
	if got := readAll(t, w.opt.Directory); got != lines(0, 2) {
		t.Fatalf("got %q", got)
	}
}

func TestStartCreatesDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	newTestWriter(t, Options{Directory: dir})
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("directory not created: %v", err)
	}
}

func TestStartFailsOnUnusableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(Options{Directory: filepath.Join(file, "sub")}, metrics.NewSinkCounters("k1", "file_roll"), nil)
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded with a file as parent directory")
	}
}

// BenchmarkWrite measures one batch of 100 events of 256 bytes.
func BenchmarkWrite(b *testing.B) {
	for _, bc := range []struct {
		name string
		opt  Options
	}{
		{"text", Options{AppendNewline: true}},
		{"avro_event", Options{Serializer: AvroEvent, AvroCodec: "null", AvroSyncBytes: DefaultAvroSyncBytes}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.opt.Directory = b.TempDir()
			w := NewWriter(bc.opt, metrics.NewSinkCounters("k1", "file_roll"), nil)
			if err := w.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer w.Stop(context.Background())
			evs := make([]event.Event, 100)
			for i := range evs {
				evs[i].Headers = event.Headers{{Key: "host", Value: "web1"}}
				evs[i].Body = bytes.Repeat([]byte{'a' + byte(i%26)}, 256)
			}
			b.SetBytes(100 * 257)
			b.ReportAllocs()
			for b.Loop() {
				if err := w.Write(context.Background(), evs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
