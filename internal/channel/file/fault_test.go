package filechannel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

// faultyDisk makes every segment file's writes fail while armed.
type faultyDisk struct {
	fail   atomic.Bool
	writes atomic.Int64 // writes of records
	probes atomic.Int64 // writes of a segment header: a new segment, or a recovery probe
}

type faultyFile struct {
	wal.SegmentFile
	d *faultyDisk
}

func (f faultyFile) Write(p []byte) (int, error) {
	if len(p) == wal.SegmentHeaderSize {
		f.d.probes.Add(1)
	} else {
		f.d.writes.Add(1)
	}
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

// A failed disk write makes the channel refuse puts, fast and without
// touching the disk, and say so in Health and Unhealthy; takes go on, and
// their commits succeed, so a sink never delivers the same batch twice
// because of the disk. Once the disk works again the channel recovers by
// itself, without a restart: puts are accepted, Health is nil again, and
// the takes made during the failure are in the log, so even a full replay
// without the checkpoint gives back exactly the events not taken.
func TestDiskWriteFailureRecovers(t *testing.T) {
	d := newDirs(t)
	c, reg := build(t, d, map[string]string{"checkpointOnClose": "false"})
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
	defer stop(t, c)
	if m := metricsOf(reg); m["Closed"] != "0" || m["Unhealthy"] != "0" || c.Health() != nil {
		t.Fatalf("running channel: Closed %s Unhealthy %s Health %v", m["Closed"], m["Unhealthy"], c.Health())
	}
	putN(t, c, "ok", 20, 10)

	disk.fail.Store(true)
	disk.probes.Store(0)
	err := testutil.PutCommit(c, testutil.Events("lost", 5))
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("put on a failing disk: %v, want EIO that pushes back as a full channel", err)
	}
	writes := disk.writes.Load()
	for range 3 {
		t0 := time.Now()
		err := testutil.PutCommit(c, testutil.Events("refused", 5))
		if !errors.Is(err, flow.ErrChannelFull) || !strings.Contains(err.Error(), "cannot be written") {
			t.Fatalf("put after the failure: %v", err)
		}
		if d := time.Since(t0); d > time.Second { // no disk write, no keep-alive wait
			t.Fatalf("put after the failure took %v, want it to fail fast", d)
		}
	}
	if n := disk.writes.Load(); n != writes {
		t.Fatalf("%d writes by puts refused after the failure", n-writes)
	}
	if err := c.Health(); err == nil || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("Health during the failure: %v", err)
	}
	// Takes go on, and their commit is not refused: the sink delivered the
	// events and must not deliver them again.
	for i := range 2 {
		got, err := testutil.TakeCommit(c, 5, time.Second)
		if err != nil || strings.Join(testutil.Bodies(got), ",") != strings.Join(bodies("ok", 5*i, 5*i+5), ",") {
			t.Fatalf("take %d during the failure: %q, %v", i, testutil.Bodies(got), err)
		}
	}
	m = metricsOf(reg)
	if m["Unhealthy"] != "1" || m["EventPutErrorCount"] != "4" || m["EventTakeErrorCount"] != "0" {
		t.Fatalf("during the failure: Unhealthy %s EventPutErrorCount %s EventTakeErrorCount %s",
			m["Unhealthy"], m["EventPutErrorCount"], m["EventTakeErrorCount"])
	}

	// The watcher probes the broken disk (a new segment's header) and
	// fails; the channel stays refusing.
	testutil.WaitFor(t, 10*time.Second, "a probe of the broken disk", func() bool { return disk.probes.Load() > 0 })
	if c.Health() == nil {
		t.Fatal("healthy after a failed probe")
	}
	disk.fail.Store(false) // the disk heals: the channel finds out by itself
	testutil.WaitFor(t, 10*time.Second, "puts accepted after the disk healed", func() bool {
		return testutil.PutCommit(c, testutil.Events("back", 0)) == nil && c.Health() == nil
	})
	putN(t, c, "again", 3, 3)
	if m := metricsOf(reg); m["Unhealthy"] != "0" || m["LogFailureCount"] != "1" {
		t.Fatalf("after recovery: Unhealthy %s LogFailureCount %s", m["Unhealthy"], m["LogFailureCount"])
	}
	if got, err := testutil.TakeCommit(c, 2, time.Second); err != nil || len(got) != 2 {
		t.Fatalf("take after recovery: %d, %v", len(got), err)
	}
	want := append(bodies("ok", 12, 20), bodies("again", 0, 3)...)

	// A restart, and a full replay without the checkpoint, give back
	// exactly what was not taken: the takes made during the failure were
	// written once the log was back.
	stop(t, c)
	os.Remove(filepath.Join(d.ck, wal.CheckpointFile))
	c2 := start(t, d, nil)
	defer stop(t, c2)
	if c2.lostEvents.Load() != 0 {
		t.Fatalf("RecoveryLostEventCount = %d after the failure", c2.lostEvents.Load())
	}
	wantAll(t, c2, want)
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

// A take commit waits for the fdatasync of the take record takesInFlight
// commits before it, not its own: while every sync is held, the first
// takesInFlight commits return, the next one waits until the first
// record's sync completes.
func TestTakeCommitWaitsForAnEarlierTakeRecord(t *testing.T) {
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
	for i := range takesInFlight + 1 {
		if err := testutil.PutCommit(c, []event.Event{{Body: []byte{byte('a' + i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan struct{})
	gate.Store(&held)
	release := func() {
		if gate.Swap(nil) != nil {
			close(held)
		}
	}
	defer release()
	for i := range takesInFlight {
		done := make(chan error, 1)
		go func() {
			evs, err := testutil.TakeCommit(c, 1, time.Second)
			if err == nil && len(evs) != 1 {
				err = errors.New("took no event")
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("take commit %d: %v", i+1, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("take commit %d of %d waited for a record's fdatasync", i+1, takesInFlight)
		}
	}
	next := make(chan error, 1)
	go func() {
		_, err := testutil.TakeCommit(c, 1, time.Second)
		next <- err
	}()
	select {
	case err := <-next:
		t.Fatalf("take commit %d returned (%v) before the first one's record was durable", takesInFlight+1, err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-next; err != nil {
		t.Fatalf("take commit %d: %v", takesInFlight+1, err)
	}
}
