// Package kafkaconf turns the Kafka properties of Flume's Kafka sink, source
// and channel (kafka.bootstrap.servers, kafka.producer.*, kafka.consumer.*)
// into franz-go (kgo) client options, and holds what the three components
// share: TLS and SASL, the Flume event format, a throttled kgo logger on
// slog, the consumer lag metric, their health (Health, Probe,
// healthGraceMillis) and what they need to go on after a topic is deleted
// and re-created under them (TopicGone, Recreated, FetchBackoff).
//
// Every kafka.producer.* and kafka.consumer.* setting sluice supports maps
// to a kgo option; any other setting is a configuration error that names
// the supported ones, never silently ignored.
package kafkaconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/kerberos"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Brokers reads kafka.bootstrap.servers (required; a comma list of
// host:port). A Flume 1.6 name such as brokerList may be given as legacy:
// it is used when kafka.bootstrap.servers is not set.
func Brokers(p *config.Props, legacy string) []string {
	if legacy != "" && !p.Has("kafka.bootstrap.servers") && p.Has(legacy) {
		return p.Split(legacy, ",")
	}
	if legacy != "" {
		p.Has(legacy) // known, even when unset
	}
	if !p.Has("kafka.bootstrap.servers") && p.Has("zookeeperConnect") {
		p.MarkUsed("zookeeperConnect")
		p.Errorf("zookeeperConnect", "sluice does not look the brokers up in ZooKeeper; set kafka.bootstrap.servers to them (host:9092,...), which Flume asks for since 1.7")
		return nil
	}
	p.Required("kafka.bootstrap.servers")
	out := p.Split("kafka.bootstrap.servers", ",")
	for _, b := range out {
		if !strings.Contains(b, ":") {
			p.Errorf("kafka.bootstrap.servers", "broker %q has no port; write host:port, such as %s:9092", b, b)
		}
	}
	return out
}

// settings reads the keys under one prefix (kafka.producer. or
// kafka.consumer.) and remembers which it knows, so the rest can be
// reported.
type settings struct {
	p      *config.Props
	prefix string
	known  []string
}

func (s *settings) key(name string) string {
	s.known = append(s.known, name)
	return s.prefix + name
}

func (s *settings) has(name string) bool { return s.p.Has(s.key(name)) }

func (s *settings) str(name, def string) string { return s.p.String(s.key(name), def) }

func (s *settings) ms(name string, def, lo int) time.Duration {
	return time.Duration(s.p.IntRange(s.key(name), def, lo, math.MaxInt32)) * time.Millisecond
}

func (s *settings) int(name string, def, lo, hi int) int {
	return s.p.IntRange(s.key(name), def, lo, hi)
}

// oneOf accepts only the listed values (compared case-insensitively) and
// explains why others are refused.
func (s *settings) oneOf(name, def, why string, allowed ...string) string {
	k := s.key(name)
	v, ok := strings.TrimSpace(s.p.String(k, def)), s.p.Has(k)
	for _, a := range allowed {
		if strings.EqualFold(v, a) {
			return a
		}
	}
	if ok {
		s.p.Errorf(k, "%q is not supported; %s", v, why)
	}
	return def
}

