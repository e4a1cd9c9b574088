package httpsource

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newSource(t *testing.T, props map[string]string) *Source {
	t.Helper()
	return sourcetest.New(t, New, sourcetest.Env("r1", "http"), sourcetest.Loopback(props)).(*Source)
}

func start(t *testing.T, s flow.Source, p flow.Processor) {
	t.Helper()
	sourcetest.Start(t, s, p)
}

// send makes a request and returns the status and body.
func send(t *testing.T, client *http.Client, method, url, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRequestsBecomeEvents(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, nil)
	start(t, s, pl.Processor)
	url := "http://" + s.Addr().String() + "/"

	for _, method := range []string{"POST", "GET"} {
		code, body := send(t, http.DefaultClient, method, url, "application/json",
			`[{"headers":{"a":"1","n":2,"b":true,"z":null},"body":"first"},{"body":"second \u00e9"},{"headers":{}}]`)
		if code != 200 || body != "" {
			t.Fatalf("%s: status %d %q, want 200 and no body", method, code, body)
		}
		got := pl.Drain(t, 3, 5*time.Second)
		if b := sourcetest.Bodies(got); !slices.Equal(b, []string{"first", "second é", ""}) {
			t.Fatalf("bodies = %q", b)
		}
		// Gson reads numbers and booleans as their text, and drops nulls.
		if h := got[0].Headers; len(h) != 3 || h.Value("a") != "1" || h.Value("n") != "2" || h.Value("b") != "true" {
			t.Errorf("headers = %v", h)
		}
		if len(got[1].Headers) != 0 || got[1].ReceivedAt == 0 {
			t.Errorf("second event: headers %v, ReceivedAt %d", got[1].Headers, got[1].ReceivedAt)
		}
	}
	if n := s.counters.EventAccepted.Load(); n != 6 {
		t.Errorf("EventAcceptedCount = %d, want 6", n)
	}
	if n := s.counters.AppendBatchAccepted.Load(); n != 2 {
		t.Errorf("AppendBatchAcceptedCount = %d, want 2", n)
	}
}

func TestCharsets(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, nil)
	start(t, s, pl.Processor)
	url := "http://" + s.Addr().String()
	json := `[{"body":"hé"}]`
	// UTF-16 big-endian with a byte-order mark, as Java writes it.
	var u16 []byte
	u16 = append(u16, 0xFE, 0xFF)
	for _, r := range json {
		u16 = append(u16, byte(r>>8), byte(r))
	}
	code, body := send(t, http.DefaultClient, "POST", url, "application/json; charset=UTF-16", string(u16))
	if code != 200 {
		t.Fatalf("utf-16: status %d %q", code, body)
	}
	got := pl.Drain(t, 1, 5*time.Second)
	if want := "\xfe\xff\x00h\x00\xe9"; string(got[0].Body) != want {
		t.Errorf("utf-16 body = %q, want %q (the body in the request charset)", got[0].Body, want)
	}
	code, body = send(t, http.DefaultClient, "POST", url, "application/json; charset=ISO-8859-1", json)
	if code != http.StatusUnsupportedMediaType || !strings.Contains(body, "UTF-8, UTF-16 and UTF-32") {
		t.Errorf("iso-8859-1: status %d %q, want 415 naming the supported charsets", code, body)
	}
}

