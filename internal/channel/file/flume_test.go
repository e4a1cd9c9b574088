package filechannel

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// flumeMeta is a checkpoint.meta as Flume writes it: one length-delimited
// Checkpoint message (version 3, writeOrderID, queueSize, queueHead).
func flumeMeta(queueSize int32) []byte {
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.Fixed32Type)
	m = protowire.AppendFixed32(m, 3)
	m = protowire.AppendTag(m, 2, protowire.Fixed64Type)
	m = protowire.AppendFixed64(m, 1234)
	m = protowire.AppendTag(m, 3, protowire.Fixed32Type)
	m = protowire.AppendFixed32(m, uint32(queueSize))
	m = protowire.AppendTag(m, 4, protowire.Fixed32Type)
	m = protowire.AppendFixed32(m, 17)
	return append(protowire.AppendVarint(nil, uint64(len(m))), m...)
}

// writeFlume lays out Flume's file channel files in d.
func writeFlume(t *testing.T, d dirs, meta []byte, inflightTakes []byte) {
	t.Helper()
	for _, dir := range []string{d.ck, d.data} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string][]byte{
		filepath.Join(d.ck, "checkpoint"):    bytes.Repeat([]byte{1}, 4096),
		filepath.Join(d.ck, "inflightputs"):  nil,
		filepath.Join(d.ck, "inflighttakes"): inflightTakes,
		filepath.Join(d.data, "log-1"):       bytes.Repeat([]byte{2}, 4096),
		filepath.Join(d.data, "log-1.meta"):  {9},
	}
	if meta != nil {
		files[filepath.Join(d.ck, "checkpoint.meta")] = meta
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A Flume config run as it is points the file channel at Flume's own
// channel directories. With events left in them it must not start (they
// would be stranded without a word) and must not touch them; a drained one
// is started beside, with one warning.
func TestFlumeChannelLeftBehind(t *testing.T) {
	for _, tc := range []struct {
		name     string
		meta     []byte
		inflight []byte
		refused  string // "" when it starts
	}{
		{"events at the last checkpoint", flumeMeta(5), nil, "with 5 events at its last checkpoint"},
		{"transactions open", flumeMeta(0), make([]byte, 40), "inflighttakes list transactions that were open"},
		{"no checkpoint.meta", nil, nil, "there is no checkpoint.meta to count its events"},
		{"damaged checkpoint.meta", []byte{0x05, 0x0d}, nil, "cannot be read"},
		{"drained", flumeMeta(0), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirs(t)
			writeFlume(t, d, tc.meta, tc.inflight)
			logs := &testutil.LogBuffer{}
			p := config.FromMap("a1.channels.c1.", map[string]string{"checkpointDir": d.ck, "dataDirs": d.data, "minimumRequiredSpace": "0"})
			ch, err := New(flow.Env{Agent: "a1", Name: "c1", Type: "file", Metrics: metrics.NewRegistry("a1"), Logger: slog.New(slog.NewTextHandler(logs, nil))}, p)
			if err != nil {
				t.Fatal(err)
			}
			err = ch.Start(context.Background())
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "drain them with Flume first") {
					t.Fatalf("Start: %v, want it refused with %q", err, tc.refused)
				}
				if b, _ := os.ReadFile(filepath.Join(d.ck, "checkpoint")); !bytes.Equal(b, bytes.Repeat([]byte{1}, 4096)) {
					t.Fatal("Flume's checkpoint was overwritten")
				}
				if wals, _ := filepath.Glob(filepath.Join(d.data, "*.wal")); len(wals) > 0 {
					t.Fatalf("segments written beside Flume's logs: %v", wals)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start over a drained Flume channel: %v", err)
			}
			defer ch.Stop(context.Background())
			if n := logs.Count("hold a drained Flume file channel"); n != 1 {
				t.Fatalf("%d warnings about Flume's files, want 1:\n%s", n, logs.String())
			}
			if _, err := os.Stat(filepath.Join(d.data, "log-1")); err != nil {
				t.Fatalf("Flume's log was removed: %v", err)
			}
		})
	}
	// sluice's own checkpoint is named "checkpoint" too: a restart is not
	// taken for Flume's files.
	d := newDirs(t)
	c := start(t, d, nil)
	putN(t, c, "e", 10, 10)
	stop(t, c)
	c = start(t, d, nil)
	stop(t, c)
}

// FuzzFlumeQueueSize: a damaged checkpoint.meta left by Flume is refused
// with an error, never a panic or a huge allocation.
func FuzzFlumeQueueSize(f *testing.F) {
	f.Add(flumeMeta(5))
	f.Add(flumeMeta(0))
	f.Add([]byte{0x05, 0x0d})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "checkpoint.meta")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if n, err := flumeQueueSize(path); err == nil && n < 0 {
			t.Fatalf("negative queue size %d without an error", n)
		}
	})
}
