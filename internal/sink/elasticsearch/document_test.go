package elasticsearchsink

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

func TestDocument(t *testing.T) {
	const ts = "1700000000123" // 2023-11-14T22:13:20.123Z
	const iso = `"2023-11-14T22:13:20.123Z"`
	f := func(name string, body string, headers map[string]string, want string) {
		t.Helper()
		e := event.Event{Headers: unsorted(headers), Body: []byte(body)}
		ms, text := eventTime(&e, 0)
		got, _ := appendDocument(nil, &e, ms, text, nil)
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if !json.Valid(got) || bytes.ContainsAny(got, "\r\n") {
			t.Errorf("%s: not one line of valid JSON: %q", name, got)
		}
	}
	h := map[string]string{"timestamp": ts}
	f("json object gets @timestamp", `{"a":1}`, h, `{"@timestamp":`+iso+`,"a":1}`)
	f("json object keeps its @timestamp", `{"@timestamp":"x","a":1}`, h, `{"@timestamp":"x","a":1}`)
	f("escaped key counts", `{"\u0040timestamp":"x"}`, h, `{"\u0040timestamp":"x"}`)
	f("nested @timestamp does not count", `{"a":{"@timestamp":1}}`, h, `{"@timestamp":`+iso+`,"a":{"@timestamp":1}}`)
	f("@timestamp as a value does not count", `{"a":"@timestamp","b":["@timestamp"]}`, h,
		`{"@timestamp":`+iso+`,"a":"@timestamp","b":["@timestamp"]}`)
	f("empty object", ` {} `, h, `{"@timestamp":`+iso+`}`)
	f("pretty JSON becomes one line", "{\n  \"a\": \"x\",\r\n  \"b\": 2\n}\n", h, `{"@timestamp":`+iso+`,"a": "x",    "b": 2 }`)
	f("headers are not added to a JSON body", `{"a":1}`, map[string]string{"timestamp": ts, "host": "h"}, `{"@timestamp":`+iso+`,"a":1}`)
	f("a JSON array is text", `[1,2]`, h, `{"@timestamp":`+iso+`,"message":"[1,2]","timestamp":"`+ts+`"}`)
	f("invalid JSON is text", `{"a":`, nil, `{"@timestamp":"1970-01-01T00:00:00.000Z","message":"{\"a\":"}`)
	f("text with headers in key order", "line\twith \"quotes\" \\ and \x01",
		map[string]string{"timestamp": ts, "zz": "last", "host": "web-1", "message": "skipped", "@timestamp": "skipped too"},
		`{"@timestamp":`+iso+`,"message":"line\twith \"quotes\" \\ and \u0001","host":"web-1","timestamp":"`+ts+`","zz":"last"}`)
	f("bad UTF-8 becomes U+FFFD", "a\xffb é", nil, `{"@timestamp":"1970-01-01T00:00:00.000Z","message":"a\ufffdb é"}`)
	f("non-numeric timestamp header is passed on", "x", map[string]string{"timestamp": "2024-05-06T07:08:09Z"},
		`{"@timestamp":"2024-05-06T07:08:09Z","message":"x","timestamp":"2024-05-06T07:08:09Z"}`)
	f("@timestamp header when no timestamp", "x", map[string]string{"@timestamp": ts}, `{"@timestamp":`+iso+`,"message":"x"}`)
}

func TestEventTimeFallsBackToReceipt(t *testing.T) {
	recv := time.Date(2024, 1, 2, 3, 4, 5, 6e6, time.UTC).UnixNano()
	e := event.Event{Body: []byte("x"), ReceivedAt: recv}
	if ms, _ := eventTime(&e, 0); ms != recv/1e6 {
		t.Fatalf("time %d, want the receipt time %d", ms, recv/1e6)
	}
	e.ReceivedAt = 0
	now := time.Now().UnixNano()
	if ms, _ := eventTime(&e, now); ms != now/1e6 {
		t.Fatalf("time %d, want now %d", ms, now/1e6)
	}
}

func FuzzDocument(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "k", "v")
	f.Add([]byte(`{"@timestamp":1,"b":[{"c":"}"}]}`), "timestamp", "17")
	f.Add([]byte("{\n\"a\"\r\n:\"\\\"\"}"), "@timestamp", "x")
	f.Add([]byte("plain \xff text\n"), "message", "m")
	f.Add([]byte(`  {"\u0040timestamp" : null }  `), "timestamp", "2024")
	f.Fuzz(func(t *testing.T, body []byte, k, v string) {
		e := event.Event{Headers: event.HeadersOf(map[string]string{k: v}), Body: body}
		ms, text := eventTime(&e, 1)
		doc, _ := appendDocument(nil, &e, ms, text, nil)
		if bytes.ContainsAny(doc, "\r\n") {
			t.Fatalf("document spans lines: %q", doc)
		}
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			t.Fatalf("document %q is not a JSON object: %v", doc, err)
		}
		if _, ok := m["@timestamp"]; !ok {
			t.Fatalf("document %q has no @timestamp", doc)
		}
		var orig map[string]any
		if json.Unmarshal(body, &orig) == nil && orig != nil && strings.HasPrefix(strings.TrimSpace(string(body)), "{") {
			for key := range orig {
				if _, ok := m[key]; !ok {
					t.Fatalf("field %q of the JSON body is missing from %q", key, doc)
				}
			}
			return
		}
		if _, ok := m["message"].(string); !ok {
			t.Fatalf("text body without a message: %q", doc)
		}
	})
}

