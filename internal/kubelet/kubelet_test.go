package kubelet

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// kubeletServer serves testdata/pods.json at /pods the way a kubelet does,
// checking the bearer token when want is set; delay holds each answer.
type kubeletServer struct {
	want   atomic.Value // string: the token it accepts ("" any)
	delay  atomic.Int64 // nanoseconds
	status atomic.Int32 // answer this instead of 200 when set
	calls  atomic.Int64
	body   []byte
}

func newKubelet(t *testing.T) *kubeletServer {
	t.Helper()
	body, err := os.ReadFile("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeletServer{body: body}
	k.want.Store("")
	return k
}

func (k *kubeletServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.calls.Add(1)
	if r.URL.Path != "/pods" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	if d := time.Duration(k.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	if want := k.want.Load().(string); want != "" && r.Header.Get("Authorization") != "Bearer "+want {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if s := k.status.Load(); s != 0 {
		http.Error(w, http.StatusText(int(s)), int(s))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(k.body)
}

func testConfig(url string) Config {
	return Config{URL: url, Refresh: time.Hour, Timeout: 2 * time.Second, Labels: []string{"app", "team", "k8s-app"},
		Annotations: []string{"prometheus.io/scrape"}, Name: "test", Log: slog.New(slog.DiscardHandler),
		Requests: new(atomic.Int64), Failures: new(atomic.Int64)}
}

func start(t *testing.T, cfg Config) *Cache {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Stop)
	return c
}

func waitReady(t *testing.T, c *Cache) {
	t.Helper()
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not end")
	}
}

func TestPodsFromTheReadOnlyPort(t *testing.T) {
	k := newKubelet(t)
	srv := httptest.NewServer(k)
	defer srv.Close()
	c := start(t, testConfig(srv.URL))
	waitReady(t, c)

	p := c.ByUID("9d4f2b17-6c0e-4a8b-b3f1-7e5a2c9d0f64")
	if p == nil {
		t.Fatal("web-0 not found by uid")
	}
	if p.Namespace != "shop" || p.Name != "web-0" || p.Node != "node-1" {
		t.Fatalf("pod = %+v", p)
	}
	if len(p.Labels) != 2 || p.Labels["app"] != "web" || p.Labels["team"] != "checkout" {
		t.Fatalf("labels = %v, want only app and team", p.Labels)
	}
	if len(p.Annotations) != 1 || p.Annotations["prometheus.io/scrape"] != "true" {
		t.Fatalf("annotations = %v", p.Annotations)
	}
	if q := c.ByName("shop", "web-0"); q != p {
		t.Fatalf("by name: %+v", q)
	}
	// A static pod's files carry its config hash, the mirror's annotation.
	if q := c.ByUID("b0a6f1c2d3e4f5a6b7c8d9e0f1a2b3c4"); q == nil || q.Name != "kube-apiserver-node-1" {
		t.Fatalf("static pod: %+v", q)
	}
	if q := c.ByUID("5f3c8d2e-1b4a-4c6e-9a7b-2d8e0f1c3b5a"); q == nil || q.Labels["k8s-app"] != "kube-dns" || q.Annotations != nil {
		t.Fatalf("coredns: %+v", q)
	}
}

func TestAllLabels(t *testing.T) {
	srv := httptest.NewServer(newKubelet(t))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Labels, cfg.Annotations = []string{"*"}, nil
	c := start(t, cfg)
	waitReady(t, c)
	p := c.ByName("shop", "web-0")
	if p == nil || len(p.Labels) != 5 || p.Annotations != nil {
		t.Fatalf("pod = %+v", p)
	}
}

// TestAuthenticatedPort: over https with the cluster's CA, the token is
// read from its file for every request (a rotated token is used at once);
// a 401 is a failure, counted and logged, after which a good answer
// recovers.
func TestAuthenticatedPort(t *testing.T) {
	k := newKubelet(t)
	k.want.Store("token-1")
	srv := httptest.NewUnstartedServer(k)
	cert := testutil.SelfSigned(t, "127.0.0.1")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS()}}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, cert.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("token-0\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs testutil.LogBuffer
	cfg := testConfig(srv.URL)
	cfg.CAFile, cfg.TokenFile, cfg.Refresh = ca, tok, 200*time.Millisecond
	cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	c := start(t, cfg)
	waitReady(t, c)
	if c.ByName("shop", "web-0") != nil || cfg.Failures.Load() == 0 {
		t.Fatalf("a refused token gave pods (failures %d)", cfg.Failures.Load())
	}
	if !strings.Contains(logs.String(), "401 Unauthorized") || !strings.Contains(logs.String(), "nodes/proxy") {
		t.Fatalf("the 401 is not told: %s", logs.String())
	}
	if err := os.WriteFile(tok, []byte("token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(func() bool { return c.ByName("shop", "web-0") != nil }, 10*time.Second) {
		t.Fatalf("the rotated token was not used: %s", logs.String())
	}
	if !testutil.Eventually(func() bool { return strings.Contains(logs.String(), "gets the pods from the kubelet again") }, 10*time.Second) {
		t.Fatalf("no recovery line: %s", logs.String())
	}

	// A certificate the CA file does not vouch for is refused.
	other := testutil.SelfSigned(t, "127.0.0.1")
	if err := os.WriteFile(ca, other.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg2 := testConfig(srv.URL)
	cfg2.CAFile, cfg2.TokenFile = ca, tok
	c2 := start(t, cfg2)
	waitReady(t, c2)
	if c2.ByName("shop", "web-0") != nil || cfg2.Failures.Load() != 1 {
		t.Fatalf("an unknown certificate was accepted")
	}
}

// TestSlowAndDownNeverBlock: lookups answer at once whether the kubelet
// is slow, down or refusing; what was known stays known.
func TestSlowAndDownNeverBlock(t *testing.T) {
	k := newKubelet(t)
	srv := httptest.NewServer(k)
	cfg := testConfig(srv.URL)
	cfg.Refresh, cfg.Timeout = 100*time.Millisecond, 300*time.Millisecond
	c := start(t, cfg)
	waitReady(t, c)
	if c.ByName("shop", "web-0") == nil {
		t.Fatal("no pods")
	}
	lookups := func() time.Duration {
		t0 := time.Now()
		for range 1000 {
			c.ByName("shop", "web-0")
			c.ByUID("not-a-pod")
		}
		return time.Since(t0)
	}

	// Slow: each request times out.
	k.delay.Store(int64(5 * time.Second))
	f0 := cfg.Failures.Load()
	if d := lookups(); d > 100*time.Millisecond {
		t.Fatalf("2000 lookups took %v with a slow kubelet", d)
	}
	if !testutil.Eventually(func() bool { return cfg.Failures.Load() > f0 }, 10*time.Second) {
		t.Fatal("a timed out request was not counted")
	}
	if c.ByName("shop", "web-0") == nil {
		t.Fatal("a failed refresh forgot the pods")
	}

	// A server error.
	k.delay.Store(0)
	k.status.Store(http.StatusInternalServerError)
	f1 := cfg.Failures.Load()
	if !testutil.Eventually(func() bool { return cfg.Failures.Load() > f1 }, 10*time.Second) {
		t.Fatal("a 500 was not counted")
	}

	// Down.
	srv.Close()
	f2 := cfg.Failures.Load()
	if d := lookups(); d > 100*time.Millisecond {
		t.Fatalf("2000 lookups took %v with the kubelet down", d)
	}
	if !testutil.Eventually(func() bool { return cfg.Failures.Load() > f2 }, 10*time.Second) {
		t.Fatal("a refused connection was not counted")
	}
}

// TestUnknownPodAsksOnce: a pod the copy does not know makes one request
// soon, not one per lookup.
func TestUnknownPodAsksOnce(t *testing.T) {
	k := newKubelet(t)
	srv := httptest.NewServer(k)
	defer srv.Close()
	c := start(t, testConfig(srv.URL)) // Refresh: an hour
	waitReady(t, c)
	n := k.calls.Load()
	for range 10000 {
		if c.ByUID("a-new-pod") != nil {
			t.Fatal("found a pod that is not there")
		}
	}
	if !testutil.Eventually(func() bool { return k.calls.Load() == n+1 }, 10*time.Second) {
		t.Fatalf("calls = %d, want %d", k.calls.Load(), n+1)
	}
	time.Sleep(2500 * time.Millisecond)
	for range 10000 {
		c.ByUID("a-new-pod")
	}
	time.Sleep(1500 * time.Millisecond)
	if got := k.calls.Load(); got != n+1 {
		t.Fatalf("a pod the kubelet does not list made %d requests", got-n)
	}
}

func TestBounds(t *testing.T) {
	k := newKubelet(t)
	srv := httptest.NewServer(k)
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.MaxPods = 1
	var logs testutil.LogBuffer
	cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	c := start(t, cfg)
	waitReady(t, c)
	if c.ByName("kube-system", "coredns-7db6d8ff4d-x2k9p") == nil || c.ByName("shop", "web-0") != nil {
		t.Fatal("maxPods 1 did not keep exactly the first pod")
	}
	if !strings.Contains(logs.String(), "more pods than maxPods") {
		t.Fatalf("not told: %s", logs.String())
	}

	// An answer longer than MaxBody is refused, not read whole.
	const maxBody = 4 << 20
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"kind":"PodList","items":[{"metadata":{"name":"`))
		chunk := []byte(strings.Repeat("x", 1<<20))
		for range maxBody>>20 + 2 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer big.Close()
	cfg2 := testConfig(big.URL)
	cfg2.Timeout, cfg2.MaxBody = 30*time.Second, maxBody
	var logs2 testutil.LogBuffer
	cfg2.Log = slog.New(slog.NewTextHandler(&logs2, nil))
	c2 := start(t, cfg2)
	waitReady(t, c2)
	if cfg2.Failures.Load() != 1 || !strings.Contains(logs2.String(), "longer than 4194304 bytes") {
		t.Fatalf("a huge answer was not a failure: %s", logs2.String())
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := New(Config{URL: "127.0.0.1:10250"}); err == nil {
		t.Fatal("a URL without a scheme was accepted")
	}
	if _, err := New(Config{URL: "https://127.0.0.1:10250", CAFile: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
}

func TestStopEndsTheRequest(t *testing.T) {
	k := newKubelet(t)
	k.delay.Store(int64(time.Minute))
	srv := httptest.NewServer(k)
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Timeout = time.Minute
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	for k.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	c.Stop()
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("Stop took %v", d)
	}
}
