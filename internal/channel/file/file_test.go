package filechannel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

var quiet = slog.New(slog.DiscardHandler)

// dirs are one channel's directories, kept across restarts.
type dirs struct{ ck, data, backup string }

func newDirs(t testing.TB) dirs {
	base := t.TempDir()
	return dirs{filepath.Join(base, "ck"), filepath.Join(base, "data"), filepath.Join(base, "backup")}
}

func build(t testing.TB, d dirs, extra map[string]string) (*Channel, *metrics.Registry) {
	t.Helper()
	m := map[string]string{
		"checkpointDir":        d.ck,
		"dataDirs":             d.data,
		"keep-alive":           "1",
		"minimumRequiredSpace": "1048576",
		"maxFileSize":          "1048576",
	}
	for k, v := range extra {
		m[k] = v
	}
	reg := metrics.NewRegistry("a1")
	p := config.FromMap("a1.channels.c1.", m)
	ch, err := New(flow.Env{Agent: "a1", Name: "c1", Type: "file", Metrics: reg, Logger: quiet}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatalf("config problems: %v", err)
	}
	return ch.(*Channel), reg
}

func start(t testing.TB, d dirs, extra map[string]string) *Channel {
	t.Helper()
	c, _ := build(t, d, extra)
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return c
}

func stop(t testing.TB, c *Channel) {
	t.Helper()
	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func TestChannelSuite(t *testing.T) {
	testutil.RunChannelSuite(t, func(t *testing.T, capacity, txCapacity int) flow.Channel {
		c, _ := build(t, newDirs(t), map[string]string{
			"capacity":            strconv.Itoa(capacity),
			"transactionCapacity": strconv.Itoa(txCapacity),
		})
		return c
	})
}

func TestChannelSuiteFromDisk(t *testing.T) {
	// cacheBytes 0: every take reads its event back from the log.
	testutil.RunChannelSuite(t, func(t *testing.T, capacity, txCapacity int) flow.Channel {
		c, _ := build(t, newDirs(t), map[string]string{
			"capacity":            strconv.Itoa(capacity),
			"transactionCapacity": strconv.Itoa(txCapacity),
			"cacheBytes":          "0",
		})
		return c
	})
}

func TestConfig(t *testing.T) {
	home, _ := os.UserHomeDir()
	c, _ := buildRaw(t, map[string]string{})
	if c.capacity != 1000000 || c.txCap != 10000 || c.ckInterval != 30*time.Second || c.maxFileSize != 2146435071 ||
		c.minFree != 524288000 || c.keepAlive != 3*time.Second || !c.ckOnClose ||
		c.ckDir != filepath.Join(home, ".flume/file-channel/checkpoint") || len(c.dataDirs) != 1 || c.dataDirs[0] != filepath.Join(home, ".flume/file-channel/data") {
		t.Fatalf("defaults differ from Flume's: %+v", c)
	}
	for _, tc := range []struct {
		props   map[string]string
		wantErr string
	}{
		{map[string]string{"capacity": "10", "transactionCapacity": "20"}, "transactionCapacity: 20 is larger than capacity 10"},
		{map[string]string{"useDualCheckpoints": "true"}, "backupCheckpointDir is not set"},
		{map[string]string{"maxFileSize": "1000"}, "maxFileSize: 1000 bytes is too small"},
		{map[string]string{"checkpointInterval": "5"}, "checkpointInterval: 5 ms is too short"},
		{map[string]string{"keep-alive": "-2"}, "keep-alive: -2 is not a number of seconds"},
		{map[string]string{"dataDir": "/x"}, "dataDir: ignored: sluice does not read it"},
	} {
		_, p := buildRaw(t, tc.props)
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: problems %v, want %q", tc.props, err, tc.wantErr)
		}
	}
	_, p := buildRaw(t, map[string]string{"useDualCheckpoints": "true", "backupCheckpointDir": "/b",
		"use-fast-replay": "true", "fsyncPerTransaction": "true", "checkpointOnClose": "false", "dataDirs": "/d1,/d2"})
	if err := p.Err(); err != nil {
		t.Fatalf("Flume's keys refused: %v", err)
	}
}

