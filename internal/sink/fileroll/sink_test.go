package filerollsink

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newChannel(t *testing.T) flow.Channel {
	t.Helper()
	ch, err := memorychannel.New(flow.Env{Name: "c1", Type: "memory"},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "100000", "transactionCapacity": "1000"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop(context.Background()) })
	return ch
}

// TestSinkDeliversAcrossRolls runs the sink over a memory channel with a
// short roll interval: every event put is in the files, in order, each file
// ends with a whole line, and Stop closes the last file.
func TestSinkDeliversAcrossRolls(t *testing.T) {
	ctx := context.Background()
	ch := newChannel(t)
	dir := filepath.Join(t.TempDir(), "out")
	reg := metrics.NewRegistry("a1")
	p := config.FromMap("a1.sinks.k1.", map[string]string{
		"sink.directory":                dir,
		"sink.rollInterval":             "0.01",
		"sink.batchSize":                "50",
		"sink.pathManager.prefix":       "events-",
		"sink.pathManager.extension":    "log",
		"sink.serializer":               "text",
		"sink.serializer.appendNewline": "true",
	})
	s, err := New(flow.Env{Name: "k1", Type: "file_roll", Channel: ch, Metrics: reg}, p)
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	const rounds, per = 40, 120
	for r := range rounds {
		evs := testutil.Events("r"+string(rune('a'+r%26))+"-", per)
		for _, e := range evs {
			want.Write(e.Body)
			want.WriteByte('\n')
		}
		if err := testutil.PutCommit(ch, evs); err != nil {
			t.Fatal(err)
		}
		for ch.Len() > 0 {
			if _, err := s.Process(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	names := files(t, dir)
	for _, n := range names {
		if !strings.HasPrefix(n, "events-") || !strings.HasSuffix(n, ".log") {
			t.Fatalf("file name %q lacks prefix or extension", n)
		}
	}
	if got := readAll(t, dir); got != want.String() {
		t.Fatalf("files hold %d bytes, want %d; lost or reordered events", len(got), want.Len())
	}
	if open := openIn(t, dir); len(open) != 0 {
		t.Fatalf("files open after Stop: %v", open)
	}
	t.Logf("%d files", len(names))
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		props map[string]string
		err   string
	}{
		{"minimal", map[string]string{"sink.directory": dir}, ""},
		{"all keys", map[string]string{"sink.directory": dir, "sink.rollInterval": "0", "sink.serializer": "TEXT",
			"sink.serializer.appendNewline": "false", "sink.batchSize": "1000", "sink.pathManager": "rolltime",
			"sink.pathManager.prefix": "p", "sink.pathManager.extension": "txt", "sink.fsync": "true"}, ""},
		{"Flume class name serializer", map[string]string{"sink.directory": dir,
			"sink.serializer": "org.apache.flume.serialization.BodyTextEventSerializer$Builder"}, ""},
		{"missing directory", map[string]string{}, "a1.sinks.k1.sink.directory: missing required property"},
		{"avro_event", map[string]string{"sink.directory": dir, "sink.serializer": "avro_event",
			"sink.serializer.compressionCodec": "deflate", "sink.serializer.syncIntervalBytes": "100000"}, ""},
		{"avro codec", map[string]string{"sink.directory": dir, "sink.serializer": "avro_event",
			"sink.serializer.compressionCodec": "bzip2"}, `"bzip2" is not one of null, deflate, snappy, zstandard`},
		{"appendNewline is not an avro key", map[string]string{"sink.directory": dir, "sink.serializer": "AVRO_EVENT",
			"sink.serializer.appendNewline": "false"}, "sink.serializer.appendNewline: ignored: sluice does not read it"},
		{"header_and_text", map[string]string{"sink.directory": dir, "sink.serializer": "header_and_text"}, ""},
		{"unknown serializer", map[string]string{"sink.directory": dir, "sink.serializer": "json"}, `"json" is not a supported serializer`},
		{"negative roll", map[string]string{"sink.directory": dir, "sink.rollInterval": "-1"}, "sink.rollInterval: -1 is not a valid interval"},
		{"bad roll", map[string]string{"sink.directory": dir, "sink.rollInterval": "soon"}, `"soon" is not a number`},
		{"bad batch", map[string]string{"sink.directory": dir, "sink.batchSize": "0"}, "sink.batchSize: 0 is out of range"},
		{"bad path manager", map[string]string{"sink.directory": dir, "sink.pathManager": "hourly"}, `"hourly" is not one of DEFAULT, ROLLTIME`},
		{"batchSize without sink. prefix", map[string]string{"sink.directory": dir, "batchSize": "5"},
			"a1.sinks.k1.batchSize: ignored: sluice does not read it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := config.FromMap("a1.sinks.k1.", tt.props)
			if _, err := New(flow.Env{Name: "k1", Type: "file_roll"}, p); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			if tt.err == "" && p.Err() != nil || tt.err != "" && (p.Err() == nil || !strings.Contains(p.Err().Error(), tt.err)) {
				t.Errorf("problems %v, want %q", p.Err(), tt.err)
			}
		})
	}
}

// BenchmarkSink puts batches of 100 events of 256 bytes into a memory
// channel and lets the sink take and write them.
func BenchmarkSink(b *testing.B) {
	ctx := context.Background()
	ch, _ := memorychannel.New(flow.Env{Name: "c1", Type: "memory"},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "10000", "transactionCapacity": "100"}))
	if err := ch.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer ch.Stop(ctx)
	p := config.FromMap("a1.sinks.k1.", map[string]string{"sink.directory": b.TempDir(), "sink.rollInterval": "0"})
	s, _ := New(flow.Env{Name: "k1", Type: "file_roll", Channel: ch}, p)
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(ctx)
	evs := make([]event.Event, 100)
	for i := range evs {
		evs[i].Body = bytes.Repeat([]byte{'a' + byte(i%26)}, 256)
	}
	b.SetBytes(100 * 257)
	b.ReportAllocs()
	for b.Loop() {
		if err := testutil.PutCommit(ch, evs); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Process(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}
