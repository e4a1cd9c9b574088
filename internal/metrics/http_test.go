package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redact"
)

// serve starts Handler on 127.0.0.1:0 and returns its base URL.
func serve(t *testing.T, r *Registry, status func() Status) string {
	t.Helper()
	srv, err := Serve(context.Background(), "127.0.0.1:0", HandlerWithStatus(r, status), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return "http://" + srv.Addr()
}

func TestHandler(t *testing.T) {
	r, _, _, _ := testRegistry(t)
	st := Status{Agent: "a1", State: "running", Components: []ComponentStatus{
		{Kind: "source", Name: "r1", Type: "netcat", State: "running"},
		{Kind: "sink", Name: "k1", Type: "avro", State: "running"},
	}}
	var mu sync.Mutex
	base := serve(t, r, func() Status {
		mu.Lock()
		defer mu.Unlock()
		return st
	})

	tests := []struct {
		method, path string
		status       int
		ctype        string // prefix
		body         string // substring
	}{
		{"GET", "/metrics", 200, "application/json;charset=utf-8", `"SOURCE.r1":{`},
		{"GET", "/METRICS", 200, "application/json;charset=utf-8", `"Type":"CHANNEL"`},
		{"POST", "/Metrics", 200, "application/json;charset=utf-8", `"SINK.k1"`},
		{"GET", "/", 200, "text/html", `href="./metrics"`},
		{"GET", "/", 200, "text/html", `href="./metrics/prometheus"`},
		{"GET", "/metrics/prometheus", 200, "text/plain; version=0.0.4", `sluice_source_event_received_total{agent="a1",component="r1",type="netcat"} 7`},
		{"GET", "/healthz", 200, "text/plain", "ok"},
		{"GET", "/nope", 404, "text/plain", ""},
		{"GET", "/metrics/", 404, "text/plain", ""},
		{"TRACE", "/metrics", 403, "text/plain", ""},
		{"OPTIONS", "/", 403, "text/plain", ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, base+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.ctype) {
			t.Errorf("%s %s: Content-Type %q, want %q", tt.method, tt.path, ct, tt.ctype)
		}
		if !strings.Contains(string(body), tt.body) {
			t.Errorf("%s %s: body lacks %q:\n%.500s", tt.method, tt.path, tt.body, body)
		}
		if tt.path == "/metrics" && tt.status == 200 {
			var m map[string]map[string]string
			if err := json.Unmarshal(body, &m); err != nil {
				t.Errorf("/metrics body is not Flume's JSON: %v", err)
			}
		}
		if tt.path == "/metrics/prometheus" {
			parseText(t, body)
		}
	}

	mu.Lock()
	st.Components[1].State, st.Components[1].Reason = "failed", "not running: failed to start: boom\nsecond line"
	mu.Unlock()
	code, body := get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || body != "sink k1: not running: failed to start: boom second line\n" {
		t.Errorf("unhealthy /healthz: %d %q, want 503 with one line per problem", code, body)
	}
	if code, body := get(t, base+"/livez"); code != http.StatusOK || body != "alive: running\n" {
		t.Errorf("unhealthy agent: /livez %d %q, want 200: it answers", code, body)
	}
	code, body = get(t, base+"/healthz?format=json")
	var got struct {
		Healthy bool `json:"healthy"`
		Status
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/healthz?format=json: %v\n%s", err, body)
	}
	if code != http.StatusServiceUnavailable || got.Healthy || got.Agent != "a1" || len(got.Components) != 2 ||
		got.Components[1] != st.Components[1] || got.Components[0].Reason != "" {
		t.Errorf("/healthz?format=json: %d %+v", code, got)
	}
	mu.Lock()
	st.Components[1].State, st.Components[1].Reason = "running", ""
	st.State = "stopping"
	mu.Unlock()
	if code, body := get(t, base+"/healthz"); code != http.StatusServiceUnavailable || body != "agent a1 is stopping\n" {
		t.Errorf("stopping agent: /healthz %d %q", code, body)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHandlerHealthFunc: Handler with an error func answers 503 with its text.
func TestHandlerHealthFunc(t *testing.T) {
	var unhealthy error
	srv, err := Serve(context.Background(), "127.0.0.1:0", Handler(NewRegistry("a1"), func() error { return unhealthy }), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	if code, body := get(t, "http://"+srv.Addr()+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("healthy: %d %q", code, body)
	}
	unhealthy = errors.New("sink k1 is not running")
	if code, body := get(t, "http://"+srv.Addr()+"/healthz"); code != 503 || body != "sink k1 is not running\n" {
		t.Errorf("unhealthy: %d %q", code, body)
	}
}

func TestHealthNil(t *testing.T) {
	base := serve(t, NewRegistry("a1"), nil)
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz with no health func: %d, want 200", resp.StatusCode)
	}
}

func TestServeStop(t *testing.T) {
	if _, err := Serve(context.Background(), "127.0.0.1:-1", http.NotFoundHandler(), nil, nil); err == nil {
		t.Error("Serve on a bad address: want an error")
	}

	// A request in progress finishes; then the port is closed.
	inHandler, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(inHandler)
		<-release
		_, _ = w.Write([]byte("done"))
	})
	srv, err := Serve(context.Background(), "127.0.0.1:0", h, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + srv.Addr() + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-inHandler
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(context.Background()) }()
	close(release)
	if b := <-got; b != "done" {
		t.Errorf("request in progress during Stop got %q, want done", b)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	c := http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get("http://" + srv.Addr() + "/"); err == nil {
		resp.Body.Close()
		t.Error("server still answers after Stop")
	}
}

func TestStopDeadline(t *testing.T) {
	// A handler that never finishes: Stop gives up at ctx's deadline,
	// closes the connection and still returns.
	release := make(chan struct{})
	defer close(release)
	inHandler := make(chan struct{})
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(inHandler)
		<-release
	})
	srv, err := Serve(context.Background(), "127.0.0.1:0", h, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if resp, err := http.Get("http://" + srv.Addr() + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-inHandler
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop past its deadline = %v, want DeadlineExceeded", err)
	}
}

// TestHealthNotes: a component that drains is a note, not a problem: 200
// "ok" and the note while the agent runs; at a stop, the problems and then
// the notes. The JSON carries the state and the events left.
func TestHealthNotes(t *testing.T) {
	left := int64(1234)
	st := Status{Agent: "a1", State: "running", Components: []ComponentStatus{
		{Kind: "source", Name: "r1", Type: "avro", State: "running"},
		{Kind: "channel", Name: "c2", Type: "memory", State: "draining", Note: "removed by a reload; draining: 1234 events left; deadline in 12s", Left: &left},
	}}
	var mu sync.Mutex
	srv, err := Serve(context.Background(), "127.0.0.1:0", HandlerWithStatus(NewRegistry("a1"), func() Status {
		mu.Lock()
		defer mu.Unlock()
		return st
	}), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	base := "http://" + srv.Addr() + "/healthz"
	if code, body := get(t, base); code != 200 || body != "ok\nchannel c2: removed by a reload; draining: 1234 events left; deadline in 12s\n" {
		t.Errorf("running, draining: %d %q", code, body)
	}
	code, body := get(t, base+"?format=json")
	if code != 200 || !strings.Contains(body, `"state":"draining","note":"removed by a reload; draining: 1234 events left; deadline in 12s","left":1234`) {
		t.Errorf("json: %d %s", code, body)
	}
	mu.Lock()
	st.State = "stopping"
	st.Components[0].State, st.Components[0].Reason = "stopping", "stopping"
	mu.Unlock()
	if code, body := get(t, base); code != 503 || body != "agent a1 is stopping\nsource r1: stopping\nchannel c2: removed by a reload; draining: 1234 events left; deadline in 12s\n" {
		t.Errorf("stopping: %d %q", code, body)
	}
}

// TestHandlerMasksSecrets: a reason, a component name and a label value
// (of a collector a component registered) that quote a secret the
// registry's Redact knows show <secret>, in every format.
func TestHandlerMasksSecrets(t *testing.T) {
	const secret = "s3cret-7a1b"
	r := NewRegistry("a1")
	r.Redact = redact.New(secret)
	r.Add(NewSourceCounters("r-"+secret, "netcat").Set)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x_lag"}, []string{"topic"})
	g.WithLabelValues("t-" + secret).Set(1)
	r.Prometheus().MustRegister(g)
	base := serve(t, r, func() Status {
		return Status{Agent: "a1", State: "running", Components: []ComponentStatus{
			{Kind: "sink", Name: "k1", Type: "http", State: "running", Reason: "POST to http://h/?token=" + secret + ": refused"},
			{Kind: "sink", Name: "k2", Type: "http", State: "draining", Note: "draining to http://h/?token=" + secret},
		}}
	})
	for path, want := range map[string]string{
		"/metrics":             `"SOURCE.r-\u003csecret\u003e"`,
		"/metrics/prometheus":  `x_lag{topic="t-<secret>"} 1`,
		"/healthz":             "sink k1: POST to http://h/?token=<secret>: refused\nsink k2: draining to http://h/?token=<secret>",
		"/healthz?format=json": `"reason":"POST to http://h/?token=\u003csecret\u003e: refused"},{"kind":"sink","name":"k2","type":"http","state":"draining","note":"draining to http://h/?token=\u003csecret\u003e"`,
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), secret) || !strings.Contains(string(b), want) {
			t.Errorf("%s: want %s and no secret:\n%s", path, want, b)
		}
	}
}