// rest reports every key under the prefix that was not read as
// unsupported, naming the supported ones.
func (s *settings) rest() {
	known := map[string]bool{}
	for _, k := range s.known {
		known[k] = true
	}
	names := append([]string(nil), s.known...)
	sort.Strings(names)
	names = compact(names)
	for _, k := range s.p.Keys(s.prefix) {
		name := strings.TrimPrefix(k, s.prefix)
		if known[name] {
			continue
		}
		s.p.MarkUsed(k)
		s.p.Errorf(k, "%s%s is not supported by sluice's Kafka client (franz-go); remove it, or use one of the supported settings: %s",
			s.prefix, name, strings.Join(names, ", "))
	}
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Security is how a client connects: security.protocol with the ssl.* and
// sasl.* settings.
type Security struct {
	Protocol string // PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
	// TLS holds whom to trust (ssl.truststore.*) and the client
	// certificate for mutual TLS (ssl.keystore.*, ssl.key.password), loaded
	// at Start.
	TLS tlsconf.Settings
	// NoHostnameCheck is ssl.endpoint.identification.algorithm set empty:
	// the certificate chain is verified, the host name is not.
	NoHostnameCheck bool
	Mechanism       string // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI
	User, Password  string
	// Kerberos (GSSAPI): the brokers' service name
	// (sasl.kerberos.service.name), and the login from sasl.jaas.config, or
	// else from the KafkaClient section of the JAAS file named by
	// -Djava.security.auth.login.config (read at Start).
	ServiceName string
	Login       kerberos.Login
	JAASFile    string
	sys         map[string]string
	log         *slog.Logger
	jaasKey     string // the property to fix when the login is wrong
}

var jaasField = regexp.MustCompile(`(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"`)

func (s *settings) security(d Env) Security {
	sec := Security{sys: d.Sys, log: d.Log}
	if sec.log == nil {
		sec.log = slog.Default()
	}
	sec.Protocol = s.oneOf("security.protocol", "PLAINTEXT",
		"use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
	tlsOn := sec.Protocol == "SSL" || sec.Protocol == "SASL_SSL"
	sec.TLS = tlsconf.Settings{Enabled: tlsOn, VerifyHostname: true} // Kafka's default, unless turned off below
	const storeWhy = "use JKS (Kafka's default), PKCS12 or PEM"
	sec.TLS.Truststore = s.str("ssl.truststore.location", "")
	sec.TLS.TruststorePassword = s.str("ssl.truststore.password", "")
	sec.TLS.TruststoreType = strings.ToLower(s.oneOf("ssl.truststore.type", "JKS", storeWhy, "JKS", "PKCS12", "PEM"))
	sec.TLS.Keystore = s.str("ssl.keystore.location", "")
	sec.TLS.KeystorePassword = s.str("ssl.keystore.password", "")
	sec.TLS.KeyPassword = s.str("ssl.key.password", "")
	sec.TLS.KeystoreType = strings.ToLower(s.oneOf("ssl.keystore.type", "JKS", storeWhy, "JKS", "PKCS12", "PEM"))
	sec.TLS.KeyAlias = s.str("ssl.keystore.alias", "") // sluice's: which key of several
	sec.TLS.Names = tlsconf.Names{
		Keystore: s.p.Full(s.prefix + "ssl.keystore.location"), KeystorePassword: s.p.Full(s.prefix + "ssl.keystore.password"),
		KeyPassword: s.p.Full(s.prefix + "ssl.key.password"), KeyAlias: s.p.Full(s.prefix + "ssl.keystore.alias"),
		Truststore: s.p.Full(s.prefix + "ssl.truststore.location"), TruststorePassword: s.p.Full(s.prefix + "ssl.truststore.password"),
	}
	alg := s.oneOf("ssl.endpoint.identification.algorithm", "https",
		"use https (verify the broker's host name, the default) or an empty value (do not)", "https", "")
	sec.NoHostnameCheck = alg == ""
	// Flume's own switch for the same thing (Flume drops empty values, so
	// its Kafka components read this key instead of an empty algorithm):
	// the broker's certificate chain is still verified, its name is not.
	if s.p.Bool(s.key("ssl.disableTLSHostnameVerification"), false) {
		sec.NoHostnameCheck = true
	}

	saslOn := strings.HasPrefix(sec.Protocol, "SASL_")
	sec.Mechanism = s.oneOf("sasl.mechanism", "GSSAPI",
		"use GSSAPI (Kerberos, Kafka's default), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (OAUTHBEARER is not supported)",
		"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")
	sec.ServiceName = strings.TrimSpace(s.str("sasl.kerberos.service.name", ""))
	// Java's kinit and renewal timing: gokrb5 renews at 5/6 of a ticket's
	// life and logs in again from the keytab, which needs no tuning.
	for _, k := range []string{"sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
		"sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin"} {
		if s.has(k) && saslOn {
			s.p.Notef(s.prefix+k, "not needed by sluice: it renews Kerberos tickets itself at 5/6 of their life and logs in again from the keytab")
		}
	}
	jaasKey := s.prefix + "sasl.jaas.config"
	jaas := s.str("sasl.jaas.config", "")
	// A refused mechanism is one problem, not a second about its login.
	raw := strings.TrimSpace(s.p.String(s.prefix+"sasl.mechanism", ""))
	mechRefused := raw != "" && !strings.EqualFold(raw, sec.Mechanism)
	switch {
	case !saslOn || mechRefused:
	case sec.Mechanism == "GSSAPI":
		sec.kerberos(s, jaas, jaasKey)
	default:
		for _, m := range jaasField.FindAllStringSubmatch(jaas, -1) {
			v := strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(m[2])
			switch m[1] {
			case "username":
				sec.User = v
			case "password":
				sec.Password = v
			}
		}
		if sec.User == "" {
			s.p.Errorf(jaasKey, `SASL needs a user; set it as in Kafka: org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`)
		}
	}
	return sec
}

// kerberos reads the GSSAPI login: sasl.jaas.config, else the JAAS file of
// -Djava.security.auth.login.config (read at Start, as the keystores are).
func (sec *Security) kerberos(s *settings, jaas, jaasKey string) {
	const example = `com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/etc/security/keytabs/flume.keytab" principal="flume/host.example.com@EXAMPLE.COM";`
	sec.jaasKey = jaasKey
	switch {
	case strings.TrimSpace(jaas) != "":
		es, err := kerberos.ParseJAASEntries(jaas)
		var svc string
		if err == nil {
			sec.Login, svc, err = kerberos.KeytabLogin(es)
		}
		if err != nil {
			s.p.Errorf(jaasKey, "%v; for Kerberos write: %s", err, example)
			return
		}
		if sec.ServiceName == "" {
			sec.ServiceName = svc
		}
		if sec.ServiceName == "" {
			s.p.Errorf(s.prefix+"sasl.kerberos.service.name", "Kerberos (GSSAPI) needs the brokers' service name; set sasl.kerberos.service.name (usually kafka)")
		}
	case sec.sys[kerberos.SysJAASConfig] != "":
		sec.JAASFile = sec.sys[kerberos.SysJAASConfig]
		sec.jaasKey = "-D" + kerberos.SysJAASConfig
	default:
		key := s.prefix + "sasl.mechanism"
		if !s.p.Has(key) {
			key = s.prefix + "security.protocol"
		}
		s.p.Errorf(key, "Kerberos (GSSAPI%s) needs the client's login: set %s = %s or start sluice with -D%s=FILE naming a JAAS file with a KafkaClient section, as Flume's documentation shows",
			map[bool]string{true: "", false: ", Kafka's default SASL mechanism"}[s.p.Has(s.prefix+"sasl.mechanism")], jaasKey, example, kerberos.SysJAASConfig)
	}
}

// tlsConfig loads the stores and returns the TLS configuration, or nil
// when TLS is off.
func (sec Security) tlsConfig() (*tls.Config, error) {
	c, err := sec.TLS.ClientConfig("")
	if err != nil || c == nil {
		return c, err
	}
	if sec.NoHostnameCheck && !c.InsecureSkipVerify {
		// Verify the chain against the trusted roots, not the host name.
		roots := c.RootCAs
		c.InsecureSkipVerify = true //nolint:gosec // chain verified below
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("broker sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return c, nil
}

// options returns the kgo options for the security settings, loading the
// TLS stores and, for Kerberos, logging in.
func (sec Security) options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := sec.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch {
	case !strings.HasPrefix(sec.Protocol, "SASL_"):
	case sec.Mechanism == "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: sec.User, Pass: sec.Password}.AsMechanism()))
	case sec.Mechanism == "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: sec.User, Pass: sec.Password}.AsSha256Mechanism()))
	case sec.Mechanism == "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: sec.User, Pass: sec.Password}.AsSha512Mechanism()))
	case sec.Mechanism == "GSSAPI":
		m, err := sec.gssapi()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// common reads the settings producers and consumers share.
func (s *settings) common() (opts []kgo.Opt) {
	if id := s.str("client.id", ""); id != "" {
		opts = append(opts, kgo.ClientID(id))
	}
	opts = append(opts, kgo.MetadataMaxAge(s.ms("metadata.max.age.ms", 300000, 1000)))
	base := s.ms("retry.backoff.ms", 100, 1)
	// sluice's default cap is 500 ms (Kafka's is 1 s), so a client is back
	// within about half a second of a broker's return.
	limit := s.ms("retry.backoff.max.ms", 500, 1)
	s.ms("reconnect.backoff.ms", 50, 0)       // kgo reconnects on the retry backoff
	s.ms("reconnect.backoff.max.ms", 1000, 0) // likewise
	opts = append(opts, kgo.RetryBackoffFn(Backoff(base, max(limit, base))))
	// kgo refreshes metadata at most every 5 s by default, and a client
	// that lost its broker waits for a refresh: allow one per backoff cap.
	opts = append(opts, kgo.MetadataMinAge(max(limit/2, 10*time.Millisecond)))
	return opts
}

// Backoff returns kgo's retry backoff: base doubling per failure up to
// limit, less up to 20% jitter, as Kafka's retry.backoff.ms and
// retry.backoff.max.ms. With sluice's defaults (100 ms, 500 ms) a client
// reconnects to a broker that came back within about half a second.
func Backoff(base, limit time.Duration) func(int) time.Duration {
	return func(fails int) time.Duration {
		d := base
		for i := 1; i < fails && d < limit; i++ {
			d *= 2
		}
		d = min(d, limit)
		return time.Duration(float64(d) * (0.8 + 0.2*rand.Float64()))
	}
}

// Producer is what kafka.producer.* configures.
type Producer struct {
	Security Security
	Acks     string        // "0", "1" or "all"
	Linger   time.Duration // linger.ms
	MaxBlock time.Duration // max.block.ms: how long a produce may wait for buffer space
	// DeliveryTimeout is delivery.timeout.ms: how long a batch may wait for
	// its acknowledgements before it fails (and is rolled back).
	DeliveryTimeout time.Duration
	opts            []kgo.Opt
}

// Env is what every client reads besides its properties.
type Env struct {
	// Sys holds the JVM system properties given with -D, where Flume's
	// Kafka clients find the Kerberos login (java.security.auth.login.config)
	// and krb5.conf (java.security.krb5.conf).
	Sys map[string]string
	// Log is the component's logger, for the Kerberos login's lines.
	Log *slog.Logger
}

// ProducerDefaults are the component's defaults for settings whose Kafka
// default the component overrides, and what it reads besides its
// properties (Sys, Log).
type ProducerDefaults struct {
	Env
	Acks string // Flume's sink and channel use "1" and "all"
	// DeliveryTimeout replaces Kafka's 120 s default of delivery.timeout.ms.
	DeliveryTimeout time.Duration
}

// ReadProducer reads the settings under prefix (such as "kafka.producer.")
// and reports unsupported ones: acks, linger.ms, batch.size,
// compression.type, max.request.size, max.block.ms, buffer.memory,
// enable.idempotence, max.in.flight.requests.per.connection, retries,
// delivery.timeout.ms, request.timeout.ms, retry.backoff.ms,
// retry.backoff.max.ms, reconnect.backoff(.max).ms, metadata.max.age.ms,
// client.id, key.serializer, value.serializer, security.protocol, ssl.* and
// sasl.*.
func ReadProducer(p *config.Props, prefix string, d ProducerDefaults) *Producer {
	s := &settings{p: p, prefix: prefix}
	pr := &Producer{}
	if d.Acks == "" {
		d.Acks = "1"
	}
	pr.Acks = s.oneOf("acks", d.Acks, "use 0, 1, all or -1", "0", "1", "all", "-1")
	if pr.Acks == "-1" {
		pr.Acks = "all"
	}
	var opts []kgo.Opt
	switch pr.Acks {
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	idemKey := s.key("enable.idempotence")
	idem := p.Bool(idemKey, pr.Acks == "all")
	if idem && pr.Acks != "all" {
		if p.Has(idemKey) {
			p.Errorf(idemKey, "idempotent writes need acks = all (acks is %s); set acks = all or enable.idempotence = false", pr.Acks)
		}
		idem = false
	}
	if !idem {
		opts = append(opts, kgo.DisableIdempotentWrite())
		if s.has("max.in.flight.requests.per.connection") {
			opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(s.int("max.in.flight.requests.per.connection", 5, 1, 1000)))
		}
	} else {
		s.int("max.in.flight.requests.per.connection", 5, 1, 5)
	}
	pr.Linger = s.ms("linger.ms", 0, 0)
	if pr.Linger > time.Minute {
		p.Errorf(prefix+"linger.ms", "%v is too long; use at most 60000", pr.Linger)
		pr.Linger = 0
	}
	opts = append(opts, kgo.ProducerLinger(pr.Linger))
	maxReq := s.int("max.request.size", 1048576, 1024, 1<<30)
	batch := maxReq
	if s.has("batch.size") {
		batch = s.int("batch.size", 16384, 512, 1<<30)
	}
	opts = append(opts, kgo.ProducerBatchMaxBytes(int32(batch)))
	opts = append(opts, kgo.BrokerMaxWriteBytes(max(100<<20, int32(maxReq)*2)))
	switch s.oneOf("compression.type", "none", "use none, gzip, snappy, lz4 or zstd", "none", "gzip", "snappy", "lz4", "zstd") {
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	default:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	}
	pr.MaxBlock = s.ms("max.block.ms", 60000, 0)
	opts = append(opts, kgo.MaxBufferedBytes(s.int("buffer.memory", 33554432, 1024, math.MaxInt32)))
	if s.has("retries") {
		opts = append(opts, kgo.RecordRetries(s.int("retries", math.MaxInt32, 0, math.MaxInt32)))
	}
	// Not kgo's RecordDeliveryTimeout, which counts from the record's
	// timestamp (and so fails at once a record stamped from an old
	// timestampHeader): the components bound each batch with a context.
	if d.DeliveryTimeout <= 0 {
		d.DeliveryTimeout = 120 * time.Second
	}
	pr.DeliveryTimeout = s.ms("delivery.timeout.ms", int(d.DeliveryTimeout/time.Millisecond), 1000)
	opts = append(opts, kgo.ProduceRequestTimeout(s.ms("request.timeout.ms", 30000, 100)))
	s.oneOf("key.serializer", "org.apache.kafka.common.serialization.StringSerializer",
		"sluice writes the key header's UTF-8 bytes, as StringSerializer does",
		"org.apache.kafka.common.serialization.StringSerializer")
	s.oneOf("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer",
		"sluice writes the event body as bytes, as ByteArraySerializer does",
		"org.apache.kafka.common.serialization.ByteArraySerializer")
	opts = append(opts, s.common()...)
	pr.Security = s.security(d.Env)
	s.rest()
	pr.opts = opts
	return pr
}

// Options returns the kgo options for brokers, loading the TLS stores.
func (pr *Producer) Options(brokers []string) ([]kgo.Opt, error) {
	sec, err := pr.Security.options()
	if err != nil {
		return nil, err
	}
	// Java's producer asks the broker to create a missing topic (the broker's
	// auto.create.topics.enable decides); so does sluice's.
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation()}, pr.opts...)
	return append(opts, sec...), nil
}

// Consumer is what kafka.consumer.* configures.
type Consumer struct {
	Security Security
	Group    string
	Reset    string // earliest, latest or none
	MaxPoll  int    // max.poll.records, 0 if unset
	opts     []kgo.Opt
}

// ConsumerDefaults are the component's defaults, and what it reads besides
// its properties (Sys, Log).
type ConsumerDefaults struct {
	Env
	Group string // "flume"
	Reset string // "latest" (Kafka's) or "earliest"
}

// ReadConsumer reads the settings under prefix (such as "kafka.consumer.")
// and reports unsupported ones: group.id, auto.offset.reset, client.id,
// group.instance.id, session.timeout.ms, heartbeat.interval.ms,
// max.poll.interval.ms, max.poll.records, fetch.min.bytes, fetch.max.bytes,
// fetch.max.wait.ms, max.partition.fetch.bytes, isolation.level,
// partition.assignment.strategy, enable.auto.commit (false only),
// request.timeout.ms, retry.backoff(.max).ms, reconnect.backoff(.max).ms,
// metadata.max.age.ms, key.deserializer, value.deserializer,
// security.protocol, ssl.* and sasl.*.
func ReadConsumer(p *config.Props, prefix string, d ConsumerDefaults) *Consumer {
	s := &settings{p: p, prefix: prefix}
	c := &Consumer{}
	c.Group = strings.TrimSpace(s.str("group.id", d.Group))
	if c.Group == "" {
		p.Errorf(prefix+"group.id", "the consumer group must not be empty")
	}
	var opts []kgo.Opt
	if id := s.str("group.instance.id", ""); id != "" {
		opts = append(opts, kgo.InstanceID(id))
	}
	c.Reset = s.oneOf("auto.offset.reset", d.Reset, "use earliest, latest or none", "earliest", "latest", "none")
	switch c.Reset {
	case "earliest":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	case "latest":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	default:
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NoResetOffset()))
	}
	opts = append(opts,
		kgo.SessionTimeout(s.ms("session.timeout.ms", 45000, 1000)),
		kgo.HeartbeatInterval(s.ms("heartbeat.interval.ms", 3000, 100)),
		kgo.RebalanceTimeout(s.ms("max.poll.interval.ms", 300000, 1000)),
		kgo.FetchMinBytes(int32(s.int("fetch.min.bytes", 1, 1, math.MaxInt32))),
		kgo.FetchMaxBytes(int32(s.int("fetch.max.bytes", 52428800, 1024, math.MaxInt32))),
		kgo.FetchMaxWait(s.ms("fetch.max.wait.ms", 500, 0)),
		kgo.FetchMaxPartitionBytes(int32(s.int("max.partition.fetch.bytes", 1048576, 1024, math.MaxInt32))),
	)
	if s.has("max.poll.records") {
		c.MaxPoll = s.int("max.poll.records", 500, 1, math.MaxInt32)
	}
	if s.oneOf("isolation.level", "read_uncommitted", "use read_uncommitted or read_committed", "read_uncommitted", "read_committed") == "read_committed" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	const (
		rangeA = "org.apache.kafka.clients.consumer.RangeAssignor"
		rrA    = "org.apache.kafka.clients.consumer.RoundRobinAssignor"
		stA    = "org.apache.kafka.clients.consumer.StickyAssignor"
		coopA  = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
	)
	var bal []kgo.GroupBalancer
	for _, a := range p.Split(s.key("partition.assignment.strategy"), ",") {
		switch a {
		case rangeA, "range":
			bal = append(bal, kgo.RangeBalancer())
		case rrA, "roundrobin":
			bal = append(bal, kgo.RoundRobinBalancer())
		case stA, "sticky":
			bal = append(bal, kgo.StickyBalancer())
		case coopA, "cooperative-sticky":
			bal = append(bal, kgo.CooperativeStickyBalancer())
		default:
			p.Errorf(prefix+"partition.assignment.strategy", "%q is not supported; use %s, %s, %s or %s", a, rangeA, rrA, stA, coopA)
		}
	}
	if len(bal) == 0 {
		// Kafka's default list: range first, cooperative-sticky as upgrade path.
		bal = []kgo.GroupBalancer{kgo.CooperativeStickyBalancer(), kgo.RangeBalancer()}
	}
	opts = append(opts, kgo.Balancers(bal...))
	s.oneOf("enable.auto.commit", "false",
		"sluice commits offsets itself, only after the events are committed into the channel (set it to false or remove it)", "false")
	s.ms("request.timeout.ms", 30000, 100)
	s.oneOf("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer",
		"sluice reads the key as UTF-8 text into the key header",
		"org.apache.kafka.common.serialization.StringDeserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer")
	s.oneOf("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer",
		"sluice reads the value as bytes",
		"org.apache.kafka.common.serialization.ByteArrayDeserializer")
	opts = append(opts, s.common()...)
	c.Security = s.security(d.Env)
	s.rest()
	c.opts = opts
	return c
}

// Options returns the kgo options for brokers and the group, loading the
// TLS stores. The caller adds the topics and its rebalance callbacks.
func (c *Consumer) Options(brokers []string) ([]kgo.Opt, error) {
	sec, err := c.Security.options()
	if err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(c.Group), kgo.DisableAutoCommit()}, c.opts...)
	return append(opts, sec...), nil
}

// ReadZooKeeperKeys reads the Kafka source's and channel's keys of the
// ZooKeeper era (Flume 1.6), which sluice does without: zookeeperConnect,
// which Flume uses only to look the brokers up when kafka.bootstrap.servers
// is unset (Brokers refuses that case), and migrateZookeeperOffsets.
func ReadZooKeeperKeys(p *config.Props) {
	if p.Has("kafka.bootstrap.servers") {
		p.Ignored("zookeeperConnect", "Flume reads it only to look the brokers up when kafka.bootstrap.servers is unset")
	}
	p.Ignored("migrateZookeeperOffsets", "sluice reads the group's offsets from Kafka only: offsets a Flume 1.6 agent kept in ZooKeeper are not carried over, and a group without offsets in Kafka starts where auto.offset.reset says")
}
