package hdfssink

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
)

// BenchmarkLocalDataStream writes batches of 100 1 KiB events to local
// DataStream files that roll every 700 events.
func BenchmarkLocalDataStream(b *testing.B) {
	dir := b.TempDir()
	s := newBenchSink(b, flowEnv(), map[string]string{"hdfs.path": dir, "hdfs.fileType": "DataStream", "hdfs.rollCount": "700", "hdfs.rollSize": "0", "hdfs.rollInterval": "0", "hdfs.stagingDir": b.TempDir()})
	if err := s.w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	evs := make([]event.Event, 100)
	for i := range evs {
		evs[i] = event.Event{Body: []byte(strings.Repeat("x", 1023))}
	}
	b.SetBytes(100 * 1024)
	b.ResetTimer()
	for range b.N {
		if err := s.w.Write(context.Background(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	s.w.Stop(context.Background())
}
