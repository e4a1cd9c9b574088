package otlpconv

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/sluicehq/sluice/internal/event"
)

// benchShapes are 1,000 records of 256-byte bodies: as `sluice bench`
// sends them (a resource attribute and a time), and as an SDK sends them (a
// resource of four attributes, a scope, a time and an observed time,
// severity, a span context and five attributes).
func benchShapes() map[string]plog.Logs {
	bench := plog.NewLogs()
	rl := bench.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "sluice-bench")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for i := range 1000 {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + 1234*uint64(i)))
		body := fmt.Sprintf("%d ", i)
		lr.Body().SetStr(body + strings.Repeat("x", 256-len(body)))
	}

	sdk := plog.NewLogs()
	rl = sdk.ResourceLogs().AppendEmpty()
	ra := rl.Resource().Attributes()
	ra.PutStr("service.name", "checkout")
	ra.PutStr("telemetry.sdk.language", "go")
	ra.PutStr("telemetry.sdk.name", "opentelemetry")
	ra.PutStr("telemetry.sdk.version", "1.47.0")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("checkout/payments")
	for i := range 1000 {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + 1234*uint64(i)))
		lr.SetObservedTimestamp(pcommon.Timestamp(1_700_000_000_000_000_001 + 1234*uint64(i)))
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.SetTraceID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(i)})
		lr.SetSpanID([8]byte{1, 2, 3, 4, 5, 6, 7, byte(i)})
		body := fmt.Sprintf("request %d handled ", i)
		lr.Body().SetStr(body + strings.Repeat("x", 256-len(body)))
		a := lr.Attributes()
		a.PutStr("http.method", "POST")
		a.PutStr("http.route", "/api/v1/orders/{id}")
		a.PutInt("http.status_code", 200)
		a.PutDouble("duration_ms", 12.5)
		a.PutStr("user.id", fmt.Sprintf("u-%d", i))
	}
	return map[string]plog.Logs{"bench": bench, "sdk": sdk}
}

// BenchmarkEvents is the source's mapping of 1,000 records, per record.
func BenchmarkEvents(b *testing.B) {
	for _, name := range []string{"bench", "sdk"} {
		ld := benchShapes()[name]
		b.Run(name, func(b *testing.B) {
			var m Mapping
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				m.Events(make([]event.Event, 0, 1000), ld, 0)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*1000), "cpu-ns/record")
		})
	}
}

// BenchmarkLogs is the sink's mapping of 1,000 events and their encoding
// (protobuf, as the gRPC exporter sends them), per record.
func BenchmarkLogs(b *testing.B) {
	for _, name := range []string{"bench", "sdk"} {
		var m Mapping
		events := m.Events(nil, benchShapes()[name], 0)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if _, err := plogotlp.NewExportRequestFromLogs(m.Logs(events)).MarshalProto(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*1000), "cpu-ns/record")
		})
	}
}

// processCPU is the CPU time this process used so far, in nanoseconds,
// the garbage collector's included: steadier than the wall clock on a busy
// machine.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
