package elasticsearchsink

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

// flumeEvents are events as Flume users' agents produce them: the headers
// Flume's LogStash serializer maps (timestamp, host, source, type,
// src_path), one that an @ header overrides, a JSON body, a JSON header
// value, a body that is not UTF-8.
func flumeEvents(run string, hourAgo int64) []event.Event {
	ts := strconv.FormatInt(hourAgo, 10)
	return []event.Event{
		{Headers: event.HeadersOf(map[string]string{"run": run, "seq": "0", "timestamp": ts, "host": "web-1", "source": "/var/log/access.log", "type": "access", "src_path": "/var/log"}),
			Body: []byte("GET /index.html 200")},
		{Headers: event.HeadersOf(map[string]string{"run": run, "seq": "1", "timestamp": ts, "host": "web-1"}),
			Body: []byte(`{"level":"warn","msg":"disk 91% full"}`)},
		{Headers: event.HeadersOf(map[string]string{"run": run, "seq": "2", "host": "web-2", "@source_host": "proxy-9", "type": "app"}),
			Body: []byte("no timestamp header")},
		{Headers: event.HeadersOf(map[string]string{"run": run, "seq": "3", "timestamp": ts, "ctx": `{"user":"jordan"}`}),
			Body: []byte("a\xffb")},
	}
}

// TestVictoriaLogsFlumeSerializers indexes Flume-style events with each of
// Flume's serializers into VictoriaLogs, queries them back and checks every
// field of every document against what Flume's user guide and serializers
// describe (VictoriaLogs flattens objects into dotted names).
func TestVictoriaLogsFlumeSerializers(t *testing.T) {
	base := startVictoriaLogs(t)
	hourAgo := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UnixMilli()
	ts := strconv.FormatInt(hourAgo, 10)
	iso := time.UnixMilli(hourAgo).UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name  string
		props map[string]string
		query string
		want  []map[string]string // by seq; "_time" "now" means the receipt time
	}{
		{
			name: "logstash, the default",
			props: map[string]string{
				"query._msg_field": "@message", "query._time_field": "@timestamp", "query._stream_fields": "@source_host",
			},
			query: `"@fields.run":=logstash`,
			want: []map[string]string{
				{"_msg": "GET /index.html 200", "_time": iso, "@source": "/var/log/access.log", "@type": "access", "@source_host": "web-1",
					"@source_path": "/var/log", "@fields.run": "logstash", "@fields.seq": "0", "@fields.timestamp": ts, "@fields.host": "web-1",
					"@fields.source": "/var/log/access.log", "@fields.type": "access", "@fields.src_path": "/var/log"},
				{"@message.level": "warn", "@message.msg": "disk 91% full", "_time": iso, "@source_host": "web-1",
					"@fields.run": "logstash", "@fields.seq": "1", "@fields.timestamp": ts, "@fields.host": "web-1"},
				{"_msg": "no timestamp header", "_time": "now", "@type": "app",
					"@fields.run": "logstash", "@fields.seq": "2", "@fields.host": "web-2", "@fields.@source_host": "proxy-9", "@fields.type": "app"},
				{"_msg": "a\ufffdb", "_time": iso, "@fields.run": "logstash", "@fields.seq": "3", "@fields.timestamp": ts, "@fields.ctx.user": "jordan"},
			},
		},
		{
			name: "dynamic",
			props: map[string]string{
				"serializer":       "org.apache.flume.sink.elasticsearch.ElasticSearchDynamicSerializer",
				"query._msg_field": "body", "query._stream_fields": "host",
			},
			query: `run:=dynamic`,
			want: []map[string]string{
				{"_msg": "GET /index.html 200", "_time": "now", "run": "dynamic", "seq": "0", "timestamp": ts, "host": "web-1", "source": "/var/log/access.log",
					"type": "access", "src_path": "/var/log"},
				{"body.level": "warn", "body.msg": "disk 91% full", "_time": "now", "run": "dynamic", "seq": "1", "timestamp": ts, "host": "web-1"},
				{"_msg": "no timestamp header", "_time": "now", "run": "dynamic", "seq": "2", "host": "web-2", "@source_host": "proxy-9", "type": "app"},
				{"_msg": "a\ufffdb", "_time": "now", "run": "dynamic", "seq": "3", "timestamp": ts, "ctx.user": "jordan"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := map[bool]string{true: "logstash", false: "dynamic"}[tc.props["serializer"] == ""]
			props := map[string]string{"hostNames": base + "/insert/elasticsearch/", "batchSize": "100"}
			maps.Copy(props, tc.props)
			ch := newChannel(t)
			s, _ := newSinkAsIs(t, ch, props)
			before := time.Now().Add(-time.Second)
			if err := testutil.PutCommit(ch, flumeEvents(run, hourAgo)); err != nil {
				t.Fatal(err)
			}
			drain(t, s, ch, 0)
			after := time.Now().Add(time.Second)
			rows := vlQuery(t, base, tc.query)
			if len(rows) != len(tc.want) {
				t.Fatalf("%d documents, want %d: %v", len(rows), len(tc.want), rows)
			}
			for _, r := range rows {
				seq := r["@fields.seq"] + r["seq"]
				i, err := strconv.Atoi(seq)
				if err != nil || i < 0 || i >= len(tc.want) {
					t.Fatalf("document without a valid seq: %v", r)
				}
				want := tc.want[i]
				if want["_time"] == "now" {
					got, err := time.Parse(time.RFC3339Nano, r["_time"])
					if err != nil || got.Before(before) || got.After(after) {
						t.Errorf("document %d: _time %q, want the receipt time", i, r["_time"])
					}
				}
				for k, v := range want {
					if k == "_time" && v == "now" {
						continue
					}
					if r[k] != v {
						t.Errorf("document %d: %s = %q, want %q", i, k, r[k], v)
					}
				}
				for k := range r {
					if _, ok := want[k]; !ok && !vlOwnField(k) {
						t.Errorf("document %d has field %s = %q, which Flume's serializer would not write", i, k, r[k])
					}
				}
			}
			if t.Failed() {
				for _, r := range rows {
					keys := slices.Sorted(maps.Keys(r))
					t.Logf("row: %v", fmt.Sprint(keys))
				}
			}
		})
	}
}

// vlOwnField reports fields VictoriaLogs adds to every row.
func vlOwnField(k string) bool {
	return k == "_stream" || k == "_stream_id" || k == "_time" || k == "_msg"
}
