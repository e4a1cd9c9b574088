package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/kafkaconf"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/kdc"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// securedConfig is a Flume config of a secured shop: an avro source with a
// JKS keystore that requires client certificates, and a Kafka sink that
// logs in with Kerberos from the JAAS file -Djava.security.auth.login.config
// names (Flume's guide's way).
func securedConfig(avroPort int, brokers string) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = avro
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
a1.sources.r1.ssl = true
a1.sources.r1.keystore = %s
a1.sources.r1.keystore-password = %s
a1.sources.r1.truststore = %s
a1.sources.r1.truststore-password = %s
a1.channels.c1.type = memory
a1.channels.c1.capacity = 10000
a1.sinks.k1.type = org.apache.flume.sink.kafka.KafkaSink
a1.sinks.k1.channel = c1
a1.sinks.k1.kafka.bootstrap.servers = %s
a1.sinks.k1.kafka.topic = secured
a1.sinks.k1.kafka.producer.security.protocol = SASL_PLAINTEXT
a1.sinks.k1.kafka.producer.sasl.mechanism = GSSAPI
a1.sinks.k1.kafka.producer.sasl.kerberos.service.name = kafka
`, avroPort, ksPath("server.keystore.jks"), testutil.KeystoreServerPass, ksPath("server.truststore.jks"), testutil.KeystoreTrustPass, brokers)
}

var ksPath func(string) string

func writeJAAS(t *testing.T, keytab, principal string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "flume_jaas.conf")
	text := fmt.Sprintf("KafkaClient {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n  storeKey=true\n  keyTab=%q\n  principal=%q;\n};\n", keytab, principal)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSecuredClusterAgent runs the sluice binary as a secured Flume shop
// would: events reach its avro source over TLS with a JKS keystore, from a
// client whose certificate the source's JKS truststore vouches for (a
// client without one is refused and counted), and leave through the Kafka
// sink, which logs in to a real MIT KDC from a keytab and authenticates
// to a broker that verifies its tickets with the service keytab and ends
// every session when its ticket ends (KIP-368). Tickets live 3 s and can
// be renewed for 6 s: over 9 s the agent renews its ticket-granting
// ticket, logs in again from the keytab, and re-authenticates to the
// broker many times, delivering every event, saying so at DEBUG and
// never warning. A keytab whose keys the KDC changed fails the start in one
// line with the KDC's reason.
func TestSecuredClusterAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	ksPath = func(n string) string { return testutil.Keystore(t, n) }
	k := kdc.Start(t, kdc.Options{TicketLifetime: 3 * time.Second, RenewLifetime: 6 * time.Second})
	flumeKT := k.AddPrincipal(t, "flume/localhost")
	brokerKT := k.AddPrincipal(t, "kafka/127.0.0.1")
	kc, g := kafkatest.NewGSSAPI(t, brokerKT, 3*time.Second, "secured")
	bin := testutil.AgentBinary(t)

	port := testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "secured.properties")
	if err := os.WriteFile(file, []byte(securedConfig(port, kc.Brokers())), 0o644); err != nil {
		t.Fatal(err)
	}
	jaas := writeJAAS(t, flumeKT, "flume/localhost@"+kdc.Realm)
	p := testutil.StartAgent(t, bin, file, "--log-level", "debug",
		"-Djava.security.auth.login.config="+jaas, "-Djava.security.krb5.conf="+k.Krb5Conf)
	stderr := p.Log

	clientCert, err := tlsconf.Settings{Keystore: ksPath("client.keystore.jks"), KeystorePassword: testutil.KeystoreClientPass,
		KeyPassword: testutil.KeystoreClientKey}.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	trust, err := tlsconf.Settings{Enabled: true, Truststore: ksPath("client.truststore.jks"), VerifyHostname: true}.ClientConfig("localhost")
	if err != nil {
		t.Fatal(err)
	}
	withCert := trust.Clone()
	withCert.Certificates = []tls.Certificate{clientCert}
	ctx := context.Background()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var cl *avrorpc.Client
	for i := 0; ; i++ {
		cl, err = avrorpc.Dial(ctx, addr, avrorpc.ClientConfig{TLS: withCert, ConnectTimeout: time.Second})
		if err == nil {
			break
		}
		if i == 300 {
			t.Fatalf("avro source never accepted: %v; log:\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer cl.Close()

	// A client without a certificate is refused at the handshake.
	if bad, err := avrorpc.Dial(ctx, addr, avrorpc.ClientConfig{TLS: trust, ConnectTimeout: 2 * time.Second}); err == nil {
		_, err = bad.AppendBatch(ctx, []event.Event{{Body: []byte("anonymous")}})
		bad.Close()
		if err == nil {
			t.Fatal("a client without a certificate delivered an event")
		}
	}

	const batches, per = 9, 10
	for b := range batches {
		var batch []event.Event
		for i := range per {
			batch = append(batch, event.Event{Body: []byte(fmt.Sprintf("event %d", b*per+i))})
		}
		if st, err := cl.AppendBatch(ctx, batch); err != nil || st != avrorpc.OK {
			t.Fatalf("batch %d: %v %v; log:\n%s", b, st, err, stderr.String())
		}
		time.Sleep(time.Second)
	}

	recs := readGSSAPI(t, kc, flumeKT, k.Krb5Conf, batches*per)
	if len(recs) != batches*per {
		t.Fatalf("%d of %d events in the topic; log:\n%s", len(recs), batches*per, stderr.String())
	}
	p.Stop(20 * time.Second)

	log := stderr.String()
	if n := g.Accepted()["flume/localhost@"+kdc.Realm]; n < 4 {
		t.Errorf("the broker opened %d sessions for the agent in 9 s of 3 s sessions, want at least 4", n)
	}
	if n := strings.Count(log, `level=DEBUG msg="kerberos: TGT session renewed`); n < 2 {
		t.Errorf("%d TGT renewals logged at DEBUG, want at least 2; log:\n%s", n, log)
	}
	if n := strings.Count(k.Log(t), "AS_REQ"); n < 3 { // the agent's first login and a second, and the reader's
		t.Errorf("the KDC saw %d logins, want the agent to log in again after renew_lifetime:\n%s", n, k.Log(t))
	}
	for _, l := range strings.Split(log, "\n") {
		if (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) &&
			(strings.Contains(strings.ToLower(l), "kerberos") || strings.Contains(l, "SASL")) {
			t.Errorf("warning about Kerberos: %s", l)
		}
	}
	if !strings.Contains(log, "closed a connection whose TLS handshake failed") || !strings.Contains(log, "didn't provide a certificate") {
		t.Errorf("the refused client is not logged; log:\n%s", log)
	}

	// A keytab whose keys changed since: the agent does not start, and
	// says why in one line.
	k.Keytab(t, "flume/localhost")
	p2 := testutil.StartAgent(t, bin, file,
		"-Djava.security.auth.login.config="+jaas, "-Djava.security.krb5.conf="+k.Krb5Conf)
	out2 := p2.Log
	// The agent logs the refusal, then exits (the line is asserted below).
	testutil.WaitFor(t, 20*time.Second, "a KDC_ERR_PREAUTH_FAILED line", func() bool {
		return strings.Contains(out2.String(), "KDC_ERR_PREAUTH_FAILED") || !p2.Running()
	})
	var line string
	for _, l := range strings.Split(out2.String(), "\n") {
		if strings.Contains(l, "KDC_ERR_PREAUTH_FAILED") {
			line = l
			break
		}
	}
	if !strings.Contains(line, "kerberos login as flume/localhost@SLUICE.TEST (keytab "+flumeKT+"): KDC_ERR_PREAUTH_FAILED") {
		t.Errorf("stale keytab: %q; log:\n%s", line, out2.String())
	}
}

