package kafkaconf

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil/kdc"
)

func gssapiProps(prefix, keytab, principal string) map[string]string {
	return map[string]string{
		prefix + "security.protocol":          "SASL_PLAINTEXT",
		prefix + "sasl.mechanism":             "GSSAPI",
		prefix + "sasl.kerberos.service.name": "kafka",
		prefix + "sasl.jaas.config": fmt.Sprintf(`com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="%s" principal="%s";`,
			keytab, principal),
	}
}

// TestGSSAPI: Kafka clients authenticate with Kerberos to a broker that
// verifies their tickets with its service keytab: a client logged in from
// its keytab (in sasl.jaas.config, or the KafkaClient section of the JAAS
// file -Djava.security.auth.login.config names, as Flume's guide shows)
// produces and consumes; a stale keytab, an expired principal and a broker
// whose keytab no longer matches are each refused with the reason in one
// line.
func TestGSSAPI(t *testing.T) {
	k := kdc.Start(t, kdc.Options{})
	client := k.AddPrincipal(t, "flume/localhost")
	broker := k.AddPrincipal(t, "kafka/127.0.0.1")
	kc, g := kafkatest.NewGSSAPI(t, broker, 0, "t")
	sys := map[string]string{"java.security.krb5.conf": k.Krb5Conf}
	env := Env{Sys: sys, Log: slog.New(slog.DiscardHandler)}
	var connect func(t *testing.T, props map[string]string, env Env, ping bool) error

	produce := func(t *testing.T, props map[string]string, env Env) error { return connect(t, props, env, false) }
	ping := func(t *testing.T, props map[string]string, env Env) error { return connect(t, props, env, true) }
	connect = func(t *testing.T, props map[string]string, env Env, ping bool) error {
		t.Helper()
		p := config.FromMap("a1.sinks.k1.", props)
		pr := ReadProducer(p, "kafka.producer.", ProducerDefaults{Env: env})
		if err := p.Err(); err != nil {
			t.Fatalf("config problems: %v", err)
		}
		opts, err := pr.Options(kc.Addrs)
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0), kgo.RetryTimeout(2*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if ping {
			// Ping returns the connection's own error, where a produce
			// would retry it until its context ends.
			return cl.Ping(ctx)
		}
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("kerberized")}).FirstErr()
	}

	t.Run("accepted", func(t *testing.T) {
		if err := produce(t, gssapiProps("kafka.producer.", client, "flume/localhost@"+kdc.Realm), env); err != nil {
			t.Fatal(err)
		}
		// A consumer logs in the same way and reads the record back.
		p := config.FromMap("a1.sources.r1.", gssapiProps("kafka.consumer.", client, "flume/localhost"))
		c := ReadConsumer(p, "kafka.consumer.", ConsumerDefaults{Group: "g", Reset: "earliest", Env: env})
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		opts, err := c.Options(kc.Addrs)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics("t"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fs := cl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 || fs.NumRecords() == 0 || string(fs.Records()[0].Value) != "kerberized" {
			t.Fatalf("consume: %v, %d records", errs, fs.NumRecords())
		}
		if n := g.Accepted()["flume/localhost@"+kdc.Realm]; n < 2 {
			t.Fatalf("the broker accepted %d sessions of flume/localhost, want at least 2: %v", n, g.Accepted())
		}
	})

	t.Run("jaas file", func(t *testing.T) {
		jaas := filepath.Join(t.TempDir(), "flume_jaas.conf")
		text := fmt.Sprintf("KafkaClient {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n  storeKey=true\n  keyTab=%q\n  principal=\"flume/localhost@%s\";\n};\n", client, kdc.Realm)
		if err := os.WriteFile(jaas, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		props := map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT", "kafka.producer.sasl.mechanism": "GSSAPI",
			"kafka.producer.sasl.kerberos.service.name": "kafka"}
		fileEnv := Env{Sys: map[string]string{"java.security.krb5.conf": k.Krb5Conf, "java.security.auth.login.config": jaas}, Log: env.Log}
		if err := produce(t, props, fileEnv); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("refused", func(t *testing.T) {
		stale := k.AddPrincipal(t, "flume/stale")
		k.Keytab(t, "flume/stale")
		expired := k.AddPrincipal(t, "flume/expired")
		k.Kadmin(t, `modprinc -expire "2000-01-01 00:00:00 UTC" flume/expired`)
		for _, tc := range []struct{ keytab, principal, want string }{
			{stale, "flume/stale", "kerberos login as flume/stale (keytab " + stale + "): KDC_ERR_PREAUTH_FAILED"},
			{expired, "flume/expired", "kerberos login as flume/expired (keytab " + expired + "): KDC_ERR_NAME_EXP"},
			{client, "flume/other", "kafka.producer.sasl.jaas.config: keytab " + client + " holds no key for flume/other@SLUICE.TEST"},
		} {
			err := produce(t, gssapiProps("kafka.producer.", tc.keytab, tc.principal), env)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v\nwant one line with %q", tc.principal, err, tc.want)
			}
		}
	})

	t.Run("broker keytab stale", func(t *testing.T) {
		// New keys for the broker's service principal: tickets the KDC
		// issues now are encrypted with keys the broker's keytab lacks.
		k.Keytab(t, "kafka/127.0.0.1")
		err := ping(t, gssapiProps("kafka.producer.", client, "flume/localhost"), env)
		if err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") || !strings.Contains(err.Error(), "ticket refused") ||
			strings.Contains(err.Error(), "\n") {
			t.Fatalf("connect through a broker with a stale keytab: %v", err)
		}
		if r := g.Refused(); len(r) == 0 {
			t.Fatal("the broker refused nothing")
		}
		t.Logf("refused: %v", err)
	})
}

// TestGSSAPIConfig: what a GSSAPI setting needs is checked when the config
// is read: a login (sasl.jaas.config, or -Djava.security.auth.login.config),
// a keytab login rather than a ticket cache, and the service name.
func TestGSSAPIConfig(t *testing.T) {
	const pre = "a1.sinks.k1."
	for _, tc := range []struct {
		name  string
		props map[string]string
		sys   map[string]string
		want  string
	}{
		{"no login", map[string]string{"kafka.producer.security.protocol": "SASL_SSL", "kafka.producer.sasl.mechanism": "GSSAPI", "kafka.producer.sasl.kerberos.service.name": "kafka"}, nil,
			"kafka.producer.sasl.mechanism: Kerberos (GSSAPI) needs the client's login: set kafka.producer.sasl.jaas.config = com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true"},
		{"kafka's default mechanism", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT"}, nil,
			"kafka.producer.security.protocol: Kerberos (GSSAPI, Kafka's default SASL mechanism) needs the client's login"},
		{"jaas file", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT", "kafka.producer.sasl.kerberos.service.name": "kafka"},
			map[string]string{"java.security.auth.login.config": "/etc/flume/flume_jaas.conf"}, ""},
		{"ticket cache", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT", "kafka.producer.sasl.kerberos.service.name": "kafka",
			"kafka.producer.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;"}, nil, "logs in from a ticket cache"},
		{"no service name", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT",
			"kafka.producer.sasl.jaas.config": `com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k" principal="p";`}, nil,
			"kafka.producer.sasl.kerberos.service.name: Kerberos (GSSAPI) needs the brokers' service name"},
		{"service name in jaas", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT",
			"kafka.producer.sasl.jaas.config": `com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k" principal="p" serviceName="kafka";`}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := config.FromMap(pre, tc.props)
			ReadProducer(p, "kafka.producer.", ProducerDefaults{Env: Env{Sys: tc.sys}})
			err := p.Err()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("problems: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("problems: %v\nwant %q", err, tc.want)
			}
		})
	}
}