func TestBadRequests(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, map[string]string{"maxRequestBytes": "100"})
	start(t, s, pl.Processor)
	url := "http://" + s.Addr().String()
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"trailing comma", `[{"body":"x"},]`, 400, "invalid JSON syntax at line 1, column 15 (byte 14)"},
		{"second line", "[\n {\"body\": x}]", 400, "line 2, column 11"},
		{"truncated", `[{"body":"x"`, 400, "unexpected end of JSON input"},
		{"not an array", `{"body":"x"}`, 400, "must be a JSON array"},
		{"empty", ``, 400, "request body is empty"},
		{"headers not an object", `[{"headers":"x"}]`, 400, "field headers must not be a JSON string"},
		{"header value object", `[{"headers":{"k":{}}}]`, 400, `invalid event 0: header "k" must be a string, not an object`},
		{"body array", `[{"body":[1]}]`, 400, "invalid event 0: body must be a string, not an array"},
		{"null event", `[null]`, 400, "event 0 is null"},
		{"too large", `[{"body":"` + strings.Repeat("x", 200) + `"}]`, 413, "exceeds 100 bytes (maxRequestBytes)"},
	}
	for _, tt := range tests {
		code, body := send(t, http.DefaultClient, "POST", url, "", tt.body)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: status %d %q, want %d containing %q", tt.name, code, body, tt.code, tt.want)
		}
	}
	code, _ := send(t, http.DefaultClient, "PUT", url, "", "[]")
	if code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: status %d, want 405", code)
	}
	if extra := pl.Take(t, 10, 20*time.Millisecond); len(extra) != 0 {
		t.Errorf("bad requests left events: %q", sourcetest.Bodies(extra))
	}
	if n := s.counters.EventReadFail.Load(); n != int64(len(tests)) {
		t.Errorf("EventReadFail = %d, want %d", n, len(tests))
	}
}

// A request that does not fit in the channel is refused whole with 503; once
// the channel drains it is accepted, and what was sent is what arrives.
func TestChannelFull(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 3, 3, 0)
	s := newSource(t, nil)
	start(t, s, pl.Processor)
	url := "http://" + s.Addr().String()
	batch := func(a, b string) string { return `[{"body":"` + a + `"},{"body":"` + b + `"}]` }

	if code, body := send(t, http.DefaultClient, "POST", url, "", batch("1", "2")); code != 200 {
		t.Fatalf("first request: %d %q", code, body)
	}
	code, body := send(t, http.DefaultClient, "POST", url, "", batch("3", "4"))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "Channel might be full") {
		t.Fatalf("second request into a full channel: %d %q, want 503", code, body)
	}
	if n := pl.Channel.Len(); n != 2 {
		t.Fatalf("channel holds %d events after the refused request, want 2 (nothing of it kept)", n)
	}
	delivered := sourcetest.Bodies(pl.Drain(t, 2, 5*time.Second))
	if code, body := send(t, http.DefaultClient, "POST", url, "", batch("3", "4")); code != 200 {
		t.Fatalf("retry after draining: %d %q", code, body)
	}
	delivered = append(delivered, sourcetest.Bodies(pl.Drain(t, 2, 5*time.Second))...)
	if !slices.Equal(delivered, []string{"1", "2", "3", "4"}) {
		t.Fatalf("delivered %q, want 1 2 3 4", delivered)
	}
	c := s.counters
	if c.EventReceived.Load() != 6 || c.EventAccepted.Load() != 4 || c.ChannelWriteFail.Load() != 1 {
		t.Errorf("received %d accepted %d channel write fails %d; want 6, 4, 1",
			c.EventReceived.Load(), c.EventAccepted.Load(), c.ChannelWriteFail.Load())
	}
}

func TestStop(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 10, 10, time.Second)
	s := newSource(t, nil)
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("still listening after stop")
	}
}

