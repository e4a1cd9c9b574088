package kafkaconf

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
)

func selfSigned(t *testing.T, dnsName string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestDisableTLSHostnameVerification: Flume's
// kafka.producer.ssl.disableTLSHostnameVerification = true is honoured, not
// refused: a broker whose certificate does not name the address dialed is
// reached; without it, it is not; and the certificate chain is checked
// either way (an untrusted broker is refused).
func TestDisableTLSHostnameVerification(t *testing.T) {
	cert, certPEM := selfSigned(t, "kafka.internal.example") // no IP: 127.0.0.1 does not match
	_, otherPEM := selfSigned(t, "kafka.internal.example")
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
