package kafkaconf

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// TestRefusedOnce: Kerberos and JKS stores, as the Flume User Guide's Kafka
// examples configure them, are each refused in one line at the key that
// asks for them (the store's location when its type is Kafka's default),
// with no second line derived from the same setting (no "SASL needs a
// user" for Kerberos, no "not supported" for sasl.kerberos.service.name).
func TestRefusedOnce(t *testing.T) {
	const pre = "a1.sinks.k1."
	for _, tc := range []struct {
		name  string
		props map[string]string
		want  []string // key: message substring, one per problem, in order
	}{
		{"kerberos", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT",
			"kafka.producer.sasl.mechanism": "GSSAPI", "kafka.producer.sasl.kerberos.service.name": "kafka"},
			[]string{"kafka.producer.sasl.mechanism: Kerberos (GSSAPI) is not supported by sluice's Kafka client; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"}},
		{"kerberos by default", map[string]string{"kafka.producer.security.protocol": "SASL_SSL"},
			[]string{"kafka.producer.security.protocol: SASL_SSL without sasl.mechanism means Kerberos (GSSAPI, Kafka's default)"}},
		{"jks by default", map[string]string{"kafka.producer.security.protocol": "SSL", "kafka.producer.ssl.truststore.location": "/path/to/truststore.jks"},
			[]string{"kafka.producer.ssl.truststore.location: is read as a JKS store (ssl.truststore.type is not set"}},
		{"jks named", map[string]string{"kafka.producer.security.protocol": "SSL", "kafka.producer.ssl.keystore.location": "/k.jks", "kafka.producer.ssl.keystore.type": "JKS"},
			[]string{"kafka.producer.ssl.keystore.type: JKS stores are not supported by sluice"}},
		{"jks without tls is unused", map[string]string{"kafka.producer.ssl.truststore.location": "/t.jks"}, nil},
		{"plain needs a user", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT", "kafka.producer.sasl.mechanism": "PLAIN"},
			[]string{"kafka.producer.sasl.jaas.config: SASL needs a user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := config.FromMap(pre, tc.props)
			ReadProducer(p, "kafka.producer.", ProducerDefaults{})
			var got []string
			for _, pr := range p.Problems().Sorted() {
				got = append(got, strings.TrimPrefix(pr.Key, pre)+": "+pr.Msg)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems:\n%s\nwant %d", strings.Join(got, "\n"), len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], w)
				}
			}
		})
	}
}
