package otlpsource

import (
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/otlpconv"
)

// sdkLikeRequest is n records as an SDK sends them: a resource of four
// attributes, a scope, and records with a bodySize-byte body, a time, an
// observed time, a severity, a span context and five attributes.
func sdkLikeRequest(n, bodySize int) []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	ra := rl.Resource().Attributes()
	ra.PutStr("service.name", "checkout")
	ra.PutStr("telemetry.sdk.language", "go")
	ra.PutStr("telemetry.sdk.name", "opentelemetry")
	ra.PutStr("telemetry.sdk.version", "1.47.0")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("checkout/payments")
	for i := range n {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(1_700_000_000_000_000_000)
		lr.SetObservedTimestamp(1_700_000_000_000_000_001)
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.SetTraceID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(i)})
		lr.SetSpanID([8]byte{1, 2, 3, 4, 5, 6, 7, byte(i)})
		body := fmt.Sprintf("request %d handled", i)
		lr.Body().SetStr(body + strings.Repeat("x", max(0, bodySize-len(body))))
		a := lr.Attributes()
		a.PutStr("http.method", "POST")
		a.PutStr("http.route", "/api/v1/orders/{id}")
		a.PutInt("http.status_code", 200)
		a.PutDouble("duration_ms", 12.5)
		a.PutStr("user.id", fmt.Sprintf("u-%d", i))
	}
	b, _ := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	return b
}

// BenchmarkDecodeMemory measures what decoding a request (pdata) and making
// its events allocate per byte of the request (alloc/wire): the source's
// decodeFactor must be at least that.
func BenchmarkDecodeMemory(b *testing.B) {
	for _, bodySize := range []int{32, 256, 2048} {
		b.Run(fmt.Sprintf("body=%d", bodySize), func(b *testing.B) {
			wire := sdkLikeRequest(1000, bodySize)
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			var m otlpconv.Mapping
			var total int64
			for b.Loop() {
				req := plogotlp.NewExportRequest()
				if err := req.UnmarshalProto(wire); err != nil {
					b.Fatal(err)
				}
				ev := m.Events(make([]event.Event, 0, 1000), req.Logs(), 0)
				total += int64(len(ev))
			}
			if total == 0 {
				b.Fatal("no events")
			}
		})
	}
}

// BenchmarkEvents is the mapping alone, per record.
func BenchmarkEvents(b *testing.B) {
	req := plogotlp.NewExportRequest()
	if err := req.UnmarshalProto(sdkLikeRequest(1000, 256)); err != nil {
		b.Fatal(err)
	}
	var m otlpconv.Mapping
	b.ReportAllocs()
	for b.Loop() {
		m.Events(make([]event.Event, 0, 1000), req.Logs(), 0)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/record")
}
