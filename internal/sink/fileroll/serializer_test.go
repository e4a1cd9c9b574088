package filerollsink

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hamba/avro/v2/ocf"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
)

// avroEvent is one decoded record of an avro_event file.
type avroEvent struct {
	Headers map[string]string `avro:"headers"`
	Body    []byte            `avro:"body"`
}

func TestHeaderAndText(t *testing.T) {
	w, _ := newTestWriter(t, Options{Serializer: HeaderAndText, AppendNewline: true})
	w.Write(context.Background(), []event.Event{
		{Headers: event.Headers{{Key: "b", Value: "2"}, {Key: "a", Value: "1"}}, Body: []byte("one")},
		{Body: []byte("two")},
	})
	w.Stop(context.Background())
	if got, want := readAll(t, w.opt.Directory), "{a=1, b=2} one\n{} two\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestAvroEventAcrossRolls writes avro_event files with each codec and
// rolls between batches; every file must be a complete Avro container that
// decodes to its events, and together they hold every event in order.
func TestAvroEventAcrossRolls(t *testing.T) {
	for _, codec := range []string{"", "deflate", "snappy", "zstandard"} {
		t.Run(codec, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			c := metrics.NewSinkCounters("k1", "file_roll")
			w := NewWriter(Options{Directory: dir, Serializer: AvroEvent, AvroCodec: codec, AvroSyncBytes: 1024}, c, nil)
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			var want []event.Event
			for b := range 6 {
				evs := make([]event.Event, 50)
				for i := range evs {
					n := b*50 + i
					evs[i] = event.Event{Body: []byte("body-" + strconv.Itoa(n))}
					if n%3 != 0 {
						evs[i].Headers = event.Headers{{Key: "n", Value: strconv.Itoa(n)}}
					}
				}
				if err := w.Write(context.Background(), evs); err != nil {
					t.Fatal(err)
				}
				want = append(want, evs...)
				if b%2 == 1 { // roll after every second batch
					w.mu.Lock()
					err := w.closeFile()
					w.mu.Unlock()
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			// Before Stop (the last file is open), every rolled file decodes.
			w.Stop(context.Background())
			names := files(t, dir)
			if len(names) != 3 {
				t.Fatalf("files %v, want 3", names)
			}
			var got []avroEvent
			for _, n := range names {
				f, err := os.Open(filepath.Join(dir, n))
				if err != nil {
					t.Fatal(err)
				}
				dec, err := ocf.NewDecoder(f)
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				if c := string(dec.Metadata()["avro.codec"]); c != codec && !(codec == "" && c == "null") {
					t.Fatalf("%s: codec %q", n, c)
				}
				for dec.HasNext() {
					var r avroEvent
					if err := dec.Decode(&r); err != nil {
						t.Fatal(err)
					}
					got = append(got, r)
				}
				if err := dec.Error(); err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				f.Close()
			}
			if len(got) != len(want) {
				t.Fatalf("decoded %d events, want %d", len(got), len(want))
			}
			for i := range want {
				if string(got[i].Body) != string(want[i].Body) || len(got[i].Headers) != len(want[i].Headers) ||
					got[i].Headers["n"] != want[i].Headers.Value("n") {
					t.Fatalf("event %d = %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestAvroEventFileReadableMidRoll checks that each batch ends a block that
// is on disk: a reader sees every committed event before the file rolls.
func TestAvroEventFileReadableMidRoll(t *testing.T) {
	w, _ := newTestWriter(t, Options{Serializer: AvroEvent, AvroCodec: "null", AvroSyncBytes: DefaultAvroSyncBytes, RollInterval: time.Hour})
	for b := range 3 {
		if err := w.Write(context.Background(), []event.Event{{Body: []byte("e" + strconv.Itoa(b))}}); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		path := w.path
		w.mu.Unlock()
		f, _ := os.Open(path)
		dec, err := ocf.NewDecoder(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for dec.HasNext() {
			var r avroEvent
			if err := dec.Decode(&r); err != nil {
				t.Fatal(err)
			}
			n++
		}
		f.Close()
		if n != b+1 {
			t.Fatalf("after batch %d a reader sees %d events", b, n)
		}
	}
}
