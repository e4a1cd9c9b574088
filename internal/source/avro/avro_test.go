package avrosource

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newSource(tb testing.TB, props map[string]string) *Source {
	tb.Helper()
	return newSourceLogged(tb, props, nil)
}

// newSourceLogged is newSource logging to log (nil: nowhere).
func newSourceLogged(tb testing.TB, props map[string]string, log *slog.Logger) *Source {
	tb.Helper()
	env := sourcetest.Env("r1", "avro")
	if log != nil {
		env.Logger = log
	}
	return sourcetest.New(tb, New, env, sourcetest.Loopback(props)).(*Source)
}

func start(tb testing.TB, s *Source, p flow.Processor) string {
	tb.Helper()
	sourcetest.Start(tb, s, p)
	return s.Addr().String()
}

func dial(tb testing.TB, addr string, cfg avrorpc.ClientConfig) *avrorpc.Client {
	tb.Helper()
	c, err := avrorpc.Dial(context.Background(), addr, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func batch(prefix string, n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = event.Event{Headers: event.HeadersOf(map[string]string{"n": fmt.Sprint(i)}), Body: []byte(fmt.Sprintf("%s%d", prefix, i))}
	}
	return out
}

func counter(s *Source, name string) string { return testutil.Metric(s.counters.Set, name) }

func TestConfig(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  string // problem text; "" = valid
	}{
		{"defaults", map[string]string{"bind": "0.0.0.0", "port": "41414"}, ""},
		{"flume keys", map[string]string{"bind": "0.0.0.0", "port": "41414", "threads": "4", "compression-type": "deflate", "ipFilter": "true", "ipFilterRules": "allow:ip:127.*,allow:name:localhost,deny:ip:*"}, ""},
		{"missing port", map[string]string{"bind": "0.0.0.0"}, "a1.sources.r1.port: missing required property"},
		{"missing bind", map[string]string{"port": "1"}, "a1.sources.r1.bind: missing required property"},
		{"bad compression", map[string]string{"bind": "h", "port": "1", "compression-type": "gzip"}, "is not one of none, deflate"},
		{"ipFilter without rules", map[string]string{"bind": "h", "port": "1", "ipFilter": "true"}, "no rules are set"},
		{"bad rule", map[string]string{"bind": "h", "port": "1", "ipFilter": "true", "ipFilterRules": "permit:ip:*"}, "should look like"},
		{"ssl without keystore", map[string]string{"bind": "h", "port": "1", "ssl": "true", "keystore-type": "PKCS12"}, "no keystore is set"},
		{"jks", map[string]string{"bind": "h", "port": "1", "ssl": "true", "keystore": "/k.jks", "keystore-password": "p", "keystore-type": "JKS"}, ""},
		{"client auth", map[string]string{"bind": "h", "port": "1", "ssl": "true", "keystore": "/k.jks", "truststore": "/t.jks", "client-auth": "required"}, ""},
		{"client auth without truststore", map[string]string{"bind": "h", "port": "1", "ssl": "true", "keystore": "/k.jks", "client-auth": "requested"}, "client-auth = requested needs the certificate authorities"},
		{"jceks", map[string]string{"bind": "h", "port": "1", "ssl": "true", "keystore": "/k.jceks", "keystore-type": "JCEKS"}, "keytool -importkeystore -srcstoretype JCEKS"},
		{"unknown key", map[string]string{"bind": "h", "port": "1", "compresion-type": "deflate"}, "a1.sources.r1.compresion-type: ignored: sluice does not read it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := config.FromMap("a1.sources.r1.", tt.props)
			if _, err := New(sourcetest.Env("r1", "avro"), p); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			err := p.Err()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected problems: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("problems %v, want %q", err, tt.want)
			}
		})
	}
}