func TestParseBulkResponse(t *testing.T) {
	ok := `{"took":3,"errors":false,"items":[{"index":{"status":201}}]}`
	if r, err := parseBulkResponse([]byte(ok), 1); err != nil || r != nil {
		t.Fatalf("success: %v %v", r, err)
	}
	mixed := `{"took":3,"errors":true,"items":[{"index":{"status":201}},
		{"create":{"status":429,"error":{"type":"es_rejected_execution_exception","reason":"queue full"}}},
		{"index":{"status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse field [n]"}}},
		{"create":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"exists"}}},
		{"index":{"status":503,"error":{"type":"unavailable_shards_exception","reason":"primary not active"}}},
		{"index":{"status":404,"error":{"type":"index_not_found_exception","reason":"no such index"}}},
		{"index":{"status":500,"error":"some old string error"}}]}`
	r, err := parseBulkResponse([]byte(mixed), 7)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{classOK, classRejected, classMapping, classConflict, classUnavailable, classOther, classOther}
	for i, w := range want {
		if got := classify(r[i], true); got != w {
			t.Errorf("item %d (%d %s): class %d, want %d", i, r[i].Status, r[i].errorType(), got, w)
		}
	}
	if got := classify(r[3], false); got != classOther {
		t.Errorf("409 without ids: class %d, want other (dead letter)", got)
	}
	if got := r[2].errorText(); got != "mapper_parsing_exception: failed to parse field [n]" {
		t.Errorf("error text %q", got)
	}
	for _, bad := range []string{`<html>`, `{"items":[]}`, `{"errors":true,"items":[]}`, `{"errors":true,"items":[{"index":{}}]}`} {
		if _, err := parseBulkResponse([]byte(bad), 1); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func FuzzParseBulkResponse(f *testing.F) {
	f.Add([]byte(`{"errors":false}`), 1)
	f.Add([]byte(`{"errors":true,"items":[{"index":{"status":429,"error":{"type":"x"}}}]}`), 1)
	f.Add([]byte(`{"errors" : true,"items":[{"a":{"status":1}},{"b":{"status":2,"error":null}}]}`), 2)
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < 0 || n > 1000 {
			return
		}
		r, err := parseBulkResponse(body, n)
		if err == nil && r != nil && len(r) != n {
			t.Fatalf("%d results for %d items", len(r), n)
		}
		for _, it := range r {
			classify(it, true)
			it.errorText()
		}
	})
}

// FuzzScanObject checks scanObject against encoding/json.
func FuzzScanObject(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1} `, `{"@timestamp":1}`, `{"\u0040timestamp":null}`, `{"a":[1,-2.5e+3,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"]}`,
		`{"a":{"@timestamp":1}}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":1,}`, `{,}`, `{"a" 1}`, `[1]`, `{"a":1}x`,
		`{"a":"\ud800"}`, "{\"\xff\":\"\xfe\"}", `{"a":[[[[]]]]}`, `{"a":tru}`, `{"a":1e}`, `{"a":{"b":}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ok, has := scanObject(b, "@timestamp")
		trimmed := trimSpace(b)
		wantOK := json.Valid(b) && len(trimmed) > 0 && trimmed[0] == '{'
		if ok != wantOK {
			t.Fatalf("scanObject(%q) = %v, json.Valid says %v", b, ok, wantOK)
		}
		if !ok {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("valid object %q does not decode: %v", b, err)
		}
		if _, want := m["@timestamp"]; has != want {
			t.Fatalf("scanObject(%q) has @timestamp %v, want %v", b, has, want)
		}
	})
}

func TestScanObjectDepth(t *testing.T) {
	deep := func(n int) []byte {
		return []byte(`{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	for _, n := range []int{9998, 9999, 10000, 20000} {
		b := deep(n)
		if ok, _ := scanObject(b, "x"); ok != json.Valid(b) {
			t.Errorf("depth %d: scanObject %v, json.Valid %v", n, ok, json.Valid(b))
		}
	}
}

// unsorted returns m as headers in reverse key order, so that a document
// whose fields come out sorted was sorted by the serializer.
func unsorted(m map[string]string) event.Headers {
	h := event.HeadersOf(m)
	slices.Reverse(h)
	return h
}
