package kafkasink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

var quiet = func() *slog.Logger {
	if os.Getenv("KDEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}()

// newSink builds a started sink over pl's channel with props (bootstrap
// servers added).
func newSink(t *testing.T, kc *kafkatest.Cluster, pl *sourcetest.Pipeline, props map[string]string) (flow.Sink, *metrics.Registry) {
	t.Helper()
	return newSinkLog(t, kc, pl, props, quiet)
}

// newSinkLog is newSink logging to log.
func newSinkLog(t *testing.T, kc *kafkatest.Cluster, pl *sourcetest.Pipeline, props map[string]string, log *slog.Logger) (flow.Sink, *metrics.Registry) {
	t.Helper()
	m := map[string]string{"kafka.bootstrap.servers": kc.Brokers()}
	for k, v := range props {
		m[k] = v
	}
	p := config.FromMap("a1.sinks.k1.", m)
	reg := metrics.NewRegistry("a1")
	s, err := New(flow.Env{Agent: "a1", Name: "k1", Type: "kafka", Logger: log, Metrics: reg, Channel: pl.Channel}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s, reg
}

// drain calls Process until the channel is empty.
func drain(t *testing.T, s flow.Sink, pl *sourcetest.Pipeline) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for pl.Channel.Len() > 0 {
		if _, err := s.Process(ctx); err != nil {
			t.Fatalf("process: %v", err)
		}
	}
}

func TestSinkDeliversExactly(t *testing.T) {
	kc := kafkatest.New(t, 1, 4, "plain", "logs-web", "logs-db", "other", "avro", "stamped")
	h := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	// eh is an event's headers, set in the order given.
	eh := func(kv ...string) event.Headers {
		var hs event.Headers
		for i := 0; i < len(kv); i += 2 {
			hs.Set(kv[i], kv[i+1])
		}
		return hs
	}
	type want struct {
		topic     string
		partition int32 // -1: any
		key       string
		headers   map[string]string // Kafka record headers
		ts        int64             // ms, 0: not checked
	}
	tests := []struct {
		name   string
		props  map[string]string
		events []event.Event
		want   []want
		flume  bool // values are AvroFlumeEvents
	}{
		{
			name:  "body key and mapped headers",
			props: map[string]string{"kafka.topic": "plain", "header.app": "application", "header.missing": "m"},
			events: []event.Event{
				{Headers: eh("key", "k1", "app", "web", "other", "x"), Body: []byte("one")},
				{Headers: eh("app", "db"), Body: []byte("two")},
				{Body: []byte{0, 1, 2, 0xff}},
			},
			want: []want{
				{topic: "plain", partition: -1, key: "k1", headers: h("application", "web")},
				{topic: "plain", partition: -1, headers: h("application", "db")},
				{topic: "plain", partition: -1, headers: h()},
			},
		},
		{
			name:  "partition header and default partition",
			props: map[string]string{"kafka.topic": "plain", "partitionIdHeader": "p", "defaultPartitionId": "2"},
			events: []event.Event{
				{Headers: eh("p", "3"), Body: []byte("to3")},
				{Headers: eh("p", "0", "key", "kk"), Body: []byte("to0")},
				{Body: []byte("default2")},
				{Headers: eh("p", "nonsense"), Body: []byte("bad header falls back to default")},
			},
			want: []want{
				{topic: "plain", partition: 3, headers: h()},
				{topic: "plain", partition: 0, key: "kk", headers: h()},
				{topic: "plain", partition: 2, headers: h()},
				{topic: "plain", partition: 2, headers: h()},
			},
		},
		{
			name:  "topic escapes and override",
			props: map[string]string{"kafka.topic": "logs-%{svc}"},
			events: []event.Event{
				{Headers: eh("svc", "web"), Body: []byte("w")},
				{Headers: eh("svc", "db"), Body: []byte("d")},
				{Headers: eh("svc", "web", "topic", "other"), Body: []byte("overridden")},
			},
			want: []want{
				{topic: "logs-web", partition: -1, headers: h()},
				{topic: "logs-db", partition: -1, headers: h()},
				{topic: "other", partition: -1, headers: h()},
			},
		},
		{
			name:  "override disallowed",
			props: map[string]string{"kafka.topic": "logs-%{svc}", "allowTopicOverride": "false"},
			events: []event.Event{
				{Headers: eh("svc", "db", "topic", "other"), Body: []byte("not overridden")},
			},
			want: []want{{topic: "logs-db", partition: -1, headers: h()}},
		},
		{
			name:  "custom topic header and timestamp header",
			props: map[string]string{"kafka.topic": "plain", "topicHeader": "dest", "timestampHeader": "ts"},
			events: []event.Event{
				{Headers: eh("dest", "stamped", "ts", "1600000000123"), Body: []byte("stamped")},
			},
			want: []want{{topic: "stamped", partition: -1, headers: h(), ts: 1600000000123}},
		},
		{
			name:  "flume event format",
			props: map[string]string{"kafka.topic": "avro", "useFlumeEventFormat": "true", "kafka.producer.compression.type": "zstd"},
			events: []event.Event{
				{Headers: eh("a", "1", "key", "k"), Body: []byte("avro body")},
				{Body: []byte("no headers")},
			},
			want: []want{
				{topic: "avro", partition: -1, key: "k", headers: h()},
				{topic: "avro", partition: -1, headers: h()},
			},
			flume: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 1000, 100, 100*time.Millisecond)
			s, reg := newSink(t, kc, pl, tc.props)
			// Unique bodies per run, so records of earlier cases in a shared topic are told apart.
			tag := strings.ReplaceAll(tc.name, " ", "_") + ":"
			evs := make([]event.Event, len(tc.events))
			for i, e := range tc.events {
				evs[i] = event.Event{Headers: e.Headers, Body: append([]byte(tag), e.Body...)}
			}
			if err := pl.Processor.Process(context.Background(), copyEvents(evs)); err != nil {
				t.Fatal(err)
			}
			drain(t, s, pl)
			got := map[string]*kgo.Record{}
			var topics []string
			for _, w := range tc.want {
				if !slices.Contains(topics, w.topic) {
					topics = append(topics, w.topic)
				}
			}
			bodyOf := func(r *kgo.Record) string {
				if !tc.flume {
					return string(r.Value)
				}
				e, err := kafkaconf.DecodeFlumeEvent(r.Value)
				if err != nil {
					return "" // another case's record
				}
				return string(e.Body)
			}
			kafkatest.ReadUntil(t, kc.Addrs, topics, 10*time.Second, func(recs []*kgo.Record) bool {
				for _, r := range recs {
					if b := bodyOf(r); strings.HasPrefix(b, tag) {
						got[b] = r
					}
				}
				return len(got) >= len(evs)
			})
			if len(got) != len(evs) {
				t.Fatalf("got %d records, want %d", len(got), len(evs))
			}
			for i, w := range tc.want {
				r := got[string(evs[i].Body)]
				if r == nil {
					t.Fatalf("event %d (%q) did not arrive", i, evs[i].Body)
				}
				if r.Topic != w.topic {
					t.Errorf("event %d: topic %q, want %q", i, r.Topic, w.topic)
				}
				if w.partition >= 0 && r.Partition != w.partition {
					t.Errorf("event %d: partition %d, want %d", i, r.Partition, w.partition)
				}
				if string(r.Key) != w.key || (w.key == "" && r.Key != nil) {
					t.Errorf("event %d: key %q, want %q", i, r.Key, w.key)
				}
				hs := map[string]string{}
				for _, rh := range r.Headers {
					hs[rh.Key] = string(rh.Value)
				}
				if fmt.Sprint(hs) != fmt.Sprint(w.headers) {
					t.Errorf("event %d: record headers %v, want %v", i, hs, w.headers)
				}
				if w.ts != 0 && r.Timestamp.UnixMilli() != w.ts {
					t.Errorf("event %d: timestamp %d, want %d", i, r.Timestamp.UnixMilli(), w.ts)
				}
				if tc.flume {
					e, _ := kafkaconf.DecodeFlumeEvent(r.Value)
					if !evs[i].Headers.Equal(e.Headers) {
						t.Errorf("event %d: flume headers %v, want %v", i, e.Headers, evs[i].Headers)
					}
				}
			}
			if n := counter(reg, "EventDrainSuccessCount"); n != int64(len(evs)) {
				t.Errorf("EventDrainSuccessCount = %d, want %d", n, len(evs))
			}
		})
	}
}

