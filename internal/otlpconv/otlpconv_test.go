package otlpconv

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/sluicehq/sluice/internal/event"
)

// richLogs is two resources, one with two scopes, and records that use
// every field and every value type, nested ones included.
func richLogs() plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
	ra := rl.Resource().Attributes()
	ra.PutStr("service.name", "checkout")
	ra.PutInt("process.pid", 4242)
	must(ra.PutEmptySlice("process.command_args").FromRaw([]any{"app", "--port", int64(8080)}))

	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("checkout/payments")
	sl.Scope().SetVersion("1.2.3")
	sl.SetSchemaUrl("https://opentelemetry.io/schemas/1.25.0")
	sl.Scope().Attributes().PutBool("scope.flag", true)

	lr := sl.LogRecords().AppendEmpty()
	lr.SetTimestamp(1_700_000_000_123_456_789)
	lr.SetObservedTimestamp(1_700_000_000_200_000_000)
	lr.SetSeverityText("WARN")
	lr.SetSeverityNumber(plog.SeverityNumberWarn)
	lr.SetTraceID([16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36})
	lr.SetSpanID([8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7})
	lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
	lr.SetEventName("payment.declined")
	lr.SetDroppedAttributesCount(3)
	lr.Body().SetStr("card declined: insufficient funds")
	a := lr.Attributes()
	a.PutStr("http.method", "POST")
	a.PutInt("http.status_code", 402)
	a.PutDouble("amount", 12.5)
	a.PutDouble("ratio", 1) // a whole double stays a double
	a.PutBool("retry", false)
	a.PutEmptyBytes("raw").FromRaw([]byte{0, 1, 2, 0xff})
	a.PutEmptyBytes("text_bytes").FromRaw([]byte("abc"))
	m := a.PutEmptyMap("customer")
	m.PutStr("id", "c-17")
	m.PutInt("visits", 9)
	m.PutDouble("score", 2)
	m.PutEmptyMap("address").PutStr("city", "Zürich \"Z\"\n")
	must(a.PutEmptySlice("tags").FromRaw([]any{"a", int64(1), 2.5, true, nil, map[string]any{"k": "v"}}))
	a.PutEmpty("nothing")
	a.PutStr("timestamp", "an attribute of that name")              // reserved name
	a.PutStr("resource.region", "an attribute, not the resource's") // behind the resource prefix
	a.PutStr("otel.scope.name", "not the scope")
	a.PutStr("otel.attr.x", "already looks escaped")
	a.PutStr("otel.custom", "an otel. name the mapping does not use")

	// A record with a map body, no time (only an observed one).
	lr2 := sl.LogRecords().AppendEmpty()
	lr2.SetObservedTimestamp(1_700_000_001_000_000_000)
	// Put key by key: FromRaw would take a Go map's random order.
	bm := lr2.Body().SetEmptyMap()
	bm.PutStr("msg", "structured")
	bm.PutInt("n", 3)
	bm.PutEmptySlice("nested").AppendEmpty().SetDouble(1.5)

	// A time equal to the observed time, in whole milliseconds.
	lr3 := sl.LogRecords().AppendEmpty()
	lr3.SetTimestamp(1_700_000_002_000_000_000)
	lr3.SetObservedTimestamp(1_700_000_002_000_000_000)
	lr3.Body().SetEmptyBytes().FromRaw([]byte{0xde, 0xad, 0xbe, 0xef})

	sl2 := rl.ScopeLogs().AppendEmpty()
	sl2.Scope().SetName("other")
	for i, set := range []func(pcommon.Value){
		func(v pcommon.Value) { v.SetInt(-7) },
		func(v pcommon.Value) { v.SetDouble(math.Inf(-1)) },
		func(v pcommon.Value) { v.SetBool(true) },
		func(pcommon.Value) {},                                              // empty body
		func(v pcommon.Value) { _ = v.SetEmptySlice().FromRaw([]any{"x"}) }, // a literal that converts
		func(v pcommon.Value) { v.SetStr("") },
	} {
		r := sl2.LogRecords().AppendEmpty()
		r.SetTimestamp(pcommon.Timestamp(1_700_000_003_000_000_000 + i))
		set(r.Body())
	}

	rl2 := ld.ResourceLogs().AppendEmpty()
	rl2.Resource().Attributes().PutStr("service.name", "ledger")
	r := rl2.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	r.SetTimestamp(1_700_000_004_000_000_000) // whole ms, no observed time
	r.Body().SetStr("ledger line")
	return ld
}

