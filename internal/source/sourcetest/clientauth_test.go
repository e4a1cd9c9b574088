package sourcetest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/avro"
	"github.com/sluicehq/sluice/internal/source/http"
	"github.com/sluicehq/sluice/internal/source/otlp"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/source/syslog"
	"github.com/sluicehq/sluice/internal/source/thrift"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/thriftrpc"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// send delivers one event with body to a source at addr over TLS with
// cfg, in the source's own protocol; an error says the source did not
// take it.
type send func(ctx context.Context, addr string, cfg *tls.Config, body string) error

func sendAvro(ctx context.Context, addr string, cfg *tls.Config, body string) error {
	c, err := avrorpc.Dial(ctx, addr, avrorpc.ClientConfig{TLS: cfg, ConnectTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.AppendBatch(ctx, []event.Event{{Body: []byte(body)}})
	if err == nil && st != avrorpc.OK {
		err = fmt.Errorf("status %v", st)
	}
	return err
}

func sendThrift(ctx context.Context, addr string, cfg *tls.Config, body string) error {
	c, err := thriftrpc.Dial(ctx, addr, thriftrpc.ClientConfig{TLS: cfg, ConnectTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.AppendBatch(ctx, []event.Event{{Body: []byte(body)}})
	if err == nil && st != thriftrpc.OK {
		err = fmt.Errorf("status %v", st)
	}
	return err
}

func sendHTTP(ctx context.Context, addr string, cfg *tls.Config, body string) error {
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 2 * time.Second}
	defer cl.CloseIdleConnections()
	resp, err := cl.Post("https://"+addr, "application/json", bytes.NewBufferString(`[{"body":"`+body+`"}]`))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// sendOTLP posts one log record over OTLP/HTTP (protobuf).
func sendOTLP(ctx context.Context, addr string, cfg *tls.Config, body string) error {
	ld := plog.NewLogs()
	ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr(body)
	req, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		return err
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 2 * time.Second}
	defer cl.CloseIdleConnections()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/v1/logs", bytes.NewReader(req))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := cl.Do(hreq)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// sendSyslog writes one line; syslog has no acknowledgement, so whether
// the source took it shows only in the channel.
func sendSyslog(ctx context.Context, addr string, cfg *tls.Config, body string) error {
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = fmt.Fprintf(c, "<13>Jan  1 00:00:00 host app: %s\n", body)
	if err == nil {
		// Under TLS 1.3 the server's refusal of the certificate arrives
		// after the client's handshake: read for it.
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, rerr := c.Read(make([]byte, 1)); rerr != nil {
			if ne, ok := errors.AsType[net.Error](rerr); !ok || !ne.Timeout() {
				err = rerr
			}
		}
	}
	return err
}

// TestClientCertificates: every TLS source (avro, thrift, http, syslogtcp,
// multiport_syslogtcp, otlp) given a truststore requires client certificates:
// a client without one is refused and its event never reaches the
// channel; a client whose certificate the truststore's CA signed delivers.
// The stores are Java keystores as Flume users make them (JKS).
func TestClientCertificates(t *testing.T) {
	ks := func(n string) string { return testutil.Keystore(t, n) }
	tlsProps := map[string]string{
		"ssl": "true", "keystore": ks("server.keystore.jks"), "keystore-password": testutil.KeystoreServerPass,
		"truststore": ks("server.truststore.jks"), "truststore-password": testutil.KeystoreTrustPass,
	}
	withProps := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range tlsProps {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		newFn func(flow.Env, *config.Props) (flow.Source, error)
		props map[string]string
		send  send
	}{
		{"avro", avrosource.New, sourcetest.Loopback(tlsProps), sendAvro},
		{"thrift", thriftsource.New, sourcetest.Loopback(tlsProps), sendThrift},
		{"http", httpsource.New, withProps(map[string]string{"bind": "127.0.0.1", "port": "0"}), sendHTTP},
		{"syslogtcp", syslogsource.NewTCP, withProps(map[string]string{"host": "127.0.0.1", "port": "0"}), sendSyslog},
		{"multiport_syslogtcp", syslogsource.NewMultiport, withProps(map[string]string{"host": "127.0.0.1", "ports": "0"}), sendSyslog},
		{"otlp", otlpsource.New, withProps(map[string]string{"bind": "127.0.0.1", "grpcPort": "-1", "httpPort": "0"}), sendOTLP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			s := sourcetest.New(t, tc.newFn, sourcetest.Env("r1", tc.name), tc.props)
			sourcetest.Start(t, s, pl.Processor)
			addr := sourceAddr(t, s)

			trust, err := tlsconf.Settings{Enabled: true, Truststore: ks("client.truststore.jks"), VerifyHostname: true}.ClientConfig("localhost")
			if err != nil {
				t.Fatal(err)
			}
			cert, err := tlsconf.Settings{Keystore: ks("client.keystore.jks"), KeystorePassword: testutil.KeystoreClientPass,
				KeyPassword: testutil.KeystoreClientKey}.Certificate()
			if err != nil {
				t.Fatal(err)
			}
			withCert := trust.Clone()
			withCert.Certificates = []tls.Certificate{cert}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			if err := tc.send(ctx, addr, trust, "anonymous"); err == nil && tc.name != "syslogtcp" && tc.name != "multiport_syslogtcp" {
				t.Error("a client without a certificate delivered")
			}
			if err := tc.send(ctx, addr, withCert, "vouched"); err != nil {
				t.Fatalf("a client with a trusted certificate: %v", err)
			}
			got := sourcetest.Bodies(pl.Drain(t, 1, 5*time.Second))
			if extra := pl.Take(t, 10, 300*time.Millisecond); len(extra) > 0 {
				got = append(got, sourcetest.Bodies(extra)...)
			}
			if len(got) != 1 || !strings.HasSuffix(got[0], "vouched") { // syslog keeps "app: " in the body
				t.Fatalf("the channel holds %q, want only the vouched client's event", got)
			}
		})
	}
}

func sourceAddr(t *testing.T, s flow.Source) string {
	t.Helper()
	switch a := s.(type) {
	case interface{ Addr() net.Addr }:
		return a.Addr().String()
	case interface{ Addrs() []net.Addr }:
		return a.Addrs()[0].String()
	case interface{ HTTPAddr() net.Addr }:
		return a.HTTPAddr().String()
	}
	t.Fatalf("%T has no address", s)
	return ""
}

// TestSinkToSourceClientCertificate: a hop between two agents
// authenticated both ways with Java keystores: an avro sink with sluice's
// keystore keys presents its certificate to an avro source that requires
// one; the same sink without a keystore is refused.
func TestSinkToSourceClientCertificate(t *testing.T) {
	ks := func(n string) string { return testutil.Keystore(t, n) }
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := sourcetest.New(t, avrosource.New, sourcetest.Env("r1", "avro"), sourcetest.Loopback(map[string]string{
		"ssl": "true", "keystore": ks("server.keystore.jks"), "keystore-password": testutil.KeystoreServerPass,
		"truststore": ks("server.truststore.jks"), "truststore-password": testutil.KeystoreTrustPass}))
	sourcetest.Start(t, s, pl.Processor)
	sinkTLS := func(props map[string]string) *tls.Config {
		p := config.FromMap("a1.sinks.k1.", props)
		cfg, err := tlsconf.ReadClient(p).ClientConfig("localhost")
		if err != nil || p.Err() != nil {
			t.Fatal(err, p.Err())
		}
		return cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	anonymous := sinkTLS(map[string]string{"ssl": "true", "truststore": ks("client.truststore.jks")})
	if err := sendAvro(ctx, sourceAddr(t, s), anonymous, "anonymous"); err == nil {
		t.Fatal("a sink without a certificate delivered")
	}
	agent := sinkTLS(map[string]string{"ssl": "true", "truststore": ks("client.truststore.jks"),
		"keystore": ks("agent.keystore.jks"), "keystore-password": testutil.KeystoreClientPass})
	if err := sendAvro(ctx, sourceAddr(t, s), agent, "vouched"); err != nil {
		t.Fatalf("a sink with a certificate: %v", err)
	}
	if got := sourcetest.Bodies(pl.Drain(t, 1, 5*time.Second)); len(got) != 1 || got[0] != "vouched" {
		t.Fatalf("channel holds %q", got)
	}
}