func copyEvents(evs []event.Event) []event.Event { return append([]event.Event(nil), evs...) }

// counter reads a counter of the sink's set as Flume shows it.
func counter(reg *metrics.Registry, name string) int64 {
	return testutil.Counter(reg, metrics.KindSink, "k1", name)
}

// Keyed records go where Java's producer puts them (murmur2 of the key).
func TestSinkKeyPartitioningMatchesKafka(t *testing.T) {
	kc := kafkatest.New(t, 1, 8, "keyed")
	pl := sourcetest.NewPipeline(t, 1000, 100, 100*time.Millisecond)
	s, _ := newSink(t, kc, pl, map[string]string{"kafka.topic": "keyed"})
	var evs []event.Event
	for i := range 50 {
		evs = append(evs, event.Event{Headers: event.HeadersOf(map[string]string{"key": "user-" + strconv.Itoa(i)}), Body: []byte(strconv.Itoa(i))})
	}
	if err := pl.Processor.Process(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	drain(t, s, pl)
	hasher := kgo.StickyKeyPartitioner(nil).ForTopic("keyed")
	for _, r := range kafkatest.ReadAll(t, kc.Addrs, "keyed", 50, 5*time.Second) {
		if want := hasher.Partition(&kgo.Record{Key: r.Key}, 8); int32(want) != r.Partition {
			t.Errorf("key %s in partition %d, want %d (Kafka's murmur2)", r.Key, r.Partition, want)
		}
	}
}

func TestSinkConfig(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  string // substring of the problems; "" = valid
	}{
		{"minimal", map[string]string{}, ""},
		{"tuned producer", map[string]string{
			"kafka.producer.acks": "all", "kafka.producer.linger.ms": "10", "kafka.producer.batch.size": "65536",
			"kafka.producer.compression.type": "lz4", "kafka.producer.max.request.size": "2097152",
			"kafka.producer.max.block.ms": "1000", "kafka.producer.buffer.memory": "1048576",
			"kafka.producer.enable.idempotence": "true", "kafka.producer.client.id": "me",
			"kafka.producer.retries": "10", "kafka.producer.delivery.timeout.ms": "30000",
		}, ""},
		{"legacy names", map[string]string{"brokerList": "h:9092", "kafka.bootstrap.servers": "", "topic": "t", "batchSize": "10", "requiredAcks": "all"}, ""},
		{"unsupported producer setting", map[string]string{"kafka.producer.transactional.id": "x"},
			"kafka.producer.transactional.id is not supported by sluice's Kafka client"},
		{"idempotence needs acks all", map[string]string{"kafka.producer.enable.idempotence": "true"}, "idempotent writes need acks = all"},
		{"bad compression", map[string]string{"kafka.producer.compression.type": "brotli"}, "use none, gzip, snappy, lz4 or zstd"},
		{"bad acks", map[string]string{"kafka.producer.acks": "2"}, "use 0, 1, all or -1"},
		{"bad topic", map[string]string{"kafka.topic": "logs/%Y"}, "is not a valid Kafka topic"},
		{"unterminated escape", map[string]string{"kafka.topic": "logs-%{svc"}, "unterminated"},
		{"broker without port", map[string]string{"kafka.bootstrap.servers": "kafka1"}, "has no port"},
		{"jks truststore", map[string]string{"kafka.producer.security.protocol": "SSL", "kafka.producer.ssl.truststore.location": "/x.jks"}, ""},
		{"sasl without user", map[string]string{"kafka.producer.security.protocol": "SASL_PLAINTEXT", "kafka.producer.sasl.mechanism": "PLAIN"}, "SASL needs a user"},
		{"kerberos without a login", map[string]string{"kafka.producer.security.protocol": "SASL_SSL"}, "Kerberos (GSSAPI, Kafka's default SASL mechanism) needs the client's login"},
		{"kerberos", map[string]string{"kafka.producer.security.protocol": "SASL_SSL", "kafka.producer.sasl.kerberos.service.name": "kafka",
			"kafka.producer.sasl.jaas.config": `com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k.keytab" principal="flume@R";`}, ""},
		{"sasl scram", map[string]string{"kafka.producer.security.protocol": "SASL_SSL", "kafka.producer.sasl.mechanism": "SCRAM-SHA-512",
			"kafka.producer.ssl.truststore.type": "PEM", "kafka.producer.ssl.truststore.location": "/ca.pem",
			"kafka.producer.sasl.jaas.config": `org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p\"w";`}, ""},
		{"serializer", map[string]string{"kafka.producer.value.serializer": "com.example.MySerializer"}, "ByteArraySerializer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]string{"kafka.bootstrap.servers": "127.0.0.1:9092"}
			for k, v := range tc.props {
				m[k] = v
			}
			if m["kafka.bootstrap.servers"] == "" {
				delete(m, "kafka.bootstrap.servers")
			}
			p := config.FromMap("a1.sinks.k1.", m)
			_, err := New(flow.Env{Name: "k1", Type: "kafka", Logger: quiet}, p)
			if err != nil {
				t.Fatal(err)
			}
			p.Unused()
			perr := p.Err()
			switch {
			case tc.want == "" && perr != nil:
				t.Fatalf("unexpected problems: %v", perr)
			case tc.want != "" && (perr == nil || !strings.Contains(perr.Error(), tc.want)):
				t.Fatalf("problems %v, want one containing %q", perr, tc.want)
			}
		})
	}
}

