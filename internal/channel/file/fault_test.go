package file

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

// faultyDisk makes every segment file's writes fail while armed.
type faultyDisk struct {
	fail   atomic.Bool
	writes atomic.Int64
}

type faultyFile struct {
	wal.SegmentFile
	d *faultyDisk
}

func (f faultyFile) Write(p []byte) (int, error) {
	f.d.writes.Add(1)
	if f.d.fail.Load() {
		return 0, &pathErr{syscall.EIO}
	}
	return f.SegmentFile.Write(p)
}

type pathErr struct{ errno syscall.Errno }

func (e *pathErr) Error() string { return "write segment: " + e.errno.Error() }
func (e *pathErr) Unwrap() error { return e.errno }

func (d *faultyDisk) install(c *Channel) {
	c.walOpts = func(_ int, o *wal.Options) {
		o.OpenSegment = func(path string) (wal.SegmentFile, error) {
			f, err := wal.OpenSegmentFile(path)
			if err != nil {
				return nil, err
			}
			return faultyFile{f, d}, nil
		}
	}
}

// metricsOf returns the channel's Flume attributes by name.
func metricsOf(reg *metrics.Registry) map[string]string {
	out := map[string]string{}
	for _, s := range reg.Sets() {
		s.Each(func(name, value string) { out[name] = value })
	}
	return out
}

// A failed disk write makes the channel unhealthy: the put fails, and every
// later commit fails fast (without touching the disk) even once the disk
// works again, until the channel is restarted, which brings back every
// event acknowledged before the failure.
func TestDiskWriteFailureIsSticky(t *testing.T) {
	d := newDirs(t)
	c, reg := build(t, d, nil)
	disk := &faultyDisk{}
	disk.install(c)
	m := metricsOf(reg)
	for _, name := range []string{"Closed", "Unhealthy", "EventPutErrorCount", "EventTakeErrorCount",
		"CheckpointWriteErrorCount", "CheckpointBackupWriteErrorCount", "ChannelSize", "ChannelCapacity",
		"EventPutAttemptCount", "EventPutSuccessCount", "EventTakeAttemptCount", "EventTakeSuccessCount"} {
		if _, ok := m[name]; !ok {
			t.Errorf("Flume counter %s missing", name)
		}
	}
	if m["Closed"] != "1" {
		t.Errorf("Closed = %s before Start, want 1", m["Closed"])
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m := metricsOf(reg); m["Closed"] != "0" || m["Unhealthy"] != "0" {
		t.Fatalf("running channel: Closed %s Unhealthy %s", m["Closed"], m["Unhealthy"])
	}
	putN(t, c, "ok", 20, 10)

	disk.fail.Store(true)
	err := testutil.PutCommit(c, testutil.Events("lost", 5))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("put on a failing disk: %v", err)
	}
	disk.fail.Store(false) // the disk heals; the channel must not trust it
	writes := disk.writes.Load()
	for range 3 {
		t0 := time.Now()
		err := testutil.PutCommit(c, testutil.Events("after", 5))
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "until the channel restarts") {
			t.Fatalf("put after the failure: %v", err)
		}
		if d := time.Since(t0); d > 100*time.Millisecond {
			t.Fatalf("put after the failure took %v, want it to fail fast", d)
		}
	}
	// Takes read what is held, but their commit cannot be recorded.
	tx := c.Begin()
	got, err := tx.Take(context.Background(), nil, 5)
	if err != nil || len(got) != 5 {
		t.Fatalf("take: %d events, %v", len(got), err)
	}
	if err := tx.Commit(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("take commit after the failure: %v", err)
	}
	tx.Rollback()
	if n := disk.writes.Load(); n != writes {
		t.Fatalf("%d writes after the sticky error", n-writes)
	}
	m = metricsOf(reg)
	if m["Unhealthy"] != "1" || m["EventPutErrorCount"] != "4" || m["EventTakeErrorCount"] != "1" {
		t.Fatalf("after the failure: Unhealthy %s EventPutErrorCount %s EventTakeErrorCount %s",
			m["Unhealthy"], m["EventPutErrorCount"], m["EventTakeErrorCount"])
	}

	if err := c.Stop(context.Background()); err != nil {
		t.Logf("stop after the failure: %v", err) // the last checkpoint may fail; the log is replayed
	}
	if m := metricsOf(reg); m["Closed"] != "1" {
		t.Fatalf("Closed = %s after Stop", m["Closed"])
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if m := metricsOf(reg); m["Unhealthy"] != "0" || m["Closed"] != "0" {
		t.Fatalf("after restart: Unhealthy %s Closed %s", m["Unhealthy"], m["Closed"])
	}
	putN(t, c, "again", 3, 3)
	wantAll(t, c, append(bodies("ok", 0, 20), bodies("again", 0, 3)...))
}

