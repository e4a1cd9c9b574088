package metrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The difference of two readings is the histogram of what was observed in
// between: its quantiles are those of the new observations only.
func TestReadLatenciesDifferenceAndQuantile(t *testing.T) {
	r := NewRegistry("a1")
	h := r.Latency(StageSink, "k1")
	r.Latency(StageSource, "r1")
	for range 1000 {
		h.Observe(10 * time.Millisecond) // an old, slow minute
	}
	before := r.ReadLatencies(nil)
	if len(before) != 2 || before[0].Stage != StageSink || before[0].Component != "k1" || before[1].Stage != StageSource {
		t.Fatalf("readings %+v, want sink/k1 then source/r1", before)
	}
	prev := append([]uint64(nil), before[0].Counts...)
	for i := range 100 {
		h.Observe(time.Duration(100+i) * time.Microsecond) // 100..199 µs
	}
	after := r.ReadLatencies(before) // reuses the slices
	if &after[0].Counts[0] != &before[0].Counts[0] {
		t.Fatal("ReadLatencies must reuse dst's slices")
	}
	delta := make([]uint64, LatencyBuckets)
	for i := range delta {
		delta[i] = after[0].Counts[i] - prev[i]
	}
	within := func(got, want time.Duration) bool {
		return got >= want*94/100 && got <= want*106/100
	}
	if p50 := Quantile(delta, 0.5); !within(p50, 150*time.Microsecond) {
		t.Errorf("P50 of the new observations = %s, want about 150µs", p50)
	}
	if p99 := Quantile(delta, 0.99); !within(p99, 199*time.Microsecond) {
		t.Errorf("P99 of the new observations = %s, want about 199µs", p99)
	}
	if p99 := Quantile(after[0].Counts, 0.99); !within(p99, 10*time.Millisecond) {
		t.Errorf("P99 of everything = %s, want about 10ms", p99)
	}
	if q := Quantile(make([]uint64, LatencyBuckets), 0.5); q != 0 {
		t.Errorf("quantile of nothing = %s, want 0", q)
	}
}

func TestBasicAuth(t *testing.T) {
	h := BasicAuth(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "in") }), "ops", "s3cret")
	for _, tc := range []struct {
		user, pass string
		set        bool
		code       int
	}{
		{"ops", "s3cret", true, 200},
		{"ops", "wrong", true, 401},
		{"root", "s3cret", true, 401},
		{"", "", false, 401},
	} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tc.set {
			req.SetBasicAuth(tc.user, tc.pass)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("%q/%q: status %d, want %d", tc.user, tc.pass, rec.Code, tc.code)
		}
		if tc.code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%q/%q: 401 without a challenge", tc.user, tc.pass)
		}
	}
}

func TestServeTLS(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil) // only for its test certificate
	ts.StartTLS()
	cert := ts.TLS.Certificates[0]
	ts.Close()
	srv, err := Serve(context.Background(), "127.0.0.1:0", Handler(NewRegistry("a1"), nil),
		&tls.Config{Certificates: []tls.Certificate{cert}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	pool := x509.NewCertPool()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool.AddCert(leaf)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + srv.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("https /healthz: %d", resp.StatusCode)
	}
	// Plain HTTP is not served on a TLS address.
	if resp, err := http.Get("http://" + srv.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain http served on the TLS address")
		}
	}
}
