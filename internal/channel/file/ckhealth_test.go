package filechannel

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestFailingCheckpointsReported: checkpoints that keep failing (here the
// checkpoint directory replaced by a file) leave puts and takes working, but
// the log can no longer be trimmed, so the data disk fills and a restart
// replays more. After ckFailsUnhealthy failures in a row /healthz names the
// channel with the reason; the first success clears it.
func TestFailingCheckpointsReported(t *testing.T) {
	d := newDirs(t)
	c := start(t, d, map[string]string{"checkpointInterval": "100"})
	defer stop(t, c)
	if err := testutil.PutCommit(c, testutil.Events("a", 10)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(d.ck); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.ck, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var herr error
	for herr = c.Health(); herr == nil; herr = c.Health() {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints failing for 10 s, Health still nil (%d write errors counted)", c.ckErrors.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if msg := herr.Error(); !strings.Contains(msg, "checkpoint") || !strings.Contains(msg, d.ck) {
		t.Errorf("Health = %q, want the failing checkpoints and their directory", msg)
	}
	// Puts and takes still work meanwhile.
	if err := testutil.PutCommit(c, testutil.Events("b", 10)); err != nil {
		t.Fatalf("put while checkpoints fail: %v", err)
	}
	if got := testutil.TakeAll(t, c, 20, 20, 5*time.Second); len(got) != 20 {
		t.Fatalf("took %d of 20 while checkpoints fail", len(got))
	}
	if err := os.Remove(d.ck); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d.ck, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for c.Health() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint directory back for 10 s, Health still %v", c.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
