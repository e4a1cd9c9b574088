package hdfssink

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/serializer"
)

// FuzzScan feeds arbitrary bytes to every recovery scanner (they read
// files a crash or a disk left damaged): none may panic, and each must
// return a prefix length. Seeds are real files of each format.
func FuzzScan(f *testing.F) {
	formats := []format{{Type: sequenceFile}, {Type: dataStream, Serializer: serializer.Options{AppendNewline: true}},
		{Type: dataStream, Serializer: serializer.Options{Kind: serializer.AvroEvent}}}
	for _, c := range codecs {
		formats = append(formats, format{Type: sequenceFile, Codec: c.name}, format{Type: compressedStream, Codec: c.name,
			Serializer: serializer.Options{AppendNewline: true}})
	}
	for i, fm := range formats {
		dir := f.TempDir()
		w := startWriter(f, map[string]string{"hdfs.path": dir, "hdfs.rollInterval": "0", "hdfs.rollCount": "0",
			"hdfs.rollSize": "0", "hdfs.stagingDir": filepath.Join(dir, ".staging")})
		w.opt.Format = fm
		for b := range 2 {
			w.Write(context.Background(), events(b*3, 3, 1))
		}
		w.Stop(context.Background())
		names, _ := filepath.Glob(filepath.Join(dir, "FlumeData.*"))
		for _, n := range names {
			b, _ := os.ReadFile(n)
			f.Add(uint8(i), b)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		fm := formats[int(which)%len(formats)]
		n, _ := fm.scan(data)
		if n < 0 || n > len(data) {
			t.Fatalf("scan returned %d for %d bytes", n, len(data))
		}
	})
}
