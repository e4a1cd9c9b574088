package elasticsearchsink

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
)

// TestLogStashDocument checks the LogStash shape against Flume's serializer:
// the body in @message (a JSON object as an object), the timestamp header
// as @timestamp, source/type/host/src_path as @source/@type/@source_host/
// @source_path unless the @ header is set, every header under @fields.
func TestLogStashDocument(t *testing.T) {
	const ts = "1700000000123"
	const iso = `"2023-11-14T22:13:20.123Z"`
	f := func(name, body string, headers map[string]string, want string) {
		t.Helper()
		e := event.Event{Headers: unsorted(headers), Body: []byte(body)}
		ms, text := eventTime(&e, 0)
		got, _ := appendLogStash(nil, &e, ms, text, nil)
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if !json.Valid(got) || bytes.ContainsAny(got, "\r\n") {
			t.Errorf("%s: not one line of valid JSON: %q", name, got)
		}
	}
	f("every mapped header", "GET /index.html 200", map[string]string{
		"timestamp": ts, "host": "web-1", "source": "/var/log/access.log", "type": "access", "src_path": "/var/log", "user": "jordan"},
		`{"@message":"GET /index.html 200","@timestamp":`+iso+`,"@source":"/var/log/access.log","@type":"access","@source_host":"web-1","@source_path":"/var/log",`+
			`"@fields":{"host":"web-1","source":"/var/log/access.log","src_path":"/var/log","timestamp":"`+ts+`","type":"access","user":"jordan"}}`)
	f("an @ header keeps its field from the plain header", "x", map[string]string{"timestamp": ts, "host": "web-1", "@source_host": "proxy-9"},
		`{"@message":"x","@timestamp":`+iso+`,"@fields":{"@source_host":"proxy-9","host":"web-1","timestamp":"`+ts+`"}}`)
	f("blank headers map to nothing", "x", map[string]string{"timestamp": ts, "type": "  ", "source": ""},
		`{"@message":"x","@timestamp":`+iso+`,"@fields":{"source":"","timestamp":"`+ts+`","type":"  "}}`)
	f("a JSON body is an object", ` {"level":"info","n":1} `, map[string]string{"timestamp": ts},
		`{"@message":{"level":"info","n":1},"@timestamp":`+iso+`,"@fields":{"timestamp":"`+ts+`"}}`)
	f("pretty JSON body on one line", "{\n \"a\": 1\n}", map[string]string{"timestamp": ts},
		`{"@message":{  "a": 1 },"@timestamp":`+iso+`,"@fields":{"timestamp":"`+ts+`"}}`)
	f("invalid JSON body is text", `{"a":`, map[string]string{"timestamp": ts},
		`{"@message":"{\"a\":","@timestamp":`+iso+`,"@fields":{"timestamp":"`+ts+`"}}`)
	f("a JSON header value is an object", "x", map[string]string{"timestamp": ts, "ctx": `{"k":"v"}`},
		`{"@message":"x","@timestamp":`+iso+`,"@fields":{"ctx":{"k":"v"},"timestamp":"`+ts+`"}}`)
	f("no headers: receipt time", "a\xffb", nil, `{"@message":"a\ufffdb","@timestamp":"1970-01-01T00:00:00.000Z","@fields":{}}`)
	f("@timestamp header wins", "x", map[string]string{"timestamp": ts, "@timestamp": "2024-05-06T07:08:09Z"},
		`{"@message":"x","@timestamp":"2024-05-06T07:08:09Z","@fields":{"@timestamp":"2024-05-06T07:08:09Z","timestamp":"`+ts+`"}}`)
	f("numeric @timestamp header", "x", map[string]string{"@timestamp": ts},
		`{"@message":"x","@timestamp":`+iso+`,"@fields":{"@timestamp":"`+ts+`"}}`)
}

// TestDynamicDocument checks the Dynamic shape against Flume's serializer:
// the body in "body", each header a top-level field.
func TestDynamicDocument(t *testing.T) {
	f := func(name, body string, headers map[string]string, want string) {
		t.Helper()
		e := event.Event{Headers: unsorted(headers), Body: []byte(body)}
		got, _ := appendDynamic(nil, &e, nil)
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: not valid JSON: %q", name, got)
		}
	}
	f("text and headers", "line \"1\"", map[string]string{"timestamp": "1700000000123", "host": "web-1"},
		`{"body":"line \"1\"","host":"web-1","timestamp":"1700000000123"}`)
	f("a JSON body is an object", `{"a":[1,2]}`, nil, `{"body":{"a":[1,2]}}`)
	f("a header named body is left out", "b", map[string]string{"body": "h", "x": `{"y":true}`}, `{"body":"b","x":{"y":true}}`)
}

func TestSerializerProperty(t *testing.T) {
	for in, want := range map[string]Serializer{
		"": LogStash, "org.apache.flume.sink.elasticsearch.ElasticSearchLogStashEventSerializer": LogStash, "logstash": LogStash,
		"org.apache.flume.sink.elasticsearch.ElasticSearchDynamicSerializer": Dynamic, "DYNAMIC": Dynamic, "sluice": Sluice,
	} {
		m := map[string]string{"hostNames": "es1"}
		if in != "" {
			m["serializer"] = in
		}
		w, err := buildProps(t, m)
		if err != nil || w.opt.Serializer != want {
			t.Errorf("serializer %q: %v %v, want %v", in, w.opt.Serializer, err, want)
		}
	}
	if _, err := buildProps(t, map[string]string{"hostNames": "es1", "serializer": "com.example.Mine"}); err == nil {
		t.Error("an unknown serializer was accepted")
	}
}

func FuzzFlumeSerializers(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "host", "h")
	f.Add([]byte("plain \xff"), "@source_host", `{"x":`)
	f.Add([]byte(" {\n} "), "timestamp", "abc")
	f.Fuzz(func(t *testing.T, body []byte, k, v string) {
		e := event.Event{Headers: event.HeadersOf(map[string]string{k: v}), Body: body}
		ms, text := eventTime(&e, 1)
		for _, doc := range [][]byte{
			func() []byte { d, _ := appendLogStash(nil, &e, ms, text, nil); return d }(),
			func() []byte { d, _ := appendDynamic(nil, &e, nil); return d }(),
		} {
			if bytes.ContainsAny(doc, "\r\n") {
				t.Fatalf("document spans lines: %q", doc)
			}
			var m map[string]any
			if err := json.Unmarshal(doc, &m); err != nil {
				t.Fatalf("document %q is not a JSON object: %v", doc, err)
			}
		}
	})
}
