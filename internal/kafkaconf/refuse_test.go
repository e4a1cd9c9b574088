package kafkaconf

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// TestRefusedOnce: settings sluice cannot honour, as the Flume User
// Guide's Kafka examples may write them, are each refused in one line at
// the key that asks for them, with no second line derived from the same
// setting; JKS stores (Kafka's default type) and Kerberos are read.
func TestRefusedOnce(t *testing.T) {
	const pre = "a1.sinks.k1."
	for _, tc := range []struct {
		name  string
		props map[string]string
		want  []string // key: message substring, one per problem, in order
	}{
		{"kerberos without a login", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT",
			"kafka.producer.sasl.mechanism": "GSSAPI", "kafka.producer.sasl.kerberos.service.name": "kafka"},
			[]string{"kafka.producer.sasl.mechanism: Kerberos (GSSAPI) needs the client's login"}},
		{"jks by default", map[string]string{"kafka.producer.security.protocol": "SSL", "kafka.producer.ssl.truststore.location": "/path/to/truststore.jks"}, nil},
		{"jks named", map[string]string{"kafka.producer.security.protocol": "SSL", "kafka.producer.ssl.keystore.location": "/k.jks", "kafka.producer.ssl.keystore.type": "JKS"}, nil},
		{"jceks", map[string]string{"kafka.producer.security.protocol": "SSL", "kafka.producer.ssl.keystore.location": "/k.jks", "kafka.producer.ssl.keystore.type": "JCEKS"},
			[]string{`kafka.producer.ssl.keystore.type: "JCEKS" is not supported; use JKS (Kafka's default), PKCS12 or PEM`}},
		{"oauth", map[string]string{"kafka.producer.security.protocol": "SASL_SSL", "kafka.producer.sasl.mechanism": "OAUTHBEARER"},
			[]string{`kafka.producer.sasl.mechanism: "OAUTHBEARER" is not supported`}},
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