func TestSCRAMAuthenticates(t *testing.T) {
	// kfake with SASL: the sink must log in with SCRAM-SHA-256 and deliver.
	kc := kafkatest.NewSASL(t, "SCRAM-SHA-256", "admin", "s3cret", "sec")
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s, _ := newSink(t, kc, pl, map[string]string{
		"kafka.topic":                      "sec",
		"kafka.producer.security.protocol": "SASL_PLAINTEXT",
		"kafka.producer.sasl.mechanism":    "SCRAM-SHA-256",
		"kafka.producer.sasl.jaas.config":  `org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="s3cret";`,
	})
	if err := pl.Processor.Process(context.Background(), []event.Event{{Body: []byte("secret")}}); err != nil {
		t.Fatal(err)
	}
	drain(t, s, pl)
	recs := kafkatest.ReadAllSASL(t, kc, "SCRAM-SHA-256", "admin", "s3cret", "sec", 1, 5*time.Second)
	if len(recs) != 1 || string(recs[0].Value) != "secret" {
		t.Fatalf("got %d records", len(recs))
	}
}

// flowTest runs events through a memory channel into the sink while a
// test changes the cluster, and checks that every event arrives.
type flowTest struct {
	t        *testing.T
	kc       *kafkatest.Cluster
	pl       *sourcetest.Pipeline
	sink     flow.Sink
	reg      *metrics.Registry
	sent     atomic.Int64
	pushback atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startFlow(t *testing.T, kc *kafkatest.Cluster, capacity int, rate int, props map[string]string) *flowTest {
	f := &flowTest{t: t, kc: kc, stop: make(chan struct{})}
	f.pl = sourcetest.NewPipeline(t, capacity, 100, 50*time.Millisecond)
	f.sink, f.reg = newSink(t, kc, f.pl, props)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The sink runner.
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		for ctx.Err() == nil {
			if _, err := f.sink.Process(ctx); err != nil && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	// A source at rate events/s in batches of 10, retrying a batch the full channel refused.
	go func() {
		defer f.wg.Done()
		tick := time.NewTicker(time.Second * 10 / time.Duration(rate))
		defer tick.Stop()
		seq := 0
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			evs := make([]event.Event, 10)
			for i := range evs {
				evs[i] = event.Event{Body: []byte(strconv.Itoa(seq + i)), ReceivedAt: event.Now()}
			}
			for {
				err := f.pl.Processor.Process(ctx, copyEvents(evs))
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return
				}
				if !errors.Is(err, flow.ErrChannelFull) {
					t.Errorf("put: %v", err)
					return
				}
				f.pushback.Add(1)
				select {
				case <-f.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			seq += len(evs)
			f.sent.Store(int64(seq))
		}
	}()
	t.Cleanup(func() { cancel(); f.wg.Wait() })
	return f
}

// finish stops the source, waits for the channel to drain and checks
// that every event arrived in topic.
func (f *flowTest) finish(topic string) (dups int) {
	t := f.t
	close(f.stop)
	if !testutil.Eventually(func() bool { return f.pl.Channel.Len() == 0 }, 30*time.Second) {
		t.Fatalf("channel still holds %d events", f.pl.Channel.Len())
	}
	n := int(f.sent.Load())
	recs := kafkatest.ReadAll(t, f.kc.Addrs, topic, n, 20*time.Second)
	seen := map[int]int{}
	for _, r := range recs {
		i, _ := strconv.Atoi(string(r.Value))
		seen[i]++
	}
	var missing []int
	for i := 0; i < n; i++ {
		switch seen[i] {
		case 0:
			missing = append(missing, i)
		case 1:
		default:
			dups += seen[i] - 1
		}
	}
	if len(missing) > 0 {
		sort.Ints(missing)
		t.Fatalf("%d of %d events lost, first %v", len(missing), n, missing[:min(10, len(missing))])
	}
	t.Logf("%d events delivered, %d duplicates", n, dups)
	return dups
}

func TestSinkBrokerOutage(t *testing.T) {
	outage := 3 * time.Second
	if os.Getenv("SLUICE_LONG") != "" {
		outage = 30 * time.Second
	}
	kc := kafkatest.New(t, 1, 2, "out")
	// acks=all with idempotence: retries after the outage cannot duplicate.
	f := startFlow(t, kc, 500, 1000, map[string]string{"kafka.topic": "out", "kafka.producer.acks": "all"})
	waitSent(t, f, 500)
	kc.Down()
	downAt := time.Now()
	// The channel fills (500 events at 1000/s) and the source is pushed back.
	if !testutil.Eventually(func() bool { return f.pushback.Load() > 0 }, outage+5*time.Second) {
		t.Fatalf("the source was never pushed back while Kafka was down (channel holds %d)", f.pl.Channel.Len())
	}
	time.Sleep(time.Until(downAt.Add(outage)))
	before := counter(f.reg, "EventDrainSuccessCount")
	kc.Up(t)
	upAt := time.Now()
	if !testutil.Eventually(func() bool { return counter(f.reg, "EventDrainSuccessCount") > before }, 10*time.Second) {
		t.Fatal("delivery did not resume after the broker came back")
	}
	resumed := time.Since(upAt)
	t.Logf("outage %v: pushed back %d times; delivery resumed %v after the broker returned", outage, f.pushback.Load(), resumed)
	if resumed > time.Second {
		t.Errorf("delivery resumed %v after the broker returned, want within 1s", resumed)
	}
	waitSent(t, f, f.sent.Load()+300)
	if dups := f.finish("out"); dups > 0 {
		t.Errorf("%d duplicates with idempotent writes", dups)
	}
}

func TestSinkLeaderChange(t *testing.T) {
	kc := kafkatest.New(t, 3, 3, "moving")
	f := startFlow(t, kc, 2000, 2000, map[string]string{"kafka.topic": "moving", "kafka.producer.acks": "all"})
	waitSent(t, f, 300)
	for p := int32(0); p < 3; p++ {
		leader := kc.LeaderFor("moving", p)
		if err := kc.MoveTopicPartition("moving", p, (leader+1)%3); err != nil {
			t.Fatal(err)
		}
		waitSent(t, f, f.sent.Load()+200)
	}
	f.finish("moving")
}

func waitSent(t *testing.T, f *flowTest, n int64) {
	t.Helper()
	if !testutil.Eventually(func() bool { return f.sent.Load() >= n }, 30*time.Second) {
		t.Fatalf("only %d events sent, waiting for %d", f.sent.Load(), n)
	}
}

// TLS: the sink trusts the broker through a PEM truststore, and checks the
// host name unless ssl.endpoint.identification.algorithm is empty.
func TestSinkTLS(t *testing.T) {
	cert := testutil.SelfSigned(t, "127.0.0.1")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, cert.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := kafkatest.NewTLS(t, &tls.Config{Certificates: []tls.Certificate{cert.TLS()}}, "secure")
	for _, hostCheck := range []string{"https", ""} {
		t.Run("algorithm="+hostCheck, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
			s, reg := newSink(t, kc, pl, map[string]string{
				"kafka.topic":                                          "secure",
				"kafka.producer.security.protocol":                     "SSL",
				"kafka.producer.ssl.truststore.location":               ca,
				"kafka.producer.ssl.truststore.type":                   "PEM",
				"kafka.producer.ssl.endpoint.identification.algorithm": hostCheck,
			})
			if err := pl.Processor.Process(context.Background(), []event.Event{{Body: []byte("tls")}}); err != nil {
				t.Fatal(err)
			}
			drain(t, s, pl)
			if n := counter(reg, "EventDrainSuccessCount"); n != 1 {
				t.Fatalf("EventDrainSuccessCount = %d", n)
			}
		})
	}
}
