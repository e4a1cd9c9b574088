package kafkaconf

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
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
