package spooldirsource

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/hamba/avro/v2/ocf"
)

// flumeMetaSchema is Flume's TransferStateFileMeta.avsc.
const flumeMetaSchema = `{"namespace": "org.apache.flume.serialization", "type": "record", "name": "TransferStateFileMeta",
 "fields": [{"name": "offset", "type": "long"}]}`

// writeFlumeMeta writes trackerDir/.flumespool-main.meta as Flume's
// DurablePositionTracker does: an Avro container file with the file's path
// in its "file" metadata and one record per committed position.
func writeFlumeMeta(t *testing.T, trackerDir, file string, offsets ...int64) {
	t.Helper()
	if err := os.MkdirAll(trackerDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(trackerDir, flumeMetaName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc, err := ocf.NewEncoderWithSchema(avro.MustParse(flumeMetaSchema), f, ocf.WithMetadata(map[string][]byte{"file": []byte(file)}))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offsets {
		if err := enc.Encode(struct {
			Offset int64 `avro:"offset"`
		}{o}); err != nil {
			t.Fatal(err)
		}
		if err := enc.Flush(); err != nil { // Flume syncs after each position
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
}

// A host switched from Flume in the middle of a file: sluice continues it
// after Flume's last committed line (no line twice), and uses Flume's
// progress once.
func TestContinuesFlumeProgress(t *testing.T) {
	fx := newFixture(t, nil)
	path := fx.write("a.log", "line0\nline1\nline2\nline3\n", time.Time{})
	tracker := filepath.Join(fx.dir, ".flumespool")
	writeFlumeMeta(t, tracker, "/elsewhere/relative/to/flume/a.log", 0, 6, 12)
	fx.start()
	fx.expect("line2", "line3")
	if !exists(filepath.Join(tracker, flumeMetaImported)) || exists(filepath.Join(tracker, flumeMetaName)) {
		t.Fatal("Flume's progress file was not set aside after use")
	}
	if !exists(path + ".COMPLETED") {
		t.Fatal("the file was not marked done")
	}
}

// Flume's progress that does not fit the file (beyond its end) or cannot be
// read is set aside with a warning, and the file is read from its start.
func TestFlumeProgressNotUsable(t *testing.T) {
	for name, write := range map[string]func(t *testing.T, tracker string){
		"beyond the end": func(t *testing.T, tracker string) { writeFlumeMeta(t, tracker, "a.log", 0, 999) },
		"damaged": func(t *testing.T, tracker string) {
			if err := os.MkdirAll(tracker, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tracker, flumeMetaName), []byte("Obj\x01garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, nil)
			fx.write("a.log", "line0\nline1\n", time.Time{})
			tracker := filepath.Join(fx.dir, ".flumespool")
			write(t, tracker)
			fx.start()
			fx.expect("line0", "line1")
			if fx.logs.Count("level=WARN") != 1 {
				t.Fatalf("want one warning:\n%s", fx.logs.String())
			}
		})
	}
}

// FuzzFlumeMeta: a damaged .flumespool-main.meta is refused with an error,
// never a panic.
func FuzzFlumeMeta(f *testing.F) {
	var buf bytes.Buffer
	enc, _ := ocf.NewEncoderWithSchema(avro.MustParse(flumeMetaSchema), &buf, ocf.WithMetadata(map[string][]byte{"file": []byte("/s/a.log")}))
	_ = enc.Encode(struct {
		Offset int64 `avro:"offset"`
	}{12})
	_ = enc.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("Obj\x01garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, off, err := readFlumeMeta(bytes.NewReader(b))
		if err == nil && off < 0 {
			t.Logf("negative offset %d accepted", off)
		}
	})
}
