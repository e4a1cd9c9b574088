package httpsink

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// endpoint is a real HTTP server that records every request and answers
// with the status a body starting "status=NNN" asks for (200 otherwise).
type endpoint struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []*http.Request
	bodys []string
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.reqs = append(e.reqs, r)
		e.bodys = append(e.bodys, string(b))
		e.mu.Unlock()
		status := 200
		if s, ok := strings.CutPrefix(string(b), "status="); ok {
			status, _ = strconv.Atoi(s[:3])
		}
		if status == 302 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) bodies() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.bodys...)
}

// TestSinkSuite runs the sink contract against a real HTTP server that
// answers 503 while refusing (defaultRollback: the event stays in the
// channel) and holds requests unanswered while stalled.
func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		gate := sinktest.NewGate()
		var got sinktest.Bodies
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if !gate.Admit(r.Context()) {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			got.Add(string(b))
		}))
		t.Cleanup(srv.Close)
		p := config.FromMap("a1.sinks.k1.", map[string]string{"endpoint": srv.URL + "/events", "batchSize": "100", "requestTimeout": "20000"})
		s, err := New(env, p)
		if err != nil || p.Err() != nil {
			t.Fatal(err, p.Err())
		}
		return s, gate.Downstream(got.Get)
	})
}

type fixture struct {
	ch   flow.Channel
	reg  *metrics.Registry
	sink flow.Sink
}

func start(t *testing.T, props map[string]string) *fixture {
	t.Helper()
	reg := metrics.NewRegistry("a1")
	ch, err := memorychannel.New(flow.Env{Agent: "a1", Name: "c1", Type: "memory", Metrics: reg}, config.FromMap("a1.channels.c1.", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	env := flow.Env{Agent: "a1", Name: "k1", Type: "http", Metrics: reg, Logger: slog.New(slog.DiscardHandler), Channel: ch}
	return &fixture{ch: ch, reg: reg, sink: sinktest.Start(t, New, env, props)}
}

func (f *fixture) dropped() float64 {
	var m dto.Metric
	if err := f.reg.Dropped("k1", "http_status").Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func (f *fixture) counter(name string) string {
	return testutil.ComponentMetric(f.reg, metrics.KindSink, "k1", name)
}

// The User Guide's example config, event by event: the headers it sets, a
// 200 taken and counted, a 4XX taken, counted (incrementMetrics.4XX) and
// reported as dropped, a 503 left in the channel (defaultRollback), an
// empty event taken without a request.
func TestUserGuideExample(t *testing.T) {
	e := newEndpoint(t)
	f := start(t, map[string]string{
		"endpoint": e.URL + "/someuri", "connectTimeout": "2000", "requestTimeout": "2000",
		"acceptHeader": "application/json", "contentTypeHeader": "application/json",
		"defaultBackoff": "true", "defaultRollback": "true", "defaultIncrementMetrics": "false",
		"backoff.4XX": "false", "rollback.4XX": "false", "incrementMetrics.4XX": "true",
		"backoff.200": "false", "rollback.200": "false", "incrementMetrics.200": "true",
	})
	steps := []struct {
		body     string
		err      bool // left in the channel
		requests int
		drained  string
		dropped  float64
	}{
		{`{"a":1}`, false, 1, "1", 0},
		{"status=404", false, 2, "2", 1},
		{"status=503", true, 3, "2", 1},
		{"", false, 3, "2", 1},
	}
	for _, st := range steps {
		if err := testutil.PutCommit(f.ch, []event.Event{{Body: []byte(st.body)}}); err != nil {
			t.Fatal(err)
		}
		_, err := f.sink.Process(context.Background())
		if (err != nil) != st.err {
			t.Fatalf("%q: Process error %v, want error %v", st.body, err, st.err)
		}
		if got := len(e.bodies()); got != st.requests {
			t.Fatalf("%q: %d requests in all, want %d", st.body, got, st.requests)
		}
		if got := f.counter("EventDrainSuccessCount"); got != st.drained {
			t.Errorf("%q: EventDrainSuccessCount %s, want %s", st.body, got, st.drained)
		}
		if got := f.dropped(); got != st.dropped {
			t.Errorf("%q: dropped %v, want %v", st.body, got, st.dropped)
		}
		if st.err {
			if f.ch.Len() != 1 {
				t.Fatalf("%q: channel holds %d events, want the refused one", st.body, f.ch.Len())
			}
			_, _ = testutil.TakeCommit(f.ch, 1, time.Second) // clear it for the next step
		} else if f.ch.Len() != 0 {
			t.Fatalf("%q: channel holds %d events, want none", st.body, f.ch.Len())
		}
	}
	e.mu.Lock()
	r := e.reqs[0]
	e.mu.Unlock()
	if r.Method != "POST" || r.URL.Path != "/someuri" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Accept") != "application/json" {
		t.Errorf("request %s %s Content-Type %q Accept %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Accept"))
	}
	if b := e.bodies()[0]; b != `{"a":1}` {
		t.Errorf("body %q, want the event's body", b)
	}
}

// Rules: a code wins over its class, its class over the default; 2XX is
// delivered unless overridden; a redirect is not followed but decided by
// the rules; an endpoint that is down leaves the event in the channel.
func TestStatusRules(t *testing.T) {
	e := newEndpoint(t)
	f := start(t, map[string]string{"endpoint": e.URL, "rollback.5XX": "false", "rollback.503": "true", "rollback.201": "true"})
	for _, tc := range []struct {
		body string
		kept bool
	}{
		{"plain", false}, {"status=500", false}, {"status=503", true}, {"status=201", true},
		{"status=404", true}, {"status=302", true},
	} {
		if err := testutil.PutCommit(f.ch, []event.Event{{Body: []byte(tc.body)}}); err != nil {
			t.Fatal(err)
		}
		_, err := f.sink.Process(context.Background())
		if kept := f.ch.Len() == 1; kept != tc.kept || (err != nil) != tc.kept {
			t.Errorf("%q: kept in channel %v (err %v), want %v", tc.body, kept, err, tc.kept)
		}
		_, _ = testutil.TakeCommit(f.ch, 1, 10*time.Millisecond)
	}
	if n := len(e.bodies()); n != 6 {
		t.Errorf("%d requests, want 6 (the redirect not followed)", n)
	}

	e.Close()
	if err := testutil.PutCommit(f.ch, []event.Event{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sink.Process(context.Background()); err == nil || f.ch.Len() != 1 {
		t.Fatalf("endpoint down: err %v, channel %d; want an error and the event kept", err, f.ch.Len())
	}
	// The 503, the 201, the 404 and the 302 were failed writes too.
	if got := f.counter("EventWriteFail"); got != "5" {
		t.Errorf("EventWriteFail %s, want 5", got)
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{}, "endpoint: missing required property"},
		{map[string]string{"endpoint": "localhost:8080/x"}, "is not an http:// or https:// URL"},
		{map[string]string{"endpoint": "http://h/", "rollback.6XX": "true"}, `"6XX" is not a status code`},
		{map[string]string{"endpoint": "http://h/", "connectTimeout": "0"}, "out of range"},
	} {
		p := config.FromMap("a1.sinks.k1.", tc.props)
		if _, err := New(flow.Env{Agent: "a1", Name: "k1", Metrics: metrics.NewRegistry("a1")}, p); err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.props, err, tc.want)
		}
	}
}