// norm is a Logs in a form reflect.DeepEqual compares: attributes as raw
// maps (types kept: int64, float64, bool, []byte, nested maps and slices).
type norm struct {
	Resources []normResource
}

type normResource struct {
	Attrs  map[string]any
	Schema string
	Scopes []normScope
}

type normScope struct {
	Name, Version, Schema string
	Attrs                 map[string]any
	Records               []map[string]any
}

func normalize(ld plog.Logs) norm {
	var n norm
	for _, rl := range ld.ResourceLogs().All() {
		r := normResource{Attrs: rl.Resource().Attributes().AsRaw(), Schema: rl.SchemaUrl()}
		for _, sl := range rl.ScopeLogs().All() {
			s := normScope{Name: sl.Scope().Name(), Version: sl.Scope().Version(), Schema: sl.SchemaUrl(),
				Attrs: sl.Scope().Attributes().AsRaw()}
			for _, lr := range sl.LogRecords().All() {
				s.Records = append(s.Records, map[string]any{
					"time": uint64(lr.Timestamp()), "observed": uint64(lr.ObservedTimestamp()),
					"sevText": lr.SeverityText(), "sevNum": int(lr.SeverityNumber()),
					"trace": lr.TraceID().String(), "span": lr.SpanID().String(), "flags": uint32(lr.Flags()),
					"event": lr.EventName(), "dropped": lr.DroppedAttributesCount(),
					"bodyType": lr.Body().Type().String(), "body": lr.Body().AsRaw(),
					"attrs": lr.Attributes().AsRaw(),
				})
			}
			r.Scopes = append(r.Scopes, s)
		}
		n.Resources = append(n.Resources, r)
	}
	return n
}

func TestLogsRoundTrip(t *testing.T) {
	for _, prefix := range []string{"", "res_"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			m := Mapping{ResourcePrefix: prefix}
			in := richLogs()
			events := m.Events(nil, in, 99)
			if len(events) != in.LogRecordCount() {
				t.Fatalf("%d events for %d records", len(events), in.LogRecordCount())
			}
			for _, e := range events {
				if e.ReceivedAt != 99 {
					t.Fatalf("ReceivedAt %d", e.ReceivedAt)
				}
			}
			out := m.Logs(events)
			want, got := normalize(in), normalize(out)
			if !reflect.DeepEqual(want, got) {
				wj, _ := json.MarshalIndent(want, "", " ")
				gj, _ := json.MarshalIndent(got, "", " ")
				t.Fatalf("round trip changed the logs:\nwant %s\n got %s", wj, gj)
			}
		})
	}
}

