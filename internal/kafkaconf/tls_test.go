package kafkaconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// TestDisableTLSHostnameVerification: Flume's
// kafka.producer.ssl.disableTLSHostnameVerification = true is honoured, not
// refused: a broker whose certificate does not name the address dialed is
// reached; without it, it is not; and the certificate chain is checked
// either way (an untrusted broker is refused).
func TestDisableTLSHostnameVerification(t *testing.T) {
	c := testutil.SelfSigned(t, "kafka.internal.example") // no IP: 127.0.0.1 does not match
	cert, certPEM := c.TLS(), c.CertPEM()
	otherPEM := testutil.SelfSigned(t, "kafka.internal.example").CertPEM()
	kc := kafkatest.NewTLS(t, &tls.Config{Certificates: []tls.Certificate{cert}}, "t")
	dir := t.TempDir()
	trusted, untrusted := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	if err := os.WriteFile(trusted, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(untrusted, otherPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, truststore, disable string
		ok                        bool
	}{
		{"verified name refused", trusted, "", false},
		{"disabled", trusted, "true", true},
		{"disabled but untrusted", untrusted, "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props := map[string]string{
				"kafka.producer.security.protocol":       "SSL",
				"kafka.producer.ssl.truststore.location": tc.truststore,
				"kafka.producer.ssl.truststore.type":     "PEM",
			}
			if tc.disable != "" {
				props["kafka.producer.ssl.disableTLSHostnameVerification"] = tc.disable
			}
			p := config.FromMap("a1.sinks.k1.", props)
			pr := ReadProducer(p, "kafka.producer.", ProducerDefaults{})
			if err := p.Err(); err != nil {
				t.Fatalf("config problems: %v", err)
			}
			opts, err := pr.Options(kc.Addrs)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err = cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr()
			if tc.ok != (err == nil) {
				t.Fatalf("produce: %v, want success %v", err, tc.ok)
			}
		})
	}
}

// TestJKSStores: the Kafka client reads Java keystores as Flume's Kafka
// components do: a JKS truststore (Kafka's default type, so none is set)
// verifies the broker, and a JKS keystore whose key has its own password
// (ssl.key.password) is the client's certificate for a broker that
// requires one; without it the broker refuses the client.
func TestJKSStores(t *testing.T) {
	srv, err := tlsconf.Settings{Keystore: testutil.Keystore(t, "server.keystore.jks"), KeystorePassword: testutil.KeystoreServerPass}.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(testutil.Keystore(t, "ca-cert"))
	if err != nil {
		t.Fatal(err)
	}
	cas := x509.NewCertPool()
	cas.AppendCertsFromPEM(caPEM)
	kc := kafkatest.NewTLS(t, &tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: cas, ClientAuth: tls.RequireAndVerifyClientCert}, "t")
	props := map[string]string{
		"kafka.producer.security.protocol":       "SSL",
		"kafka.producer.ssl.truststore.location": testutil.Keystore(t, "client.truststore.jks"),
		"kafka.producer.ssl.truststore.password": testutil.KeystoreTrustPass,
		// The broker's certificate names localhost; kfake listens on 127.0.0.1.
		"kafka.producer.ssl.disableTLSHostnameVerification": "true",
	}
	produce := func(props map[string]string) error {
		p := config.FromMap("a1.sinks.k1.", props)
		pr := ReadProducer(p, "kafka.producer.", ProducerDefaults{})
		if err := p.Err(); err != nil {
			t.Fatalf("config problems: %v", err)
		}
		opts, err := pr.Options(kc.Addrs)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	if err := produce(props); err == nil {
		t.Fatal("a client without a certificate reached a broker that requires one")
	}
	props["kafka.producer.ssl.keystore.location"] = testutil.Keystore(t, "client.keystore.jks")
	props["kafka.producer.ssl.keystore.password"] = testutil.KeystoreClientPass
	props["kafka.producer.ssl.key.password"] = testutil.KeystoreClientKey
	if err := produce(props); err != nil {
		t.Fatalf("JKS truststore and keystore: %v", err)
	}
}
