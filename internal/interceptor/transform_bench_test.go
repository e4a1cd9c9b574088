package interceptor

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
)

// transformEvents are 1000 JSON log lines (about 190 bytes each) with two
// headers, the shape of the events the targets are about.
func transformEvents() []event.Event {
	events := make([]event.Event, benchBatch)
	for i := range events {
		level := "INFO"
		if i%4 == 0 {
			level = "DEBUG"
		}
		events[i].Body = fmt.Appendf(nil, `{"ts":"2024-03-05T23:59:%02d.%03d+0000","level":"%s","app":"checkout","user":"u%d","msg":"request handled","ms":%d,"path":"/api/v1/orders"}`,
			i%60, i%1000, level, i, i%500)
		events[i].Headers = event.HeadersOf(map[string]string{"host": "web-1", "level": level})
	}
	return events
}

// benchTransform runs a transform over 1000-event batches and reports the
// time and allocations per event.
func benchTransform(b *testing.B, props map[string]string) {
	b.Helper()
	ic, err := NewTransform(testEnv(), config.FromMap(prefix, props))
	if err != nil {
		b.Fatal(err)
	}
	tmpl := transformEvents()
	events := make([]event.Event, len(tmpl))
	// Warm the pools: the first batch allocates parsers and VMs.
	copy(events, tmpl)
	ic.Intercept(events)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		copy(events, tmpl)
		ic.Intercept(events)
	}
	n := float64(b.N * benchBatch)
	b.ReportMetric(float64(processCPU()-cpu)/n, "cpu-ns/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
}

// BenchmarkTransformMidnight is the midnight transform: parse the
// JSON body, parse its time, set the timestamp header.
func BenchmarkTransformMidnight(b *testing.B) {
	benchTransform(b, map[string]string{"set.timestamp": `parseTime(json(body).ts, "yyyy-MM-dd'T'HH:mm:ss.SSSZ")`})
}

// BenchmarkTransformDropHeader is a drop on a header comparison.
func BenchmarkTransformDropHeader(b *testing.B) {
	benchTransform(b, map[string]string{"drop": `headers.level == "DEBUG"`})
}

// BenchmarkTransformThree is the three-expression transform of the W1
// comparison (docs/PERFORMANCE.md): a drop, the midnight set, and a lifted
// field.
func BenchmarkTransformThree(b *testing.B) {
	benchTransform(b, map[string]string{
		"drop":          `json(body).level == "DEBUG"`,
		"set.timestamp": `parseTime(json(body).ts, "yyyy-MM-dd'T'HH:mm:ss.SSSZ")`,
		"set.app":       `json(body).app`,
	})
}

// BenchmarkTransformW1 is the transform of the W1 comparison on the lines
// of the peers harness ("SSSSSSSSSS TTTTTTTTTTTTTTTTTTT padding", 256
// bytes): a drop on a header, the sequence number and the send time (Unix
// nanoseconds) lifted into headers. The last two run on expr's VM.
func BenchmarkTransformW1(b *testing.B) {
	ic, err := NewTransform(testEnv(), config.FromMap(prefix, w1Transform))
	if err != nil {
		b.Fatal(err)
	}
	tmpl := make([]event.Event, benchBatch)
	for i := range tmpl {
		line := fmt.Appendf(nil, "%010d %019d ", i, 1709683199950000000+int64(i))
		for len(line) < 255 {
			line = append(line, "abcdefghijklmnopqrstuvwxyz0123456789"[len(line)%36])
		}
		tmpl[i].Body = line
	}
	events := make([]event.Event, len(tmpl))
	copy(events, tmpl)
	ic.Intercept(events)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		copy(events, tmpl)
		for i := range events {
			events[i].Headers = nil
		}
		ic.Intercept(events)
	}
	n := float64(b.N * benchBatch)
	b.ReportMetric(float64(processCPU()-cpu)/n, "cpu-ns/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
}

// w1Transform is the three-expression transform of the W1 comparison
// (docs/PERFORMANCE.md; the harness's peers/sluice-transform/run.sh holds
// the same keys).
var w1Transform = map[string]string{
	"drop":          `headers.level == "DEBUG"`,
	"set.timestamp": `parseTime(body[11:30], "unixNs")`,
	"set.seq":       `body[0:10]`,
}