func TestTLS(t *testing.T) {
	c := testutil.SelfSigned(t, "127.0.0.1")
	cert, key := c.X509, c.Key
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pemFile := filepath.Join(dir, "ks.pem")
	pemData := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	if err := os.WriteFile(pemFile, pemData, 0o600); err != nil {
		t.Fatal(err)
	}
	p12, err := pkcs12.Modern.Encode(key, cert, nil, "secret")
	if err != nil {
		t.Fatal(err)
	}
	p12File := filepath.Join(dir, "ks.p12")
	if err := os.WriteFile(p12File, p12, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	for _, tc := range []map[string]string{
		{"ssl": "true", "keystore": pemFile, "keystore-type": "PEM"},
		{"ssl": "true", "keystore": p12File, "keystore-type": "PKCS12", "keystore-password": "secret"},
		// Flume's deprecated spellings.
		{"enableSSL": "true", "keystore": p12File, "keystore-type": "pkcs12", "keystorePassword": "secret", "include-protocols": "TLSv1.3"},
	} {
		pl := sourcetest.NewPipeline(t, 10, 10, time.Second)
		s := newSource(t, tc)
		start(t, s, pl.Processor)
		code, body := send(t, client, "POST", "https://"+s.Addr().String(), "", `[{"body":"secure"}]`)
		if code != 200 {
			t.Fatalf("%v: status %d %q", tc, code, body)
		}
		if got := sourcetest.Bodies(pl.Drain(t, 1, 5*time.Second)); !slices.Equal(got, []string{"secure"}) {
			t.Fatalf("%v: bodies %q", tc, got)
		}
	}

	// A wrong password fails at start with the reason.
	s := newSource(t, map[string]string{"ssl": "true", "keystore": p12File, "keystore-type": "PKCS12", "keystore-password": "wrong"})
	err = s.Start(context.Background(), sourcetest.NewPipeline(t, 1, 1, 0).Processor)
	if err == nil || !strings.Contains(err.Error(), "a1.sources.r1.keystore "+p12File+": wrong password; check a1.sources.r1.keystore-password") {
		t.Fatalf("start with a wrong password: %v", err)
	}
}

// Jetty's tuning keys, common in Flume configs, start the source with a
// note each, not an error.
func TestJettyTuningIsANote(t *testing.T) {
	p := config.FromMap("a1.sources.r1.", map[string]string{"port": "1",
		"QueuedThreadPool.MaxThreads": "100", "HttpConfiguration.sendServerVersion": "false", "ServerConnector.idleTimeout": "300"})
	if _, err := New(sourcetest.Env("r1", "http"), p); err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatalf("Jetty tuning keys refused: %v", err)
	}
	notes := 0
	for _, pr := range p.Problems().Sorted() {
		if pr.Severity != config.Note || !strings.Contains(pr.Msg, "is not Jetty") {
			t.Errorf("unexpected problem %+v", pr)
			continue
		}
		notes++
	}
	if notes != 3 {
		t.Errorf("%d notes, want one per Jetty key (3)", notes)
	}
}

func TestBadProperties(t *testing.T) {
	tests := []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{}, "a1.sources.r1.port: missing required property"},
		{map[string]string{"port": "1", "handler": "org.example.MyHandler"}, "is not supported; sluice's HTTP source has org.apache.flume.source.http.JSONHandler (the default)"},
		{map[string]string{"port": "1", "SslContextFactory.ExcludeCipherSuites": "TLS_RSA_WITH_AES_128_CBC_SHA"}, "SslContextFactory.ExcludeCipherSuites: is a Jetty TLS setting, which sluice cannot honour"},
		{map[string]string{"port": "1", "ssl": "true", "keystore": "/x.jceks", "keystore-type": "JCEKS"}, "JCEKS stores are not read by sluice"},
		{map[string]string{"port": "1", "ssl": "true", "keystore": "/x.jks", "client-auth": "required"}, "client-auth = required needs the certificate authorities"},
		{map[string]string{"port": "1", "ssl": "true", "keystore-type": "PEM"}, "ssl is true but no keystore is set"},
		{map[string]string{"port": "1", "ssl": "true", "keystore": "/x", "keystore-type": "PEM", "include-protocols": "SSLv3"}, `protocol "SSLv3" is not supported`},
		{map[string]string{"port": "1", "ssl": "true", "keystore": "/x", "keystore-type": "PEM", "include-cipher-suites": "TLS_NOPE"}, `cipher suite "TLS_NOPE" is not supported`},
		{map[string]string{"port": "1", "maxRequestBytes": "0"}, "maxRequestBytes: 0 is out of range"},
	}
	for _, tt := range tests {
		p := config.FromMap("a1.sources.r1.", tt.props)
		if _, err := New(sourcetest.Env("r1", "http"), p); err != nil {
			t.Fatal(err)
		}
		p.Unused()
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("props %v: err = %v, want %q", tt.props, err, tt.want)
		}
	}
}
