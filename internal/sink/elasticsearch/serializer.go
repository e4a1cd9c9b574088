package elasticsearchsink

import (
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/event"
)

// Serializer is how an event becomes a document: the serializer property.
type Serializer int

const (
	// LogStash is Flume's ElasticSearchLogStashEventSerializer, Flume's
	// default: the document Logstash's (v0) event format has, which Kibana
	// and Flume users' index templates expect.
	LogStash Serializer = iota
	// Dynamic is Flume's ElasticSearchDynamicSerializer: the body and each
	// header as top-level fields.
	Dynamic
	// Sluice is sluice's own shape (the only one before Flume's were
	// added): a JSON object body as is, else message plus headers.
	Sluice
)

// serializerNames maps the serializer property (lower-cased) to a Serializer.
var serializerNames = map[string]Serializer{
	"org.apache.flume.sink.elasticsearch.elasticsearchlogstasheventserializer": LogStash,
	"logstash": LogStash,
	"org.apache.flume.sink.elasticsearch.elasticsearchdynamicserializer": Dynamic,
	"dynamic": Dynamic,
	"sluice":  Sluice,
}

// parseSerializer reads the serializer property.
func parseSerializer(s string) (Serializer, bool) {
	ser, ok := serializerNames[strings.ToLower(strings.TrimSpace(s))]
	return ser, ok
}

// The LogStash serializer, as Flume's writes it:
//
//	{"@message": <body>, "@timestamp": <time>, "@source": <source header>,
//	 "@type": <type header>, "@source_host": <host header>,
//	 "@source_path": <src_path header>, "@fields": {<every header>}}
//
// A header feeds its @ field only when it is not blank and the header
// named like the @ field (such as "@source_host") is blank: Flume's rule,
// "as long as the logstash fields are not already present"; such @ headers
// stay in @fields like every other header. A body or header value that is
// a JSON object goes in as that object, anything else as a string (non-UTF-8
// bytes become U+FFFD), as Flume's ContentBuilderUtil does.
//
// @timestamp is the timestamp header (epoch milliseconds, written as ISO
// 8601 UTC with milliseconds, as Elasticsearch's builder writes a Date).
// Where Flume's default client would index at "now" when there is no
// timestamp header, sluice takes the time the agent received the event; and
// where Flume writes no @timestamp at all (an "@timestamp" header and no
// timestamp header) sluice writes that header's value, so no document
// falls out of Kibana's time filter.
var logstashFields = [...]struct{ field, header string }{
	{"@source", "source"},
	{"@type", "type"},
	{"@source_host", "host"},
	{"@source_path", "src_path"},
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// appendLogStash appends the LogStash document of e (no trailing newline).
func appendLogStash(dst []byte, e *event.Event, ms int64, text string, keys event.Headers) ([]byte, event.Headers) {
	dst = append(dst, `{"@message":`...)
	dst = appendField(dst, e.Body)
	dst = append(dst, `,"@timestamp":`...)
	if ts := e.Headers.Value("@timestamp"); !blank(ts) {
		if n, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64); err == nil {
			ms, text = n, ""
		} else {
			ms, text = 0, ts
		}
	}
	dst = appendTimestamp(dst, ms, text)
	for _, f := range logstashFields {
		if v := e.Headers.Value(f.header); !blank(v) && blank(e.Headers.Value(f.field)) {
			dst = append(dst, ',')
			dst = appendJSONString(dst, f.field)
			dst = append(dst, ':')
			dst = appendField(dst, bytesOf(v))
		}
	}
	dst = append(dst, `,"@fields":{`...)
	keys = e.Headers.AppendSorted(keys[:0])
	for i, kv := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, kv.Key)
		dst = append(dst, ':')
		dst = appendField(dst, bytesOf(kv.Value))
	}
	return append(dst, "}}"...), keys
}

// appendDynamic appends the Dynamic document of e: {"body": <body>,
// <header>: <value>, ...}, values as appendField writes them. A header
// named "body" is left out: the body holds that name (Flume would write the
// key twice, which Elasticsearch refuses).
func appendDynamic(dst []byte, e *event.Event, keys event.Headers) ([]byte, event.Headers) {
	dst = append(dst, `{"body":`...)
	dst = appendField(dst, e.Body)
	keys = e.Headers.AppendSorted(keys[:0])
	for _, kv := range keys {
		if kv.Key == "body" {
			continue
		}
		dst = append(dst, ',')
		dst = appendJSONString(dst, kv.Key)
		dst = append(dst, ':')
		dst = appendField(dst, bytesOf(kv.Value))
	}
	return append(dst, '}'), keys
}

// appendField appends a value as Flume's ContentBuilderUtil.appendField
// does: data that is a JSON object (after leading white space) goes in as
// that object, on one line; anything else as a JSON string.
func appendField(dst []byte, data []byte) []byte {
	obj := trimSpace(data)
	if len(obj) >= 2 && obj[0] == '{' {
		if ok, _ := scanObject(obj, ""); ok {
			start := len(dst)
			dst = append(dst, obj...)
			for i := start; i < len(dst); i++ {
				if dst[i] == '\n' || dst[i] == '\r' {
					dst[i] = ' ' // between tokens: valid JSON has none inside strings
				}
			}
			return dst
		}
	}
	return appendJSONBytes(dst, data)
}
