package elasticsearchsink

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

func buildProps(t testing.TB, m map[string]string) (*Writer, error) {
	t.Helper()
	p := config.FromMap("a1.sinks.k1.", m)
	_, w := build(flow.Env{Name: "k1", Type: "elasticsearch", Logger: quiet}, p)
	p.Unused()
	return w, p.Err()
}

func TestIndexNames(t *testing.T) {
	ts := "1700000000123" // 2023-11-14T22:13:20.123Z, 2023-11-15 in Tokyo
	f := func(props map[string]string, headers map[string]string, want string) {
		t.Helper()
		props["hostNames"] = "es1"
		w, err := buildProps(t, props)
		if err != nil {
			t.Fatal(err)
		}
		if headers == nil {
			headers = map[string]string{"timestamp": ts}
		}
		ms := int64(1700000000123)
		if got := string(w.opt.Index.appendName(nil, event.HeadersOf(headers), ms)); got != want {
			t.Errorf("%v: index %q, want %q", props, got, want)
		}
	}
	f(map[string]string{}, nil, "flume-2023-11-14")
	f(map[string]string{"indexName": "logs"}, nil, "logs-2023-11-14")
	f(map[string]string{"indexName": "logs-%{app}"}, map[string]string{"app": "web"}, "logs-web-2023-11-14")
	f(map[string]string{"indexName": "logs-%{app}"}, map[string]string{}, "logs--2023-11-14")
	f(map[string]string{"indexName": "logs-%Y.%m.%d-%H"}, nil, "logs-2023.11.14-22")
	f(map[string]string{"indexName": "logs", "indexNameBuilder": "org.apache.flume.sink.elasticsearch.SimpleIndexNameBuilder"}, nil, "logs")
	f(map[string]string{"indexName": "logs", "indexNameBuilder.dateFormat": "yyyy.MM", "indexNameBuilder.timeZone": "Asia/Tokyo"}, nil, "logs-2023.11")
	f(map[string]string{"indexName": "logs", "indexNameBuilder.dateFormat": "yyyy.MM.dd", "indexNameBuilder.timeZone": "Asia/Tokyo"}, nil, "logs-2023.11.15")
	f(map[string]string{"indexName": "logs-app", "dataStream": "true"}, nil, "logs-app")
	f(map[string]string{"indexName": "100%% %{a}"}, map[string]string{"a": "x"}, "100% x-2023-11-14")
}

func TestConfigErrors(t *testing.T) {
	f := func(m map[string]string, want string) {
		t.Helper()
		_, err := buildProps(t, m)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want one containing %q", m, err, want)
		}
	}
	f(map[string]string{}, "hostNames: missing required property")
	f(map[string]string{"hostNames": " , "}, "no host given")
	f(map[string]string{"hostNames": "ftp://es1"}, "scheme must be http or https")
	f(map[string]string{"hostNames": "http://u:p@es1"}, "holds credentials")
	f(map[string]string{"hostNames": "es1", "dataStream": "true", "opType": "index"}, "only accept op_type create")
	f(map[string]string{"hostNames": "es1", "apiKey": "k", "username": "u"}, "either apiKey or username")
	f(map[string]string{"hostNames": "es1", "compression": "zstd"}, `"zstd" is not one of none, gzip`)
	f(map[string]string{"hostNames": "es1", "indexName": "logs-%q"}, "unknown escape %q")
	f(map[string]string{"hostNames": "es1", "indexName": "logs-%{x"}, "without a closing }")
	f(map[string]string{"hostNames": "es1", "serializer": "com.example.MySerializer"}, "is not supported")
	f(map[string]string{"hostNames": "es1", "indexNameBuilder": "com.example.Builder"}, "is not supported")
	f(map[string]string{"hostNames": "es1", "indexNameBuilder.dateFormat": "yyyy-ww"}, "pattern letter 'w'")
	f(map[string]string{"hostNames": "es1", "indexNameBuilder.timeZone": "Mars/Base"}, "unknown time zone")
	f(map[string]string{"hostNames": "es1", "maxInFlight": "0"}, "out of range")
	f(map[string]string{"hostNames": "es1", "bulk.maxbytes": "5"}, "did you mean a1.sinks.k1.bulk.maxBytes?")
	f(map[string]string{"hostNames": "https://es1", "truststore": "/x.jceks", "truststore-type": "JCEKS"}, "JCEKS stores are not read by sluice")
}