func TestReceivesBatchesAndAppends(t *testing.T) {
	for _, deflate := range []bool{false, true} {
		t.Run(fmt.Sprintf("deflate=%v", deflate), func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 1000, 100, 100*time.Millisecond)
			props := map[string]string{}
			if deflate {
				props["compression-type"] = "deflate"
			}
			s := newSource(t, props)
			addr := start(t, s, pl.Processor)
			c := dial(t, addr, avrorpc.ClientConfig{Deflate: deflate})
			before := event.Now()
			for i := range 3 {
				if st, err := c.AppendBatch(context.Background(), batch(fmt.Sprintf("b%d-", i), 10)); err != nil || st != avrorpc.OK {
					t.Fatalf("appendBatch: %v %v", st, err)
				}
			}
			if st, err := c.Append(context.Background(), event.Event{Body: []byte("single")}); err != nil || st != avrorpc.OK {
				t.Fatalf("append: %v %v", st, err)
			}
			got := pl.Drain(t, 31, 5*time.Second)
			if len(got) != 31 || string(got[0].Body) != "b0-0" || got[9].Header("n") != "9" || string(got[30].Body) != "single" {
				t.Fatalf("got %v", sourcetest.Bodies(got))
			}
			if got[0].ReceivedAt < before {
				t.Errorf("ReceivedAt %d not stamped", got[0].ReceivedAt)
			}
			for name, want := range map[string]string{
				"AppendBatchReceivedCount": "3", "AppendBatchAcceptedCount": "3",
				"AppendReceivedCount": "1", "AppendAcceptedCount": "1",
				"EventReceivedCount": "31", "EventAcceptedCount": "31", "OpenConnectionCount": "1",
			} {
				if v := counter(s, name); v != want {
					t.Errorf("%s = %s, want %s", name, v, want)
				}
			}
		})
	}
}

// TestFailedWhenChannelFull: the reply is FAILED while the channel is full,
// the events are not in the channel, and a resend succeeds once there is room.
func TestFailedWhenChannelFull(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
	s := newSource(t, nil)
	addr := start(t, s, pl.Processor)
	c := dial(t, addr, avrorpc.ClientConfig{})
	if st, err := c.AppendBatch(context.Background(), batch("a", 10)); err != nil || st != avrorpc.OK {
		t.Fatalf("fill: %v %v", st, err)
	}
	b := batch("b", 5)
	if st, err := c.AppendBatch(context.Background(), b); err != nil || st != avrorpc.Failed {
		t.Fatalf("batch into a full channel: %v %v, want FAILED", st, err)
	}
	if counter(s, "ChannelWriteFail") != "1" || counter(s, "AppendBatchAcceptedCount") != "1" {
		t.Errorf("counters: ChannelWriteFail %s AppendBatchAccepted %s", counter(s, "ChannelWriteFail"), counter(s, "AppendBatchAcceptedCount"))
	}
	if got := pl.Drain(t, 10, 5*time.Second); len(got) != 10 || string(got[9].Body) != "a9" {
		t.Fatalf("drained %v", sourcetest.Bodies(got))
	}
	if st, err := c.AppendBatch(context.Background(), b); err != nil || st != avrorpc.OK {
		t.Fatalf("resend: %v %v", st, err)
	}
	if got := pl.Drain(t, 5, 5*time.Second); len(got) != 5 || string(got[0].Body) != "b0" {
		t.Fatalf("drained %v", sourcetest.Bodies(got))
	}
}

// TestBadConnectionDoesNotDisturbOthers: garbage closes its own connection
// (counted as EventReadFail) while another connection keeps working.
func TestBadConnectionDoesNotDisturbOthers(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1000, 100, 100*time.Millisecond)
	s := newSource(t, map[string]string{"stall-timeout": "200", "max-message-bytes": "65536"})
	addr := start(t, s, pl.Processor)
	good := dial(t, addr, avrorpc.ClientConfig{})
	bad := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		{0, 0, 0, 1, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff},
		{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 100, 1, 2}, // stalls mid-frame
	}
	for i, b := range bad {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("bad input %d: got %d bytes of reply, want the connection closed", i, n)
		} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("bad input %d: connection not closed", i)
		}
		c.Close()
		if st, err := good.AppendBatch(context.Background(), batch("g", 2)); err != nil || st != avrorpc.OK {
			t.Fatalf("good connection after bad input %d: %v %v", i, st, err)
		}
	}
	if got := counter(s, "EventReadFail"); got != "2" && got != "3" {
		t.Errorf("EventReadFail = %s", got)
	}
	if got := pl.Drain(t, 6, 5*time.Second); len(got) != 6 {
		t.Fatalf("drained %d events", len(got))
	}
}