// readGSSAPI reads n records of topic secured, logging in as the agent does.
func readGSSAPI(t *testing.T, kc *kafkatest.Cluster, keytab, krb5Conf string, n int) []*kgo.Record {
	t.Helper()
	p := config.FromMap("r.", map[string]string{
		"kafka.consumer.security.protocol":          "SASL_PLAINTEXT",
		"kafka.consumer.sasl.kerberos.service.name": "kafka",
		"kafka.consumer.sasl.jaas.config": fmt.Sprintf(`com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="%s" principal="flume/localhost";`,
			keytab),
	})
	c := kafkaconf.ReadConsumer(p, "kafka.consumer.", kafkaconf.ConsumerDefaults{Group: "reader", Reset: "earliest",
		Env: kafkaconf.Env{Sys: map[string]string{"java.security.krb5.conf": krb5Conf}, Log: slog.New(slog.DiscardHandler)}})
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	opts, err := c.Options(kc.Addrs)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics("secured"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	return recs
}

// writePEM writes cert's chain and key as PEM files and returns their paths.
func writePEM(t *testing.T, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestStatusPortClientCertificates: with --http-tls-client-ca (here a JKS
// truststore, its password in SLUICE_HTTP_CA_PASSWORD) the monitoring
// address refuses a client without a certificate, and sluice top's client
// with --http-cert and --http-key gets /healthz.
func TestStatusPortClientCertificates(t *testing.T) {
	ks := func(n string) string { return testutil.Keystore(t, n) }
	srv, err := tlsconf.Settings{Keystore: ks("server.keystore.jks"), KeystorePassword: testutil.KeystoreServerPass}.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := tlsconf.Settings{Keystore: ks("client.keystore.jks"), KeystorePassword: testutil.KeystoreClientPass, KeyPassword: testutil.KeystoreClientKey}.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey := writePEM(t, srv)
	cliCert, cliKey := writePEM(t, cli)
	t.Setenv("SLUICE_HTTP_CA_PASSWORD", testutil.KeystoreTrustPass)

	port, httpPort := testutil.FreePort(t), testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	if err := os.WriteFile(file, []byte(netcatToNull(port)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testutil.LogBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"agent", "-f", file, "-n", "a1", "--no-reload-conf", "--http", fmt.Sprintf("127.0.0.1:%d", httpPort),
			"--http-tls-cert", srvCert, "--http-tls-key", srvKey, "--http-tls-client-ca", ks("server.truststore.jks")}, nil, io.Discard, &stderr)
	}()
	defer func() {
		cancel()
		if c := <-code; c != 0 {
			t.Errorf("exit %d; log:\n%s", c, stderr.String())
		}
	}()
	url := fmt.Sprintf("https://localhost:%d", httpPort)
	healthz := func(f clientFlags) error {
		c, err := f.client()
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		resp, err := c.get(rctx, "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	with := clientFlags{addr: url, caFile: ks("ca-cert"), certFile: cliCert, keyFile: cliKey}
	for i := 0; ; i++ {
		if err = healthz(with); err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("/healthz with a client certificate: %v; log:\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := healthz(clientFlags{addr: url, caFile: ks("ca-cert")}); err == nil {
		t.Fatal("/healthz answered a client without a certificate")
	}
}