// TestFlumeConfig: a Flume 1.9 ElasticSearchSink configuration is accepted
// as is (its transport-client settings are ignored).
func TestFlumeConfig(t *testing.T) {
	w, err := buildProps(t, map[string]string{
		"hostNames": "es1:9300, es2", "indexName": "foo_index", "indexType": "bar_type", "clusterName": "foobar_cluster",
		"batchSize": "500", "ttl": "5d", "client": "transport",
		"serializer":   "org.apache.flume.sink.elasticsearch.ElasticSearchDynamicSerializer",
		"serializer.x": "y",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"http://es1:9300/_bulk?filter_path=errors%2Citems.%2A.status%2Citems.%2A.error",
		"http://es2:9200/_bulk?filter_path=errors%2Citems.%2A.status%2Citems.%2A.error",
	}
	if strings.Join(w.opt.BulkURLs, " ") != strings.Join(want, " ") {
		t.Fatalf("bulk URLs %q, want %q", w.opt.BulkURLs, want)
	}
}

func TestBulkURLs(t *testing.T) {
	w, err := buildProps(t, map[string]string{
		"hostNames": "https://es.example.com/base/, [::1]:9201/proxy, 10.0.0.1", "pipeline": "geo",
		"query._msg_field": "message", "query.filter_path": "errors",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"https://es.example.com/base/_bulk?_msg_field=message&filter_path=errors&pipeline=geo",
		"http://[::1]:9201/proxy/_bulk?_msg_field=message&filter_path=errors&pipeline=geo",
		"http://10.0.0.1:9200/_bulk?_msg_field=message&filter_path=errors&pipeline=geo",
	}
	if strings.Join(w.opt.BulkURLs, " ") != strings.Join(want, " ") {
		t.Fatalf("bulk URLs\n%q\nwant\n%q", w.opt.BulkURLs, want)
	}
	if !w.opt.TLS.Enabled {
		t.Fatal("an https host does not enable TLS")
	}
}

// TestRequests checks what goes on the wire: authentication, gzip, the
// content type, the action lines (op type, index, id) and the metrics.
func TestRequests(t *testing.T) {
	for _, tc := range []struct {
		name, auth string
		props      map[string]string
	}{
		{"basic", "Basic " + base64.StdEncoding.EncodeToString([]byte("elastic:s3cret")),
			map[string]string{"username": "elastic", "password": "s3cret"}},
		{"api key", "ApiKey VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==",
			map[string]string{"apiKey": "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==", "compression": "gzip"}},
		{"data stream", "", map[string]string{"dataStream": "true", "indexName": "logs-app-default", "idHeader": "id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeES(t)
			props := map[string]string{"hostNames": f.srv.URL, "batchSize": "10", "serializer": "sluice"} // the fake stores documents by seq
			for k, v := range tc.props {
				props[k] = v
			}
			ch := newChannel(t)
			reg := metrics.NewRegistry("a1")
			p := config.FromMap("a1.sinks.k1.", props)
			s, _ := build(flow.Env{Name: "k1", Type: "elasticsearch", Logger: quiet, Channel: ch, Metrics: reg}, p)
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer s.Stop(context.Background())
			if err := testutil.PutCommit(ch, seqEvents(0, 25, nil)); err != nil {
				t.Fatal(err)
			}
			drain(t, s, ch, 0)
			reqs := f.requestLog()
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 3", len(reqs))
			}
			for _, r := range reqs {
				if got := r.Header.Get("Authorization"); got != tc.auth {
					t.Errorf("Authorization %q, want %q", got, tc.auth)
				}
				if r.Gzipped != (tc.props["compression"] == "gzip") {
					t.Errorf("gzipped %v", r.Gzipped)
				}
				if ct := r.Header.Get("Content-Type"); ct != "application/x-ndjson" {
					t.Errorf("Content-Type %q", ct)
				}
				it := r.Items[0]
				if tc.name == "data stream" {
					if it.Op != "create" || it.Index != "logs-app-default" || !strings.HasPrefix(it.ID, "doc-") {
						t.Errorf("data stream action %+v", it)
					}
				} else if it.Op != "index" || !strings.HasPrefix(it.Index, "flume-") || it.ID != "" {
					t.Errorf("action %+v", it)
				}
			}
			if got := len(f.stored()); got != 25 {
				t.Fatalf("stored %d, want 25", got)
			}
			text := promText(t, reg)
			for _, want := range []string{
				`sluice_sink_bulk_request_total{agent="a1",component="k1",type="elasticsearch"} 3`,
				`sluice_sink_event_drain_success_total{agent="a1",component="k1",type="elasticsearch"} 25`,
				`sluice_stage_latency_seconds_count{agent="a1",component="k1",stage="bulk_request"} 3`,
				`sluice_sink_bulk_request_bytes_total`, `sluice_sink_dead_letter_total`, `sluice_sink_bulk_item_rejected_total`,
			} {
				if !strings.Contains(text, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}

func promText(t *testing.T, reg *metrics.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(reg, func() error { return nil }).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/prometheus", nil))
	return rec.Body.String()
}

// TestTLSWithCAFile indexes over HTTPS into a server whose certificate is
// trusted through caFile only.
func TestTLSWithCAFile(t *testing.T) {
	f := &fakeES{t: t, docs: map[string][]byte{}}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	cert := f.srv.Certificate()
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ch := newChannel(t)
	s, _ := newSink(t, ch, map[string]string{"hostNames": f.srv.URL, "caFile": ca})
	if err := testutil.PutCommit(ch, seqEvents(0, 5, nil)); err != nil {
		t.Fatal(err)
	}
	drain(t, s, ch, 0)
	if got := len(f.stored()); got != 5 {
		t.Fatalf("stored %d over TLS, want 5", got)
	}

	// Without the CA the server is not trusted: the events stay.
	ch2 := newChannel(t)
	s2, _ := newSink(t, ch2, map[string]string{"hostNames": f.srv.URL, "retry.maxAttempts": "1"})
	if err := testutil.PutCommit(ch2, seqEvents(0, 5, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Process(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted server: %v", err)
	}
	if ch2.Len() != 5 {
		t.Fatalf("channel holds %d, want the 5 events back", ch2.Len())
	}
}
