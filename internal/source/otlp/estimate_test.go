package otlpsource

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/otlpconv"
)

// shapes are requests ordinary and degenerate, for the estimate.
func shapes() map[string]plog.Logs {
	out := map[string]plog.Logs{}
	for name, n := range map[string]int{"sdk-like, 32-byte bodies": 32, "sdk-like, 256-byte bodies": 256, "sdk-like, 8 KiB bodies": 8192} {
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(sdkLikeRequest(500, n)); err != nil {
			panic(err)
		}
		out[name] = req.Logs()
	}
	empty := plog.NewLogs()
	lrs := empty.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for range 50_000 {
		lrs.AppendEmpty()
	}
	out["empty records"] = empty

	attrs := plog.NewLogs()
	lrs = attrs.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for range 500 {
		a := lrs.AppendEmpty().Attributes()
		for j := range 40 {
			a.PutInt(string(rune('a'+j%26))+strings.Repeat("k", j/26), int64(j))
		}
	}
	out["records of 40 int attributes"] = attrs

	arr := plog.NewLogs()
	s := arr.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Attributes().PutEmptySlice("a")
	for range 100_000 {
		s.AppendEmpty()
	}
	out["an array of 100,000 empty values"] = arr

	deep := plog.NewLogs()
	v := deep.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body()
	for range 20 {
		v = v.SetEmptyMap().PutEmpty("k")
	}
	v.SetStr("bottom")
	out["nested maps"] = deep

	many := plog.NewLogs()
	for range 2000 {
		rl := many.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "s")
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr("x")
	}
	out["a resource per record"] = many
	_ = pcommon.NewValueEmpty
	return out
}

// allocated is what decoding data and making its events allocates.
func allocated(t *testing.T, data []byte, json bool) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req := plogotlp.NewExportRequest()
	var err error
	if json {
		err = req.UnmarshalJSON(data)
	} else {
		err = req.UnmarshalProto(data)
	}
	if err != nil {
		t.Fatal(err)
	}
	ld := req.Logs()
	ev := otlpconv.Mapping{}.Events(make([]event.Event, 0, ld.LogRecordCount()), ld, 0)
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ev)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// TestEstimateBoundsAllocation: the estimate a request's bytes are
// scanned for is at least what decoding it and making its events
// allocate, for ordinary and degenerate requests in both encodings, so the
// budget bounds the memory (and is not wildly above it for ordinary ones).
func TestEstimateBoundsAllocation(t *testing.T) {
	for name, ld := range shapes() {
		req := plogotlp.NewExportRequestFromLogs(ld)
		pb, _ := req.MarshalProto()
		js, _ := req.MarshalJSON()
		for _, enc := range []struct {
			name string
			data []byte
			scan func([]byte) (shape, error)
		}{{"protobuf", pb, scanProto}, {"json", js, scanJSON}} {
			sh, err := enc.scan(enc.data)
			if err != nil {
				t.Fatalf("%s, %s: scan: %v", name, enc.name, err)
			}
			if enc.name == "protobuf" && sh.records != ld.LogRecordCount() {
				t.Errorf("%s: scanned %d records of %d", name, sh.records, ld.LogRecordCount())
			}
			est := sh.cost(len(enc.data))
			got := allocated(t, enc.data, enc.name == "json")
			t.Logf("%-34s %-8s wire %8d  allocated %9d  estimate %9d  (%.1f×)", name, enc.name, len(enc.data), got, est, float64(est)/float64(got))
			if est < got {
				t.Errorf("%s, %s: estimate %d is below the %d bytes allocated", name, enc.name, est, got)
			}
		}
	}
}

// TestScanRefusesDeepNesting: values nested past maxDepth are refused
// before the decoder, which recurses per level, sees them.
func TestScanRefusesDeepNesting(t *testing.T) {
	ld := plog.NewLogs()
	v := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body()
	for range maxDepth + 10 {
		v = v.SetEmptySlice().AppendEmpty()
	}
	req := plogotlp.NewExportRequestFromLogs(ld)
	pb, _ := req.MarshalProto()
	js, _ := req.MarshalJSON()
	if _, err := scanProto(pb); !errors.Is(err, errTooDeep) {
		t.Errorf("protobuf: %v", err)
	}
	if _, err := scanJSON(js); !errors.Is(err, errTooDeep) {
		t.Errorf("json: %v", err)
	}
	if _, err := scanProto([]byte{0x0a, 0xff}); err == nil {
		t.Error("truncated protobuf scanned")
	}
	if _, err := scanJSON([]byte(`{"a":[]}}`)); err == nil {
		t.Error("unbalanced JSON scanned")
	}
}