// TestEventHeaders pins the documented mapping of a record's fields to
// headers (docs/components.md).
func TestEventHeaders(t *testing.T) {
	events := Mapping{}.Events(nil, richLogs(), 0)
	got := events[0].Headers.Map()
	want := map[string]string{
		"resource.service.name":         "checkout",
		"resource.process.pid":          "4242",
		"resource.process.command_args": `["app","--port",8080]`,
		"otel.schema_url":               "https://opentelemetry.io/schemas/1.26.0",
		"otel.scope.name":               "checkout/payments",
		"otel.scope.version":            "1.2.3",
		"otel.scope.schema_url":         "https://opentelemetry.io/schemas/1.25.0",
		"otel.scope.attr.scope.flag":    "true",
		"timestamp":                     "1700000000123",
		"otel.time_unix_nano":           "1700000000123456789",
		"otel.observed_time_unix_nano":  "1700000000200000000",
		"otel.severity_text":            "WARN",
		"otel.severity_number":          "13",
		"otel.trace_id":                 "4bf92f3577b34da6a3ce929d0e0e4736",
		"otel.span_id":                  "00f067aa0ba902b7",
		"otel.trace_flags":              "1",
		"otel.event_name":               "payment.declined",
		"otel.dropped_attributes_count": "3",
		"http.method":                   "POST",
		"http.status_code":              "402",
		"amount":                        "12.5",
		"ratio":                         "1",
		"retry":                         "false",
		"raw":                           "\x00\x01\x02\xff",
		"text_bytes":                    "abc",
		"customer":                      `{"id":"c-17","visits":9,"score":2.0,"address":{"city":"Zürich \"Z\"\n"}}`,
		"tags":                          `["a",1,2.5,true,null,{"k":"v"}]`,
		"nothing":                       "",
		"otel.attr.timestamp":           "an attribute of that name",
		"otel.attr.resource.region":     "an attribute, not the resource's",
		"otel.attr.otel.scope.name":     "not the scope",
		"otel.attr.otel.attr.x":         "already looks escaped",
		"otel.custom":                   "an otel. name the mapping does not use",
	}
	types := got["otel.types"]
	delete(got, "otel.types")
	if !maps.Equal(got, want) {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if got[k] != want[k] {
				t.Errorf("header %s = %q, want %q", k, got[k], want[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected header %s = %q", k, got[k])
			}
		}
	}
	var tm map[string]string
	if err := json.Unmarshal([]byte(types), &tm); err != nil {
		t.Fatalf("otel.types %q: %v", types, err)
	}
	wantTypes := map[string]string{
		"resource.process.pid": "int", "resource.process.command_args": "array", "otel.scope.attr.scope.flag": "bool",
		"http.status_code": "int", "amount": "double", "ratio": "double", "retry": "bool", "text_bytes": "bytes",
		"customer": "map", "tags": "array", "nothing": "empty",
	}
	if !maps.Equal(tm, wantTypes) {
		t.Errorf("otel.types = %v, want %v", tm, wantTypes)
	}
	if string(events[0].Body) != "card declined: insufficient funds" || events[0].Headers.Value("otel.body_type") != "" {
		t.Errorf("string body %q (type %q)", events[0].Body, events[0].Headers.Value("otel.body_type"))
	}

	// No time: timestamp is the observed time's; a map body is JSON.
	e := events[1]
	if e.Headers.Value("timestamp") != "1700000001000" || e.Headers.Value("otel.time_unix_nano") != "" {
		t.Errorf("record without a time: timestamp %q, time %q", e.Headers.Value("timestamp"), e.Headers.Value("otel.time_unix_nano"))
	}
	if string(e.Body) != `{"msg":"structured","n":3,"nested":[1.5]}` || e.Headers.Value("otel.body_type") != "map" {
		t.Errorf("map body %q (type %q)", e.Body, e.Headers.Value("otel.body_type"))
	}
	// Bytes body as it is (not UTF-8, so its type goes without saying).
	if e := events[2]; string(e.Body) != "\xde\xad\xbe\xef" || e.Headers.Value("otel.body_type") != "" {
		t.Errorf("bytes body %q (type %q)", e.Body, e.Headers.Value("otel.body_type"))
	}
	// Whole-millisecond time without an observed time: timestamp alone.
	last := events[len(events)-1]
	if last.Headers.Value("timestamp") != "1700000004000" || len(last.Headers) != 2 {
		t.Errorf("plain record headers %v", last.Headers)
	}
}

// TestFlumeEventsRoundTrip sends Flume events through the sink's mapping
// and back through the source's: the same bodies and headers.
func TestFlumeEventsRoundTrip(t *testing.T) {
	events := []event.Event{
		{Body: []byte("plain line"), Headers: event.HeadersOf(map[string]string{"host": "web-1", "timestamp": "1700000000123"})},
		{Body: []byte("no headers")},
		{Body: []byte{0xff, 0xfe, 0x00}, Headers: event.HeadersOf(map[string]string{"binary": "\xff\xfe", "bad\xffkey": "v"})},
		{Body: []byte(""), Headers: event.HeadersOf(map[string]string{"empty": ""})},
		{Body: []byte(`{"looks":"like json"}`), Headers: event.HeadersOf(map[string]string{"otel.custom": "x", "Severity": "3", "Facility": "1"})},
		{Body: []byte("with a bad timestamp"), Headers: event.HeadersOf(map[string]string{"count": "12"})},
	}
	m := Mapping{}
	back := m.Events(nil, m.Logs(events), 0)
	if len(back) != len(events) {
		t.Fatalf("%d events back for %d", len(back), len(events))
	}
	for i, e := range events {
		want := e.Headers.Map()
		if want == nil {
			want = map[string]string{}
		}
		if k := "bad\xffkey"; want[k] != "" {
			// Attribute names must be UTF-8: the bad byte is replaced.
			want[strings.ToValidUTF8(k, "\uFFFD")] = want[k]
			delete(want, k)
		}
		got := back[i].Headers.Map()
		if string(back[i].Body) != string(e.Body) || !maps.Equal(got, want) {
			t.Errorf("event %d: got body %q headers %v, want body %q headers %v", i, back[i].Body, got, e.Body, want)
		}
	}
}

// TestHeaderEdits: an interceptor's change to timestamp wins over the
// exact time; headers that do not parse are kept as attributes.
func TestHeaderEdits(t *testing.T) {
	m := Mapping{}
	ld := m.Logs([]event.Event{
		{Body: []byte("a"), Headers: event.HeadersOf(map[string]string{"timestamp": "1700000000999",
			"otel.time_unix_nano": "1700000000123456789", "otel.observed_time_unix_nano": "1700000000200000000"})},
		{Body: []byte("b"), Headers: event.HeadersOf(map[string]string{"timestamp": "yesterday", "otel.trace_id": "xyz",
			"otel.severity_number": "loud", "otel.types": "{not json", "n": "1"})},
	})
	recs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
	if got := recs.At(0).Timestamp(); got != 1_700_000_000_999_000_000 {
		t.Errorf("time %d: the edited timestamp should win", got)
	}
	want := map[string]any{"timestamp": "yesterday", "otel.trace_id": "xyz", "otel.severity_number": "loud",
		"otel.types": "{not json", "n": "1"}
	if got := recs.At(1).Attributes().AsRaw(); !reflect.DeepEqual(got, want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	if !recs.At(1).TraceID().IsEmpty() || recs.At(1).Timestamp() != 0 {
		t.Error("unparseable fields were set")
	}
}

// TestGrouping: events go to one resource per distinct resource header
// set, in first-seen order, and keep their order within it.
func TestGrouping(t *testing.T) {
	var events []event.Event
	for i := range 6 {
		svc := []string{"a", "b"}[i%2]
		h := map[string]string{"resource.service.name": svc, "resource.host": "h1", "seq": fmt.Sprint(i)}
		if i == 4 {
			h["otel.scope.name"] = "s2"
		}
		events = append(events, event.Event{Body: []byte(fmt.Sprint(i)), Headers: event.HeadersOf(h)})
	}
	ld := Mapping{}.Logs(events)
	var got []string
	for _, rl := range ld.ResourceLogs().All() {
		svc, _ := rl.Resource().Attributes().Get("service.name")
		for _, sl := range rl.ScopeLogs().All() {
			var bodies []string
			for _, lr := range sl.LogRecords().All() {
				bodies = append(bodies, lr.Body().Str())
			}
			got = append(got, fmt.Sprintf("%s/%s:%s", svc.Str(), sl.Scope().Name(), strings.Join(bodies, ",")))
		}
	}
	want := []string{"a/:0,2", "a/s2:4", "b/:1,3,5"}
	if !slices.Equal(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
}

func TestCheckPrefix(t *testing.T) {
	for p, bad := range map[string]bool{"": true, "otel.res.": true, "resource.": false, "r_": false} {
		if got := CheckPrefix(p) != ""; got != bad {
			t.Errorf("CheckPrefix(%q) bad = %v, want %v", p, got, bad)
		}
	}
}

// FuzzFlumeRoundTrip: any headers and body a Flume event can have come
// back the same through the sink's and the source's mapping (attribute
// names must be UTF-8: a key that is not comes back repaired).
func FuzzFlumeRoundTrip(f *testing.F) {
	f.Add([]byte("body"), "k", "v", "timestamp", "1700000000000")
	f.Add([]byte{0xff}, "otel.types", `{"k":"int"}`, "k", "x")
	f.Add([]byte("1"), "otel.body_type", "int", "resource.x", "1")
	f.Add([]byte(""), "otel.time_unix_nano", "5", "otel.observed_time_unix_nano", "5000000")
	f.Fuzz(func(t *testing.T, body []byte, k1, v1, k2, v2 string) {
		e := event.Event{Body: body, Headers: event.HeadersOf(map[string]string{k1: v1, k2: v2})}
		m := Mapping{}
		back := m.Events(nil, m.Logs([]event.Event{e}), 0)
		if len(back) != 1 {
			t.Fatalf("%d events back", len(back))
		}
		// The mapping's own headers are read, not kept: compare the rest,
		// and only when no header claims to be one of them.
		for _, k := range []string{k1, k2} {
			if k == HeaderTimestamp || strings.HasPrefix(k, "otel.") || !utfOK(k) {
				return
			}
		}
		if string(back[0].Body) != string(body) || !back[0].Headers.Equal(e.Headers) {
			t.Fatalf("got %q %v, want %q %v", back[0].Body, back[0].Headers, body, e.Headers)
		}
	})
}

func utfOK(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// must stops the test on a setup error (richLogs has no *testing.T).
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// TestParseUint: the sink's reading of times is strconv.ParseUint's.
func TestParseUint(t *testing.T) {
	for _, s := range []string{"", "0", "7", "007", "1700000000123", "1700000000123456789", "9999999999999999999",
		"18446744073709551615", "18446744073709551616", "99999999999999999999", "-1", "+1", "1_000", " 1", "1 ", "12a", "0x10", "١"} {
		want, err := strconv.ParseUint(s, 10, 64)
		got, ok := parseUint(s)
		if ok != (err == nil) || (ok && got != want) {
			t.Errorf("parseUint(%q) = %d, %v; strconv says %d, %v", s, got, ok, want, err)
		}
	}
}

// TestTimeHeaders: timestamp is the time's milliseconds and
// otel.time_unix_nano its nanoseconds when they say more, for times of any
// size (the milliseconds of a time with nanoseconds are read off its text).
func TestTimeHeaders(t *testing.T) {
	f := func(ts, observed uint64, wantMillis, wantNanos string) {
		t.Helper()
		ld := plog.NewLogs()
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.Timestamp(ts))
		lr.SetObservedTimestamp(pcommon.Timestamp(observed))
		h := Mapping{}.Events(nil, ld, 0)[0].Headers.Map()
		nanos, ok := h[HeaderTime]
		if h[HeaderTimestamp] != wantMillis || nanos != wantNanos || ok != (wantNanos != "") {
			t.Errorf("time %d, observed %d: timestamp %q, otel.time_unix_nano %q; want %q, %q",
				ts, observed, h[HeaderTimestamp], nanos, wantMillis, wantNanos)
		}
	}
	f(1, 0, "0", "1")
	f(999_999, 0, "0", "999999")
	f(1_000_000, 0, "1", "")
	f(1_000_001, 0, "1", "1000001")
	f(1_000_000, 5, "1", "1000000")
	f(1_700_000_000_123_456_789, 0, "1700000000123", "1700000000123456789")
	f(1_700_000_000_123_000_000, 0, "1700000000123", "")
	f(1_700_000_000_123_000_000, 1_700_000_000_200_000_000, "1700000000123", "1700000000123000000")
	f(math.MaxUint64, 0, "18446744073709", "18446744073709551615")
	f(0, 1_700_000_000_200_000_001, "1700000000200", "")
}
