package hdfssink

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// newTestSink builds an hdfs sink from props (keys without the a1.sinks.k1.
// prefix); stagingDir defaults into the test's temp dir.
func newTestSink(t *testing.T, env flow.Env, props map[string]string) *Sink {
	t.Helper()
	return newBenchSink(t, env, props)
}

func newBenchSink(t testing.TB, env flow.Env, props map[string]string) *Sink {
	t.Helper()
	if _, ok := props["hdfs.stagingDir"]; !ok {
		props["hdfs.stagingDir"] = filepath.Join(t.TempDir(), "staging")
	}
	env.Agent, env.Name, env.Type = "a1", "k1", "hdfs"
	p := config.FromMap("a1.sinks.k1.", props)
	s, err := New(env, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	return s.(*Sink)
}

func startWriter(t testing.TB, props map[string]string) *Writer {
	t.Helper()
	s := newBenchSink(t, flow.Env{}, props)
	if err := s.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s.w
}

func events(from, n int, ts int64) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = event.Event{Headers: event.HeadersOf(map[string]string{"timestamp": strconv.FormatInt(ts+int64(from+i), 10), "host": "web1"}),
			Body: []byte("event-" + strconv.Itoa(from+i))}
	}
	return out
}

// files returns the regular files under dir (relative, sorted).
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error { // skips what it cannot read
		if err == nil && !d.IsDir() {
			r, _ := filepath.Rel(dir, p)
			out = append(out, r)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestSequenceFileBytes checks the exact bytes of a small uncompressed
// Writable SequenceFile against Hadoop's format, written out by hand.
func TestSequenceFileBytes(t *testing.T) {
	dir := t.TempDir()
	w := startWriter(t, map[string]string{"hdfs.path": dir, "hdfs.rollInterval": "0"})
	ts := int64(1339502074000)
	if err := w.Write(context.Background(), []event.Event{{Headers: event.HeadersOf(map[string]string{"timestamp": strconv.FormatInt(ts, 10)}), Body: []byte("hello")}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	names := files(t, dir)
	if len(names) != 1 || !regexp.MustCompile(`^FlumeData\.\d{13}$`).MatchString(names[0]) {
		t.Fatalf("files %v", names)
	}
	got, _ := os.ReadFile(filepath.Join(dir, names[0]))
	var want bytes.Buffer
	want.WriteString("SEQ\x06")
	want.WriteString("\x21org.apache.hadoop.io.LongWritable")  // Text: vint 33, bytes
	want.WriteString("\x22org.apache.hadoop.io.BytesWritable") // vint 34
	want.WriteString("\x00\x00")                               // not compressed, not block-compressed
	want.WriteString("\x00\x00\x00\x00")                       // no metadata
	sync := got[want.Len() : want.Len()+16]                    // the file's random marker
	want.Write(sync)
	want.Write([]byte{0, 0, 0, 17, 0, 0, 0, 8}) // record length 8+4+5, key length 8
	binary.Write(&want, binary.BigEndian, ts)   // LongWritable
	want.Write([]byte{0, 0, 0, 5})              // BytesWritable length
	want.WriteString("hello")
	want.Write([]byte{0xff, 0xff, 0xff, 0xff}) // sync escape at the end of the batch
	want.Write(sync)
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("file bytes\n got %x\nwant %x", got, want.Bytes())
	}
}

// TestSequenceFileFormats writes SequenceFiles in both write formats with
// every codec and reads them back with the independent reader.
func TestSequenceFileFormats(t *testing.T) {
	for _, wf := range []string{"Writable", "Text"} {
		for _, codec := range []string{"", "gzip", "deflate", "bzip2", "snappy", "lz4", "zstd"} {
			t.Run(wf+"/"+codec, func(t *testing.T) {
				dir := t.TempDir()
				props := map[string]string{"hdfs.path": dir, "hdfs.rollInterval": "0", "hdfs.rollCount": "0", "hdfs.rollSize": "0", "hdfs.writeFormat": wf}
				if codec != "" {
					props["hdfs.codeC"] = codec
				}
				w := startWriter(t, props)
				var want []event.Event
				for b := range 3 {
					evs := events(b*40, 40, 1700000000000)
					evs[3].Headers = nil // no timestamp: the key is the current time
					if err := w.Write(context.Background(), evs); err != nil {
						t.Fatal(err)
					}
					want = append(want, evs...)
				}
				before := time.Now().UnixMilli()
				if err := w.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				names := files(t, dir)
				if len(names) != 1 {
					t.Fatalf("files %v", names)
				}
				if c, _ := codecByName(codec); c != nil && !strings.HasSuffix(names[0], c.ext) {
					t.Fatalf("%s lacks the codec's extension %s", names[0], c.ext)
				}
				data, _ := os.ReadFile(filepath.Join(dir, names[0]))
				f, err := readSeqFile(data)
				if err != nil {
					t.Fatal(err)
				}
				wantVal := "org.apache.hadoop.io.BytesWritable"
				if wf == "Text" {
					wantVal = "org.apache.hadoop.io.Text"
				}
				if f.valueClass != wantVal || f.compressed != (codec != "") || f.block != (codec != "") {
					t.Fatalf("header %+v", f)
				}
				if f.syncs != 3 {
					t.Fatalf("%d sync entries, want one per batch (3)", f.syncs)
				}
				if len(f.records) != len(want) {
					t.Fatalf("%d records, want %d", len(f.records), len(want))
				}
				for i, r := range f.records {
					if string(r.value) != string(want[i].Body) {
						t.Fatalf("record %d = %q, want %q", i, r.value, want[i].Body)
					}
					if ts, ok := want[i].Headers.Get("timestamp"); ok {
						if strconv.FormatInt(r.key, 10) != ts {
							t.Fatalf("record %d key %d, want %s", i, r.key, ts)
						}
					} else if r.key < before-60000 || r.key > before {
						t.Fatalf("record %d without timestamp has key %d, not the time of writing", i, r.key)
					}
				}
			})
		}
	}
}

// TestSequenceFileSyncInterval writes one large uncompressed batch: a sync
// entry must appear every 100 KiB, as Hadoop's writer does.
func TestSequenceFileSyncInterval(t *testing.T) {
	dir := t.TempDir()
	w := startWriter(t, map[string]string{"hdfs.path": dir, "hdfs.rollInterval": "0", "hdfs.rollCount": "0", "hdfs.rollSize": "0", "hdfs.batchSize": "1000"})
	evs := make([]event.Event, 1000)
	for i := range evs {
		evs[i] = event.Event{Body: bytes.Repeat([]byte{'x'}, 1000)}
	}
	if err := w.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	w.Stop(context.Background())
	names := files(t, dir)
	data, _ := os.ReadFile(filepath.Join(dir, names[0]))
	f, err := readSeqFile(data)
	if err != nil {
		t.Fatal(err)
	}
	// ~1,020,000 bytes of records: a sync entry before the record that
	// crosses each 100 KiB past the last one (9), then one at the batch end.
	if f.syncs != 10 || len(f.records) != 1000 {
		t.Fatalf("%d syncs, %d records", f.syncs, len(f.records))
	}
}

// TestCompressedStreamSystemTools checks that gzip, bzip2 (and zstd, when
// installed) CompressedStream files of several batches read back whole
// with the system's own tools.
func TestCompressedStreamSystemTools(t *testing.T) {
	for _, tc := range []struct{ codec, tool string }{{"gzip", "gzip"}, {"bzip2", "bzip2"}, {"zstd", "zstd"}} {
		t.Run(tc.codec, func(t *testing.T) {
			bin, err := exec.LookPath(tc.tool)
			if err != nil {
				if tc.tool == "zstd" {
					t.Skip("zstd is not installed")
				}
				t.Fatalf("%s is not installed: %v", tc.tool, err)
			}
			dir := t.TempDir()
			w := startWriter(t, map[string]string{"hdfs.path": dir, "hdfs.fileType": "CompressedStream", "hdfs.codeC": tc.codec,
				"hdfs.rollInterval": "0", "hdfs.rollCount": "0", "hdfs.rollSize": "0"})
			var want strings.Builder
			for b := range 4 {
				evs := events(b*25, 25, 1)
				for _, e := range evs {
					want.Write(e.Body)
					want.WriteByte('\n')
				}
				if err := w.Write(context.Background(), evs); err != nil {
					t.Fatal(err)
				}
			}
			w.Stop(context.Background())
			names := files(t, dir)
			if len(names) != 1 {
				t.Fatalf("files %v", names)
			}
			out, err := exec.Command(bin, "-dc", filepath.Join(dir, names[0])).Output()
			if err != nil {
				t.Fatalf("%s -dc: %v", tc.tool, err)
			}
			if string(out) != want.String() {
				t.Fatalf("%s -dc gives %d bytes, want %d", tc.tool, len(out), want.Len())
			}
		})
	}
}

// TestNamesEscapesAndRolls checks Flume's naming: escapes in hdfs.path and
// the prefix, the suffix, the in-use name while open, rollCount, and that
// nothing is left in use after Stop.
func TestNamesEscapesAndRolls(t *testing.T) {
	dir := t.TempDir()
	w := startWriter(t, map[string]string{
		"hdfs.path": dir + "/%{host}/%Y-%m-%d", "hdfs.filePrefix": "ev-%H", "hdfs.fileSuffix": ".log",
		"hdfs.fileType": "DataStream", "hdfs.inUsePrefix": "_", "hdfs.rollCount": "10", "hdfs.rollInterval": "0",
		"hdfs.rollSize": "0", "hdfs.timeZone": "UTC"})
	ts := time.Date(2012, 6, 12, 11, 54, 34, 0, time.UTC).UnixMilli()
	if err := w.Write(context.Background(), events(0, 25, ts)); err != nil {
		t.Fatal(err)
	}
	// 25 events, rollCount 10: two files done, one open. Finishing a
	// rolled file is asynchronous: until it is done it is in use too.
	re := regexp.MustCompile(`^web1/2012-06-12/(_?)ev-11\.\d{13}\.log(\.tmp)?$`)
	var got []string
	open, done := 0, 0
	testutil.WaitFor(t, 5*time.Second, "two finished files", func() bool {
		got = files(t, dir)
		open, done = 0, 0
		for _, n := range got {
			m := re.FindStringSubmatch(n)
			if m == nil {
				t.Fatalf("unexpected file %s", n)
			}
			switch {
			case m[1] == "_" && m[2] == ".tmp":
				open++
			case m[1] == "" && m[2] == "":
				done++
			}
		}
		return done == 2
	})
	if open != 1 {
		t.Fatalf("files %v: want one in use", got)
	}
	w.Stop(context.Background())
	var all []string
	for _, n := range files(t, dir) {
		if strings.Contains(n, "/_") || strings.HasSuffix(n, ".tmp") {
			t.Fatalf("%s left in use after Stop", n)
		}
		b, _ := os.ReadFile(filepath.Join(dir, n))
		all = append(all, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	if len(all) != 25 || all[0] != "event-0" || all[24] != "event-24" {
		t.Fatalf("contents %v", all)
	}
}

// TestRollInterval checks that a file is closed and renamed by the timer.
func TestRollInterval(t *testing.T) {
	dir := t.TempDir()
	w := startWriter(t, map[string]string{"hdfs.path": dir, "hdfs.rollInterval": "0.1", "hdfs.fileType": "DataStream"})
	if err := w.Write(context.Background(), events(0, 3, 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n := files(t, dir)
		if len(n) == 1 && !strings.HasSuffix(n[0], ".tmp") {
			w.Stop(context.Background())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("files %v after 5 s with rollInterval 0.1", files(t, dir))
}

// TestRecoveryFinishesTornFiles simulates a crash: a writer dies with an
// open file whose last batch was torn; the next start cuts the file after
// its last complete batch, renames it, and the independent reader finds
// exactly the complete batches.
func TestRecoveryFinishesTornFiles(t *testing.T) {
	for _, tc := range []struct{ name, fileType, codec string }{
		{"SequenceFile", "SequenceFile", ""}, {"SequenceFile-gzip", "SequenceFile", "gzip"},
		{"DataStream", "DataStream", ""}, {"CompressedStream-bzip2", "CompressedStream", "bzip2"},
		{"CompressedStream-zstd", "CompressedStream", "zstd"}, {"CompressedStream-snappy", "CompressedStream", "snappy"},
		{"CompressedStream-lz4", "CompressedStream", "lz4"}, {"CompressedStream-deflate", "CompressedStream", "deflate"},
		{"CompressedStream-gzip", "CompressedStream", "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, staging := t.TempDir(), filepath.Join(t.TempDir(), "staging")
			props := map[string]string{"hdfs.path": dir, "hdfs.fileType": tc.fileType, "hdfs.rollInterval": "0",
				"hdfs.rollCount": "0", "hdfs.rollSize": "0", "hdfs.stagingDir": staging}
			if tc.codec != "" {
				props["hdfs.codeC"] = tc.codec
			}
			w := startWriter(t, props)
			for b := range 2 {
				if err := w.Write(context.Background(), events(b*10, 10, 1)); err != nil {
					t.Fatal(err)
				}
			}
			// "Crash": the process is gone, its lock with it, and the
			// third batch was half written.
			w.roller.Stop(context.Background())
			w.fin.drain(context.Background())
			var inUse string
			for _, b := range w.buckets {
				inUse = b.rec.InUse
				data, _ := b.enc.endBatch()
				_ = data
				third := events(20, 10, 1)
				for i := range third {
					if err := b.enc.add(&third[i], 1); err != nil {
						t.Fatal(err)
					}
				}
				torn, _ := b.enc.endBatch()
				b.f.Write(torn[:len(torn)/2])
				b.f.Close()
			}
			w.j.close()
			if !strings.HasSuffix(inUse, ".tmp") {
				t.Fatalf("in-use file %q", inUse)
			}

			props2 := map[string]string{}
			for k, v := range props {
				props2[k] = v
			}
			w2 := startWriter(t, props2)
			w2.Stop(context.Background())
			names := files(t, dir)
			if len(names) != 1 || strings.HasSuffix(names[0], ".tmp") {
				t.Fatalf("files after recovery %v", names)
			}
			if left := files(t, staging+"/open"); len(left) != 0 {
				t.Fatalf("journal still holds %v", left)
			}
			data, _ := os.ReadFile(filepath.Join(dir, names[0]))
			var bodies []string
			switch tc.fileType {
			case "SequenceFile":
				f, err := readSeqFile(data)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range f.records {
					bodies = append(bodies, string(r.value))
				}
			case "CompressedStream":
				c, _ := codecByName(tc.codec)
				out, err := decompressStream(c.class, data)
				if err != nil {
					t.Fatal(err)
				}
				bodies = strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			default:
				bodies = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			}
			var want []string
			for i := range 20 {
				want = append(want, "event-"+strconv.Itoa(i))
			}
			if tc.fileType == "DataStream" && len(bodies) > 20 && len(bodies) < 30 {
				// Text has no batch marks: the cut is after the last whole
				// line, so whole events of the torn batch stay (they come
				// again: duplicates, never a partial event).
				for i := 20; i < len(bodies); i++ {
					want = append(want, "event-"+strconv.Itoa(i))
				}
			}
			if !slices.Equal(bodies, want) {
				t.Fatalf("recovered %d events %v, want the 20 of the complete batches", len(bodies), bodies)
			}
		})
	}
}

// decompressStream reads a whole CompressedStream file of concatenated
// units with the test reader's decoders.
func decompressStream(class string, data []byte) ([]byte, error) {
	switch class {
	case "org.apache.hadoop.io.compress.DefaultCodec":
		// zlib streams back to back: the standard reader stops after one
		// and, reading through an io.ByteReader, consumes exactly it.
		var out []byte
		for len(data) > 0 {
			br := bytes.NewReader(data)
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
			data = data[len(data)-br.Len():]
		}
		return out, nil
	}
	return decompress(class, data)
}

// TestSinkSuite runs the sink contract against a local directory that
// refuses by being replaced with a file (sinktest.DirGone): no file can be
// created in it, nor a closed one renamed to its final name. A write to a
// local file returns at once, so nothing can hold a delivery unanswered.
func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		dir := filepath.Join(t.TempDir(), "out")
		s := newTestSink(t, env, map[string]string{"hdfs.path": dir, "hdfs.fileType": "DataStream", "hdfs.rollInterval": "0.05",
			"hdfs.batchSize": "100", "hdfs.rollCount": "0", "hdfs.rollSize": "0"})
		refuse, accept := sinktest.DirGone(t, dir)
		return s, sinktest.Downstream{Refuse: refuse, Accept: accept, Note: "a write to a local file returns at once",
			Delivered: func() []string {
				var bodies []string
				for _, n := range files(t, dir) {
					b, _ := os.ReadFile(filepath.Join(dir, n))
					if len(b) > 0 {
						bodies = append(bodies, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
					}
				}
				return bodies
			}}
	})
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{}, "hdfs.path: missing required property"},
		{map[string]string{"hdfs.path": "/x", "hdfs.fileType": "DataStream", "hdfs.codeC": "gzip"}, "does not compress"},
		{map[string]string{"hdfs.path": "/x", "hdfs.fileType": "CompressedStream"}, "needs a codec"},
		{map[string]string{"hdfs.path": "/x", "hdfs.codeC": "lzo"}, "hadoop-lzo"},
		{map[string]string{"hdfs.path": "/x/%Q"}, "unknown escape %Q"},
		{map[string]string{"hdfs.path": "ftp://h/x"}, "not supported"},
		{map[string]string{"hdfs.path": "/x", "hdfs.kerberosPrincipal": "flume@X"}, "hdfs.kerberosKeytab: hdfs.kerberosPrincipal is set but no keytab"},
		{map[string]string{"hdfs.path": "hdfs://nn/x", "hdfs.kerberosPrincipal": "flume@X", "hdfs.kerberosKeytab": "/k"}, "needs the namenode's principal: set dfs.namenode.kerberos.principal"},
		{map[string]string{"hdfs.path": "/x", "hdfs.kerberosPrincipal": "flume@X", "hdfs.kerberosKeytab": "/k", "hdfs.proxyUser": "alice"}, "hdfs.proxyUser: a proxy user over Kerberos needs Hadoop's real-user connection header"},
		{map[string]string{"hdfs.path": "/x", "hdfs.round": "true", "hdfs.roundUnit": "minute", "hdfs.roundValue": "61"}, "out of range"},
		{map[string]string{"hdfs.path": "/x", "hdfs.timeZone": "Mars/Olympus"}, "not a time zone"},
	} {
		p := config.FromMap("a1.sinks.k1.", tc.props)
		_, _ = New(flow.Env{Agent: "a1", Name: "k1"}, p) // the problems are recorded in p
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.props, err, tc.want)
		}
	}
}

// TestSerializerWithSequenceFile: a serializer set while hdfs.fileType is
// SequenceFile (the default; the user guide's avro_event examples set no
// fileType) is unused, as in Flume: one warning saying why and what to set,
// not "sluice does not read it" for each serializer.* key; with DataStream
// the same keys are read without a warning.
func TestSerializerWithSequenceFile(t *testing.T) {
	props := map[string]string{"hdfs.path": "/x", "serializer": "avro_event", "serializer.compressionCodec": "snappy"}
	p := config.FromMap("a1.sinks.k1.", props)
	_, _ = New(flow.Env{Agent: "a1", Name: "k1"}, p) // the problems are recorded in p
	p.Unused()
	ps := p.Problems().Sorted()
	if len(ps) != 1 || ps[0].Key != "a1.sinks.k1.serializer" || ps[0].Severity != config.Warning ||
		!strings.Contains(ps[0].Msg, "with serializer.compressionCodec: hdfs.fileType is SequenceFile (the default), which uses no serializer") {
		t.Fatalf("problems %v, want one warning about the SequenceFile", ps)
	}
	props["hdfs.fileType"] = "DataStream"
	p = config.FromMap("a1.sinks.k1.", props)
	_, _ = New(flow.Env{Agent: "a1", Name: "k1"}, p) // the problems are recorded in p
	p.Unused()
	if ps := p.Problems().Sorted(); len(ps) != 0 {
		t.Fatalf("DataStream: problems %v", ps)
	}
}

// TestHDFSWithoutNamenode writes to an hdfs:// path where no NameNode
// answers: batches still commit (they are durable in staging), the files
// wait in the journal with their data, and /healthz would tell once the
// grace period passed. (No NameNode can run here; see docs/components.md.)
func TestHDFSWithoutNamenode(t *testing.T) {
	staging := filepath.Join(t.TempDir(), "staging")
	port := testutil.FreePort(t)
	w := startWriter(t, map[string]string{"hdfs.path": fmt.Sprintf("hdfs://127.0.0.1:%d/flume/%%{host}", port), "hdfs.fileType": "DataStream",
		"hdfs.rollCount": "5", "hdfs.stagingDir": staging})
	if got := w.store.String(); got != fmt.Sprintf("hdfs://127.0.0.1:%d", port) {
		t.Fatalf("store %q", got)
	}
	if err := w.Write(context.Background(), events(0, 12, 1)); err != nil {
		t.Fatalf("a batch did not commit with the NameNode away: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	w.Stop(ctx)
	recs := files(t, filepath.Join(staging, "open"))
	if len(recs) != 3 {
		t.Fatalf("journal %v, want the 3 files (5+5+2 events)", recs)
	}
	var all []string
	for _, n := range files(t, filepath.Join(staging, "data")) {
		b, _ := os.ReadFile(filepath.Join(staging, "data", n))
		all = append(all, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	if len(all) != 12 {
		t.Fatalf("staged %d events, want 12", len(all))
	}
	j, _ := openJournal(staging)
	defer j.close()
	rs, _ := j.list()
	if !strings.HasPrefix(rs[0].HDFSInUse, "/flume/web1/FlumeData.") || !strings.HasSuffix(rs[0].HDFSInUse, ".tmp") ||
		rs[0].Target != strings.TrimSuffix(rs[0].HDFSInUse, ".tmp") {
		t.Fatalf("record %+v", rs[0])
	}
}

func TestHDFSStoreSettings(t *testing.T) {
	loc, _ := parseLocation("hdfs://nn1/flume", "")
	st, err := newHDFSStore(loc, map[string]string{}, auth{})
	if err != nil || st.String() != "hdfs://nn1:8020" {
		t.Fatalf("%v %v", st, err)
	}
	loc, _ = parseLocation("/flume", "hdfs://nn2:9000")
	if loc.scheme != "hdfs" || loc.host != "nn2:9000" || loc.path != "/flume" {
		t.Fatalf("fs.defaultFS: %+v", loc)
	}
	if _, err := newHDFSStore(location{scheme: "hdfs"}, map[string]string{"hadoop.security.authentication": "kerberos", "fs.defaultFS": "hdfs://nn"}, auth{}); err == nil || !strings.Contains(err.Error(), "set hdfs.kerberosPrincipal and hdfs.kerberosKeytab") {
		t.Fatalf("kerberos without a principal: %v", err)
	}
	// Under simple authentication hdfs.proxyUser is the user the files are
	// written as.
	if st, err := newHDFSStore(loc, map[string]string{}, auth{proxyUser: "alice"}); err != nil || st.opts.User != "alice" {
		t.Fatalf("proxy user: %+v %v", st, err)
	}
}

// TestHeadersCannotLeaveThePath sends events whose headers hold "..": the
// files stay under hdfs.path.
func TestHeadersCannotLeaveThePath(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	w := startWriter(t, map[string]string{"hdfs.path": dir + "/%{host}", "hdfs.filePrefix": "%{p}", "hdfs.fileType": "DataStream"})
	evs := []event.Event{{Headers: event.HeadersOf(map[string]string{"host": "../../..", "p": "../x"}), Body: []byte("evil")}}
	if err := w.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	w.Stop(context.Background())
	for _, n := range files(t, root) {
		if !strings.HasPrefix(n, "a/b/") {
			t.Fatalf("file %s escaped %s", n, dir)
		}
	}
	if got := files(t, dir); len(got) != 1 || !strings.HasPrefix(got[0], "__/__/__/__/x.") {
		t.Fatalf("files %v", got)
	}
}

// TestIdleTimeoutAndMaxOpenFiles checks the two other ways a file closes:
// hdfs.maxOpenFiles closes the least recently written file at once, and
// hdfs.idleTimeout closes the rest once no event came for that long.
func TestIdleTimeoutAndMaxOpenFiles(t *testing.T) {
	dir := t.TempDir()
	w := startWriter(t, map[string]string{"hdfs.path": dir + "/%{host}", "hdfs.fileType": "DataStream", "hdfs.rollInterval": "0",
		"hdfs.rollCount": "0", "hdfs.rollSize": "0", "hdfs.maxOpenFiles": "2", "hdfs.idleTimeout": "1"})
	defer w.Stop(context.Background())
	for _, h := range []string{"a", "b", "c"} {
		if err := w.Write(context.Background(), []event.Event{{Headers: event.HeadersOf(map[string]string{"host": h}), Body: []byte(h)}}); err != nil {
			t.Fatal(err)
		}
	}
	inUse := func() (open []string, done []string) {
		for _, n := range files(t, dir) {
			if strings.HasSuffix(n, ".tmp") {
				open = append(open, n[:1])
			} else {
				done = append(done, n[:1])
			}
		}
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		open, done := inUse()
		if slices.Equal(open, []string{"b", "c"}) && slices.Equal(done, []string{"a"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("maxOpenFiles 2: open %v, finished %v; want a finished, b and c open", open, done)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		open, done := inUse()
		if len(open) == 0 && len(done) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idleTimeout 1 s: open %v, finished %v after 5 s", open, done)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTimersAfterEveryKindOfClose runs the roll timer (rollInterval,
// idleTimeout) over buckets whose files closed some other way: by
// rollCount, by rollSize, and a bucket whose file could not be created.
// The timer once found such a bucket still in its map with no file and
// dereferenced its missing record (issue 29: a panic 30 s after ten events
// with Flume's defaults). Each case then writes again and expects the new
// file to roll by the timer.
func TestTimersAfterEveryKindOfClose(t *testing.T) {
	for _, tc := range []struct {
		name  string
		props map[string]string
		first int // events of the first write
	}{
		{"rollCount+rollInterval", map[string]string{"hdfs.rollCount": "10", "hdfs.rollSize": "0", "hdfs.rollInterval": "0.2"}, 10},
		{"rollSize+rollInterval", map[string]string{"hdfs.rollCount": "0", "hdfs.rollSize": "7", "hdfs.rollInterval": "0.2"}, 1},
		{"rollCount+idleTimeout", map[string]string{"hdfs.rollCount": "10", "hdfs.rollSize": "0", "hdfs.rollInterval": "0", "hdfs.idleTimeout": "0.2"}, 10},
		{"Flume defaults, timers shortened", map[string]string{"hdfs.rollInterval": "0.2", "hdfs.idleTimeout": "0.2"}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.props["hdfs.path"] = dir
			tc.props["hdfs.fileType"] = "DataStream"
			w := startWriter(t, tc.props)
			defer w.Stop(context.Background())
			if err := w.Write(context.Background(), events(0, tc.first, 1)); err != nil {
				t.Fatal(err)
			}
			waitFinished(t, dir, 1)
			time.Sleep(600 * time.Millisecond) // three intervals: the timer sees the bucket's state
			if err := w.Write(context.Background(), events(tc.first, 1, 1)); err != nil {
				t.Fatal(err)
			}
			waitFinished(t, dir, 2) // the second file rolls by the timer
		})
	}
	t.Run("create failed", func(t *testing.T) {
		dir := t.TempDir()
		notDir := filepath.Join(dir, "file")
		if err := os.WriteFile(notDir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		w := startWriter(t, map[string]string{"hdfs.path": dir + "/%{d}", "hdfs.fileType": "DataStream", "hdfs.rollInterval": "0.2"})
		defer w.Stop(context.Background())
		bad := []event.Event{{Headers: event.HeadersOf(map[string]string{"d": "file"}), Body: []byte("x")}}
		if err := w.Write(context.Background(), bad); err == nil {
			t.Fatal("a file under a regular file was created")
		}
		time.Sleep(600 * time.Millisecond)
		good := []event.Event{{Headers: event.HeadersOf(map[string]string{"d": "ok"}), Body: []byte("y")}}
		if err := w.Write(context.Background(), good); err != nil {
			t.Fatal(err)
		}
		waitFinished(t, filepath.Join(dir, "ok"), 1)
	})
}

// waitFinished waits up to 5 s for n finished (not in-use) files in dir.
func waitFinished(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		done := 0
		for _, f := range files(t, dir) {
			if !strings.HasSuffix(f, ".tmp") {
				done++
			}
		}
		if done == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("files %v: want %d finished", files(t, dir), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
