package spooldirsource

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// TestFlumeDefaults builds the source with spoolDir alone, and with the keys
// Flume's User Guide marks deprecated and ignored (bufferMaxLines,
// bufferMaxLineLength), and checks Flume's defaults and that the old keys
// load without an unknown-key warning.
func TestFlumeDefaults(t *testing.T) {
	for _, extra := range []map[string]string{nil, {"bufferMaxLines": "100", "bufferMaxLineLength": "5000"}} {
		m := map[string]string{"spoolDir": t.TempDir()}
		for k, v := range extra {
			m[k] = v
		}
		p := config.FromMap("a1.sources.r1.", m)
		src, err := New(flow.Env{Agent: "a1", Name: "r1", Type: "spooldir", Metrics: metrics.NewRegistry("a1")}, p)
		if err != nil {
			t.Fatal(err)
		}
		p.Unused()
		if err := p.Err(); err != nil {
			t.Fatalf("%v: problems: %v", extra, err)
		}
		s := src.(*Source)
		got := []struct {
			key       string
			got, want any
		}{
			{"fileSuffix", s.suffix, ".COMPLETED"},
			{"deletePolicy immediate", s.deleteImmediate, false},
			{"fileHeader", s.fileHeader, false},
			{"fileHeaderKey", s.fileHeaderKey, "file"},
			{"basenameHeader", s.basenameHeader, false},
			{"basenameHeaderKey", s.basenameHeaderKey, "basename"},
			{"includePattern (^.*$) takes app.log", s.include.MatchString("app.log"), true},
			{"ignorePattern (^$) skips app.log", s.ignore.MatchString("app.log"), false},
			{"trackingPolicy tracker_dir", s.trackerMarks, false},
			{"consumeOrder", s.consumeOrder, "oldest"},
			{"pollDelay", s.pollDelay, 500 * time.Millisecond},
			{"batchSize", s.batch.Size(), 100},
			{"maxBackoff", s.maxBackoff, 4000 * time.Millisecond},
			{"decodeErrorPolicy", s.decodePolicy, "fail"},
			{"deserializer.maxLineLength", s.maxLineLength, 2048},
		}
		for _, g := range got {
			if g.got != g.want {
				t.Errorf("%s = %v, want %v (Flume's)", g.key, g.got, g.want)
			}
		}
	}
}
