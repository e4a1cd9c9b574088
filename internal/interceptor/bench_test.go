package interceptor

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
)

const benchBatch = 1000

func benchEvents(withHeaders bool) []event.Event {
	events := make([]event.Event, benchBatch)
	for i := range events {
		level := "INFO"
		if i%2 == 0 {
			level = "ERROR"
		}
		events[i].Body = fmt.Appendf(nil, "2024-03-05 17:04:09.250 %s [worker-%d] request handled in %d ms", level, i%8, i)
		if withHeaders {
			events[i].Headers = event.HeadersOf(map[string]string{"host": "10.0.0.1"})
		}
	}
	return events
}

// BenchmarkTimestamp runs the timestamp interceptor over 1000-event batches.
// With header maps present it allocates one string per batch; with nil maps
// it allocates each event's map, which is the floor.
func BenchmarkTimestamp(b *testing.B) {
	for _, withHeaders := range []bool{true, false} {
		b.Run(fmt.Sprintf("headers=%v", withHeaders), func(b *testing.B) {
			ic, _ := NewTimestamp(testEnv(), config.FromMap(prefix, nil))
			tmpl := benchEvents(withHeaders)
			events := make([]event.Event, len(tmpl))
			b.ReportAllocs()
			for b.Loop() {
				copy(events, tmpl)
				if !withHeaders {
					for i := range events {
						events[i].Headers = nil
					}
				}
				ic.Intercept(events)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/event")
		})
	}
}

// BenchmarkRegexFilter runs regex_filter over 1000-event batches of which
// half match, filtering in place without allocating.
func BenchmarkRegexFilter(b *testing.B) {
	for _, exclude := range []string{"false", "true"} {
		b.Run("excludeEvents="+exclude, func(b *testing.B) {
			ic, _ := NewRegexFilter(testEnv(), config.FromMap(prefix, map[string]string{"regex": ` ERROR \[worker-[0-3]\]`, "excludeEvents": exclude}))
			tmpl := benchEvents(true)
			events := make([]event.Event, len(tmpl))
			b.ReportAllocs()
			for b.Loop() {
				copy(events, tmpl)
				if out := ic.Intercept(events); len(out) != benchBatch/4 && len(out) != benchBatch*3/4 {
					b.Fatalf("kept %d", len(out))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/event")
		})
	}
}

// BenchmarkRegexExtractor extracts two groups (one as epoch millis) from
// 1000-event batches: the match indices, the header strings and the header
// map growth are its allocations.
func BenchmarkRegexExtractor(b *testing.B) {
	ic, _ := NewRegexExtractor(testEnv(), config.FromMap(prefix, map[string]string{
		"regex": `^(\S+ \S+) (\w+)`, "serializers": "ts lvl",
		"serializers.ts.name": "timestamp", "serializers.ts.type": millisSerializer, "serializers.ts.pattern": "yyyy-MM-dd HH:mm:ss.SSS",
		"serializers.lvl.name": "level",
	}))
	tmpl := benchEvents(true)
	events := make([]event.Event, len(tmpl))
	b.ReportAllocs()
	for b.Loop() {
		copy(events, tmpl)
		ic.Intercept(events)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/event")
}