func buildRaw(t *testing.T, m map[string]string) (*Channel, *config.Props) {
	p := config.FromMap("a1.channels.c1.", m)
	ch, err := New(flow.Env{Name: "c1", Type: "file", Logger: quiet}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	return ch.(*Channel), p
}

func putN(t testing.TB, c flow.Channel, prefix string, n, batch int) {
	t.Helper()
	for i := 0; i < n; i += batch {
		evs := testutil.Events(prefix, min(batch, n-i))
		for j := range evs {
			evs[j].Body = []byte(prefix + strconv.Itoa(i+j))
		}
		if err := testutil.PutCommit(c, evs); err != nil {
			t.Fatal(err)
		}
	}
}

func bodies(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

func wantAll(t *testing.T, c flow.Channel, want []string) {
	t.Helper()
	got := testutil.Bodies(testutil.TakeAll(t, c, len(want)+1, 97, 100*time.Millisecond))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("took %d events %.200q..., want %d %.200q...", len(got), got, len(want), want)
	}
}

// A clean stop and start keeps every event not taken, in order, including
// events taken by a transaction still open at the stop.
func TestRestartKeepsEvents(t *testing.T) {
	for _, cache := range []string{"67108864", "0"} {
		t.Run("cacheBytes="+cache, func(t *testing.T) {
			d := newDirs(t)
			c := start(t, d, map[string]string{"cacheBytes": cache})
			putN(t, c, "e", 500, 50)
			testutil.TakeAll(t, c, 100, 30, time.Second) // taken and committed: gone for good
			tx := c.Begin()
			if _, err := tx.Take(context.Background(), nil, 20); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			open := c.Begin() // still open at the stop: its events stay
			if _, err := open.Take(context.Background(), nil, 10); err != nil {
				t.Fatal(err)
			}
			stop(t, c)

			c = start(t, d, map[string]string{"cacheBytes": cache})
			defer stop(t, c)
			if c.Len() != 400 {
				t.Fatalf("Len after restart = %d, want 400", c.Len())
			}
			wantAll(t, c, bodies("e", 100, 500))
		})
	}
}

func TestHeadersAndTimesSurvive(t *testing.T) {
	d := newDirs(t)
	c := start(t, d, map[string]string{"cacheBytes": "0"})
	ev := event.Event{Headers: event.HeadersOf(map[string]string{"host": "a", "": "empty key", "k": ""}), Body: []byte{0, 1, 2}, ReceivedAt: 42}
	if err := testutil.PutCommit(c, []event.Event{ev}); err != nil {
		t.Fatal(err)
	}
	stop(t, c)
	c = start(t, d, nil)
	defer stop(t, c)
	got := testutil.TakeAll(t, c, 1, 1, time.Second)
	if len(got) != 1 || got[0].ReceivedAt != 42 || got[0].CommittedAt == 0 || string(got[0].Body) != "\x00\x01\x02" ||
		len(got[0].Headers) != 3 || got[0].Headers.Value("host") != "a" || got[0].Headers.Value("") != "empty key" {
		t.Fatalf("event came back as %+v", got)
	}
}

// Segments are deleted once a checkpoint shows every event in them taken.
func TestSegmentsDeletedWhenTaken(t *testing.T) {
	d := newDirs(t)
	c := start(t, d, map[string]string{"checkpointOnClose": "false"})
	defer stop(t, c)
	big := make([]byte, 10000)
	for i := range 300 { // ~3 MB in 1 MiB segments
		if err := testutil.PutCommit(c, []event.Event{{Body: append([]byte(strconv.Itoa(i)+":"), big...)}}); err != nil {
			t.Fatal(err)
		}
	}
	segs := func() int {
		m, _ := filepath.Glob(filepath.Join(d.data, "*.wal"))
		return len(m)
	}
	before := segs()
	if before < 3 {
		t.Fatalf("only %d segments", before)
	}
	testutil.TakeAll(t, c, 150, 50, time.Second)
	if err := c.checkpoint(); err != nil {
		t.Fatal(err)
	}
	mid := segs()
	if mid >= before || mid < 2 {
		t.Fatalf("after taking half: %d segments, had %d", mid, before)
	}
	testutil.TakeAll(t, c, 150, 50, time.Second)
	if err := c.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if n := segs(); n != 1 {
		t.Fatalf("after taking everything: %d segments, want only the open one", n)
	}
}

func TestDiskFull(t *testing.T) {
	d := newDirs(t)
	c, _ := build(t, d, map[string]string{"minimumRequiredSpace": "1000000"})
	var free atomic.Int64
	free.Store(1 << 30)
	c.freeSpace = func(string) (int64, error) { return free.Load(), nil }
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	putN(t, c, "a", 10, 10)
	free.Store(999999)
	c.mu.Lock()
	c.lastSpace = time.Time{} // do not wait out the 100 ms statfs cache
	c.mu.Unlock()
	err := testutil.PutCommit(c, testutil.Events("b", 1))
	if !errors.Is(err, flow.ErrChannelFull) || !strings.Contains(err.Error(), "less than minimumRequiredSpace 1000000") {
		t.Fatalf("put on a full disk: %v", err)
	}
	if got := testutil.TakeAll(t, c, 5, 5, time.Second); len(got) != 5 { // takes go on
		t.Fatalf("take on a full disk got %d events", len(got))
	}
	if h := c.Health(); h == nil || !strings.Contains(h.Error(), "has 999999 bytes (976.6 KiB) free, less than minimumRequiredSpace 1000000") {
		t.Fatalf("Health on a full disk: %v", h)
	}
	// Space returns: the watcher sees it without any put, and /healthz
	// with it.
	free.Store(1 << 30)
	testutil.WaitFor(t, 5*time.Second, "Health nil once space returned", func() bool { return c.Health() == nil })
	putN(t, c, "c", 3, 3)
	wantAll(t, c, []string{"a5", "a6", "a7", "a8", "a9", "c0", "c1", "c2"})
}

// Checkpoint damage: every case must bring back every event.
func TestCheckpointDamage(t *testing.T) {
	cases := []struct {
		name   string
		dual   bool
		damage func(t *testing.T, d dirs)
	}{
		{"missing", false, func(t *testing.T, d dirs) { os.Remove(filepath.Join(d.ck, wal.CheckpointFile)) }},
		{"corrupt", false, func(t *testing.T, d dirs) { flipByte(t, filepath.Join(d.ck, wal.CheckpointFile), 40) }},
		{"truncated", false, func(t *testing.T, d dirs) {
			if err := os.Truncate(filepath.Join(d.ck, wal.CheckpointFile), 20); err != nil {
				t.Fatal(err)
			}
		}},
		{"corrupt with backup", true, func(t *testing.T, d dirs) { flipByte(t, filepath.Join(d.ck, wal.CheckpointFile), 40) }},
		{"both missing", true, func(t *testing.T, d dirs) {
			os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
			os.Remove(filepath.Join(d.backup, wal.CheckpointFile))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirs(t)
			extra := map[string]string{}
			if tc.dual {
				extra = map[string]string{"useDualCheckpoints": "true", "backupCheckpointDir": d.backup}
			}
			c := start(t, d, extra)
			putN(t, c, "x", 300, 30)
			testutil.TakeAll(t, c, 100, 25, time.Second)
			if err := c.checkpoint(); err != nil {
				t.Fatal(err)
			}
			putN(t, c, "y", 50, 10) // after the checkpoint: replayed from the log
			testutil.TakeAll(t, c, 20, 20, time.Second)
			stop(t, c)
			tc.damage(t, d)

			c = start(t, d, extra)
			defer stop(t, c)
			wantAll(t, c, append(bodies("x", 120, 300), bodies("y", 0, 50)...))
			if n := c.lostEvents.Load(); n != 0 {
				t.Fatalf("RecoveryLostEventCount = %d after checkpoint damage alone", n)
			}
		})
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Damage in the log: a flipped bit in one event's record loses that event
// (counted), never its neighbours; a torn tail loses only an unacknowledged
// transaction.
func TestLogDamage(t *testing.T) {
	d := newDirs(t)
	c := start(t, d, map[string]string{"checkpointOnClose": "false"})
	putN(t, c, "z", 100, 10)
	stop(t, c)
	// Remove the checkpoint so the whole log is replayed, and damage the
	// 35th event's body.
	os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
	segs, _ := filepath.Glob(filepath.Join(d.data, "*.wal"))
	data, _ := os.ReadFile(segs[0])
	i := strings.Index(string(data), "z35")
	if i < 0 {
		t.Fatal("event z35 not found in the first segment")
	}
	flipByte(t, segs[0], int64(i+1))

	c = start(t, d, nil)
	want := append(bodies("z", 0, 35), bodies("z", 36, 100)...)
	wantAll(t, c, want)
	if n := c.lostEvents.Load(); n != 1 {
		t.Fatalf("RecoveryLostEventCount = %d, want 1", n)
	}
	if n := c.walStats().LostRegions; n != 1 {
		t.Fatalf("LogDamagedRegionCount = %d, want 1", n)
	}
	stop(t, c)
}

// A put transaction torn by a crash (its commit never written) is dropped
// at replay, and stays dropped after later appends and restarts.
func TestTornTransactionDropped(t *testing.T) {
	d := newDirs(t)
	c := start(t, d, map[string]string{"checkpointOnClose": "false"})
	putN(t, c, "ok", 10, 10)
	stop(t, c)
	os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
	// Append puts of a transaction without its commit, as a crash between
	// the write of the puts and of the commit would leave them.
	w, err := wal.Open(d.data, wal.Options{SegmentSize: 1 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ev := event.Event{Body: []byte("torn")}
	if _, err := w.Append(appendPut(nil, 999, 1, &ev), appendPut(nil, 999, 1, &ev)); err != nil {
		t.Fatal(err)
	}
	w.Close()

	for range 2 {
		c = start(t, d, map[string]string{"checkpointOnClose": "false"})
		putN(t, c, "later", 1, 1)
		stop(t, c)
		os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
	}
	c = start(t, d, nil)
	defer stop(t, c)
	wantAll(t, c, append(bodies("ok", 0, 10), "later0", "later0"))
}

// TestKillDashNine runs a producer in a child process, kills it with
// SIGKILL while it commits, and checks that every put the child saw
// acknowledged is in the channel after a restart.
func TestKillDashNine(t *testing.T) {
	if dir := os.Getenv("SLUICE_FILE_CHILD"); dir != "" {
		childProducer(dir)
		return
	}
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	base := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillDashNine$")
	cmd.Env = append(os.Environ(), "SLUICE_FILE_CHILD="+base)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	var buf [1 << 16]byte
	var line []byte
	deadline := time.Now().Add(10 * time.Second)
	for len(acked) < 3000 && time.Now().Before(deadline) {
		n, err := out.Read(buf[:])
		for _, b := range buf[:n] {
			if b == '\n' {
				acked[string(line)] = true
				line = line[:0]
				continue
			}
			line = append(line, b)
		}
		if err != nil {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(acked) < 100 {
		t.Fatalf("child acknowledged only %d batches", len(acked))
	}

	d := dirs{ck: filepath.Join(base, "ck"), data: filepath.Join(base, "data")}
	c := start(t, d, map[string]string{"capacity": "10000000", "transactionCapacity": "100"})
	defer stop(t, c)
	got := map[string]bool{}
	for _, e := range testutil.TakeAll(t, c, 10000000, 100, 200*time.Millisecond) {
		got[string(e.Body)] = true
	}
	for k := range acked { // each line is "producer-batch"; its 10 events are "producer-batch-i"
		for i := range 10 {
			if !got[fmt.Sprintf("%s-%d", k, i)] {
				t.Fatalf("acknowledged event %s-%d missing after kill -9 (%d batches acked, %d events recovered)", k, i, len(acked), len(got))
			}
		}
	}
	t.Logf("%d batches acknowledged before SIGKILL, %d events recovered", len(acked), len(got))
}

func childProducer(base string) {
	d := dirs{ck: filepath.Join(base, "ck"), data: filepath.Join(base, "data")}
	p := config.FromMap("a1.channels.c1.", map[string]string{"checkpointDir": d.ck, "dataDirs": d.data,
		"capacity": "10000000", "transactionCapacity": "100", "maxFileSize": "1048576", "checkpointInterval": "200",
		"minimumRequiredSpace": "0"})
	ch, err := New(flow.Env{Name: "c1", Type: "file", Logger: quiet}, p)
	if err != nil {
		os.Exit(2)
	}
	if err := ch.Start(context.Background()); err != nil {
		os.Exit(3)
	}
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			for b := 0; ; b++ {
				evs := make([]event.Event, 10)
				for i := range evs {
					evs[i].Body = fmt.Appendf(nil, "%d-%d-%d", w, b, i)
				}
				if err := testutil.PutCommit(ch, evs); err != nil {
					os.Exit(4)
				}
				fmt.Fprintf(os.Stdout, "%d-%d\n", w, b) // acknowledged
				if w == 0 && b%7 == 0 {                 // a consumer takes some
					tx := ch.Begin()
					if _, err := tx.Take(context.Background(), nil, 5); err != nil {
						os.Exit(5)
					}
					tx.Rollback()
				}
			}
		}()
	}
	<-done
}