// A checkpoint that cannot be written is counted; the backup's failures
// are counted apart; the channel goes on.
func TestCheckpointWriteErrors(t *testing.T) {
	d := newDirs(t)
	c, reg := build(t, d, map[string]string{"useDualCheckpoints": "true", "backupCheckpointDir": d.backup})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	putN(t, c, "x", 10, 10)
	// A file where the checkpoint's temporary file goes makes the write fail.
	for _, dir := range []string{d.backup, d.ck} {
		if err := mkFileDir(dir + "/" + wal.CheckpointFile + ".tmp"); err != nil {
			t.Fatal(err)
		}
		if err := c.checkpoint(); dir == d.ck && err == nil {
			t.Fatal("checkpoint into an unwritable dir succeeded")
		}
	}
	m := metricsOf(reg)
	if m["CheckpointWriteErrorCount"] != "1" || m["CheckpointBackupWriteErrorCount"] != "1" {
		t.Fatalf("CheckpointWriteErrorCount %s CheckpointBackupWriteErrorCount %s",
			m["CheckpointWriteErrorCount"], m["CheckpointBackupWriteErrorCount"])
	}
	for _, dir := range []string{d.backup, d.ck} {
		os.RemoveAll(dir + "/" + wal.CheckpointFile + ".tmp")
	}
	putN(t, c, "y", 10, 10)
	wantAll(t, c, append(bodies("x", 0, 10), bodies("y", 0, 10)...))
}

// mkFileDir makes path a non-empty directory, so no file can be created or
// renamed there.
func mkFileDir(path string) error {
	if err := os.MkdirAll(path+"/x", 0o755); err != nil {
		return err
	}
	return nil
}

// gatedFile holds every Datasync while its gate is armed.
type gatedFile struct {
	wal.SegmentFile
	gate *atomic.Pointer[chan struct{}]
}

func (f gatedFile) Datasync() error {
	if g := f.gate.Load(); g != nil {
		<-*g
	}
	return f.SegmentFile.Datasync()
}

// A take commit waits for the previous take record's fdatasync, not its
// own: the first commit returns while its record's sync is held, the
// second waits until that sync completes.
func TestTakeCommitWaitsForThePreviousTakeRecord(t *testing.T) {
	d := newDirs(t)
	c, _ := build(t, d, nil)
	var gate atomic.Pointer[chan struct{}]
	c.walOpts = func(_ int, o *wal.Options) {
		o.OpenSegment = func(path string) (wal.SegmentFile, error) {
			f, err := wal.OpenSegmentFile(path)
			if err != nil {
				return nil, err
			}
			return gatedFile{f, &gate}, nil
		}
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	for i := range 2 {
		if err := testutil.PutCommit(c, []event.Event{{Body: []byte{byte('a' + i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan struct{})
	gate.Store(&held)
	firstDone := make(chan error, 1)
	go func() {
		evs, err := testutil.TakeCommit(c, 1, time.Second)
		if err == nil && len(evs) != 1 {
			err = errors.New("took no event")
		}
		firstDone <- err
	}()
	select {
	case err := <-firstDone:
		if err != nil {
			t.Fatalf("first take commit: %v", err)
		}
	case <-time.After(10 * time.Second):
		gate.Store(nil)
		close(held)
		t.Fatal("first take commit waited for its own record's fdatasync")
	}
	second := make(chan error, 1)
	go func() {
		_, err := testutil.TakeCommit(c, 1, time.Second)
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("second take commit returned (%v) before the first one's record was durable", err)
	case <-time.After(100 * time.Millisecond):
	}
	gate.Store(nil)
	close(held)
	if err := <-second; err != nil {
		t.Fatalf("second take commit: %v", err)
	}
}