// TestMaxConnections: at max-connections a new client is served by closing
// the connection idle longest, whose next call fails (its sender
// reconnects and resends), instead of being refused.
func TestMaxConnections(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s := newSource(t, map[string]string{"max-connections": "1"})
	addr := start(t, s, pl.Processor)
	first := dial(t, addr, avrorpc.ClientConfig{})
	if st, err := first.AppendBatch(context.Background(), batch("a", 1)); err != nil || st != avrorpc.OK {
		t.Fatal(st, err)
	}
	// The server marks the connection idle once its reply is written,
	// which may be a moment after the client read it.
	if !testutil.Eventually(func() bool { return s.idleConns() == 1 }, 5*time.Second) {
		t.Fatal("the first connection never became idle")
	}
	second := dial(t, addr, avrorpc.ClientConfig{RequestTimeout: 2 * time.Second, ConnectTimeout: 2 * time.Second})
	if st, err := second.AppendBatch(context.Background(), batch("b", 1)); err != nil || st != avrorpc.OK {
		t.Fatalf("a new connection at max-connections: %v %v; want it served", st, err)
	}
	if _, err := first.AppendBatch(context.Background(), batch("c", 1)); err == nil {
		t.Fatal("the idle connection closed for the new one still works")
	}
	if got := counter(s, "ConnectionEvictedCount"); got != "1" {
		t.Errorf("ConnectionEvictedCount = %s, want 1", got)
	}
	if got := counter(s, "OpenConnectionCount"); got != "1" {
		t.Errorf("OpenConnectionCount = %s, want 1", got)
	}
}

func TestIPFilter(t *testing.T) {
	tests := []struct {
		rules string
		ok    bool
	}{
		{"allow:ip:127.*,deny:ip:*", true},
		{"deny:ip:127.0.0.?,allow:ip:*", false},
		{"allow:name:localhost,deny:ip:*", true},
		{"allow:ip:10.*", true}, // no rule matches: accepted, as in Netty
		{"deny:ip:*", false},
	}
	for _, tt := range tests {
		t.Run(tt.rules, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
			s := newSource(t, map[string]string{"ipFilter": "true", "ipFilterRules": tt.rules})
			addr := start(t, s, pl.Processor)
			c := dial(t, addr, avrorpc.ClientConfig{ConnectTimeout: 3 * time.Second})
			st, err := c.AppendBatch(context.Background(), batch("a", 1))
			if tt.ok != (err == nil && st == avrorpc.OK) {
				t.Fatalf("rules %q: %v %v, want accepted=%v", tt.rules, st, err, tt.ok)
			}
		})
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert := testutil.SelfSigned(t, "localhost", "127.0.0.1")
	certPEM, keyPEM := cert.CertPEM(), cert.KeyPEM()
	ks := filepath.Join(dir, "server.pem")
	if err := os.WriteFile(ks, append(certPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s := newSource(t, map[string]string{"ssl": "true", "keystore": ks, "keystore-type": "PEM", "compression-type": "deflate"})
	addr := start(t, s, pl.Processor)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	c := dial(t, addr, avrorpc.ClientConfig{Deflate: true, TLS: &tls.Config{RootCAs: pool, ServerName: "localhost"}})
	if st, err := c.AppendBatch(context.Background(), batch("tls", 3)); err != nil || st != avrorpc.OK {
		t.Fatalf("over TLS: %v %v", st, err)
	}
	if got := pl.Drain(t, 3, 5*time.Second); len(got) != 3 {
		t.Fatalf("drained %d", len(got))
	}
	plain := dial(t, addr, avrorpc.ClientConfig{ConnectTimeout: 2 * time.Second})
	if _, err := plain.AppendBatch(context.Background(), batch("x", 1)); err == nil {
		t.Fatal("a plain client was served by a TLS source")
	}
}

// TestStopWithIdleConnections: Stop returns promptly although clients keep
// their connections open.
func TestStopWithIdleConnections(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s := newSource(t, nil)
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	for range 3 {
		c := dial(t, addr, avrorpc.ClientConfig{})
		if st, err := c.AppendBatch(context.Background(), batch("a", 1)); err != nil || st != avrorpc.OK {
			t.Fatal(st, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("still listening after Stop")
	}
}
