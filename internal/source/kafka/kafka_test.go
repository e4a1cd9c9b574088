package kafkasource

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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

var quiet = slog.New(slog.DiscardHandler)

func newSource(t *testing.T, kc *kafkatest.Cluster, reg *metrics.Registry, name string, props map[string]string) *Source {
	t.Helper()
	return newSourceLog(t, kc, reg, name, props, quiet)
}

// newSourceLog is newSource logging to log.
func newSourceLog(t *testing.T, kc *kafkatest.Cluster, reg *metrics.Registry, name string, props map[string]string, log *slog.Logger) *Source {
	t.Helper()
	m := map[string]string{
		"kafka.bootstrap.servers":              kc.Brokers(),
		"kafka.consumer.auto.offset.reset":     "earliest",
		"kafka.consumer.heartbeat.interval.ms": "100",
		"batchDurationMillis":                  "100",
	}
	for k, v := range props {
		m[k] = v
	}
	p := config.FromMap("a1.sources."+name+".", m)
	s, err := New(flow.Env{Agent: "a1", Name: name, Type: "kafka", Logger: log, Metrics: reg}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	return s.(*Source)
}

func start(t *testing.T, s *Source, pl *sourcetest.Pipeline) {
	t.Helper()
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
}

func records(topic string, from, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(from + i))}
	}
	return out
}

func TestSourceDeliversEveryRecord(t *testing.T) {
	kc := kafkatest.New(t, 1, 3, "in")
	recs := records("in", 0, 500)
	recs[0].Key = []byte("k0")
	recs[1].Headers = []kgo.RecordHeader{{Key: "ignored", Value: []byte("x")}}
	kafkatest.Produce(t, kc.Addrs, recs...)
	pl := sourcetest.NewPipeline(t, 1000, 1000, 100*time.Millisecond)
	reg := metrics.NewRegistry("a1")
	s := newSource(t, kc, reg, "r1", map[string]string{"kafka.topics": "in", "batchSize": "64"})
	start(t, s, pl)
	got := pl.Drain(t, 500, 10*time.Second)
	if len(got) != 500 {
		t.Fatalf("got %d events, want 500", len(got))
	}
	seen := map[string]bool{}
	for _, e := range got {
		seen[string(e.Body)] = true
		for _, h := range []string{"timestamp", "topic", "partition", "offset"} {
			if e.Header(h) == "" {
				t.Fatalf("event %s lacks header %s: %v", e.Body, h, e.Headers)
			}
		}
		if e.Header("topic") != "in" {
			t.Fatalf("topic header %q", e.Header("topic"))
		}
		if string(e.Body) == "0" && e.Header("key") != "k0" {
			t.Fatalf("key header %q, want k0", e.Header("key"))
		}
	}
	if len(seen) != 500 {
		t.Fatalf("%d distinct events, want 500", len(seen))
	}
	// Offsets are committed after the channel commit: a new member of the
	// group finds nothing left.
	if !testutil.Eventually(func() bool { return testutil.Counter(reg, metrics.KindSource, "r1", "EventAcceptedCount") == 500 }, 5*time.Second) {
		t.Fatalf("EventAcceptedCount = %d", testutil.Counter(reg, metrics.KindSource, "r1", "EventAcceptedCount"))
	}
	s.Stop(context.Background())
	pl2 := sourcetest.NewPipeline(t, 1000, 1000, 100*time.Millisecond)
	s2 := newSource(t, kc, metrics.NewRegistry("a1"), "r1", map[string]string{"kafka.topics": "in"})
	start(t, s2, pl2)
	kafkatest.Produce(t, kc.Addrs, records("in", 500, 1)...)
	if got := pl2.Drain(t, 2, 2*time.Second); len(got) != 1 || string(got[0].Body) != "500" {
		t.Fatalf("after a restart the group got %q, want only the new record", sourcetest.Bodies(got))
	}
	if testutil.Counter(reg, metrics.KindSource, "r1", "KafkaEmptyCount") < 0 || testutil.Counter(reg, metrics.KindSource, "r1", "KafkaEventGetTimer") < 0 {
		t.Fatal("Kafka counters missing")
	}
}

func TestSourceFlumeEventFormatAndRegex(t *testing.T) {
	kc := kafkatest.New(t, 1, 1, "app-a", "app-b", "other")
	ev := event.Event{Headers: event.HeadersOf(map[string]string{"h": "v", "topic": "mine"}), Body: []byte("avro")}
	kafkatest.Produce(t, kc.Addrs,
		&kgo.Record{Topic: "app-a", Value: kafkaconf.AppendFlumeEvent(nil, &ev)},
		&kgo.Record{Topic: "app-b", Value: []byte("not avro at all \xff\xff")},
		&kgo.Record{Topic: "other", Value: kafkaconf.AppendFlumeEvent(nil, &ev)},
	)
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	s := newSource(t, kc, metrics.NewRegistry("a1"), "r1", map[string]string{
		"kafka.topics.regex": "^app-.*", "useFlumeEventFormat": "true", "topicHeader": "src",
	})
	start(t, s, pl)
	got := pl.Drain(t, 2, 10*time.Second)
	if len(got) != 2 {
		t.Fatalf("got %d events, want 2", len(got))
	}
	for _, e := range got {
		switch e.Header("src") {
		case "app-a":
			if string(e.Body) != "avro" || e.Header("h") != "v" || e.Header("topic") != "mine" {
				t.Fatalf("flume event decoded as %q %v", e.Body, e.Headers)
			}
		case "app-b":
			if !strings.HasPrefix(string(e.Body), "not avro") {
				t.Fatalf("undecodable record delivered as %q", e.Body)
			}
		default:
			t.Fatalf("event from topic %q", e.Header("src"))
		}
	}
	if pl2 := pl.Drain(t, 1, 300*time.Millisecond); len(pl2) != 0 {
		t.Fatalf("the regex matched topic %q", pl2[0].Header("src"))
	}
}

// A rebalance (a second member joins, then the first leaves) loses nothing
// and duplicates at most the batches in hand.
func TestSourceRebalanceLosesNothing(t *testing.T) {
	const n = 3000
	kc := kafkatest.New(t, 1, 4, "shared")
	kafkatest.Produce(t, kc.Addrs, records("shared", 0, n)...)
	pl := sourcetest.NewPipeline(t, 100000, 1000, 100*time.Millisecond)
	props := map[string]string{"kafka.topics": "shared", "batchSize": "50"}
	a := newSource(t, kc, metrics.NewRegistry("a1"), "ra", props)
	b := newSource(t, kc, metrics.NewRegistry("a2"), "rb", props)
	// A slow channel: the sources hand over one small batch at a time.
	slow := &slowProc{p: pl.Processor, delay: 2 * time.Millisecond}
	if err := a.Start(context.Background(), slow); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	take := func(want int, d time.Duration) {
		for _, e := range pl.Drain(t, want, d) {
			seen[string(e.Body)]++
		}
	}
	take(500, 10*time.Second)
	if err := b.Start(context.Background(), slow); err != nil {
		t.Fatal(err)
	}
	take(1000, 10*time.Second)
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(context.Background()) })
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		take(n, 500*time.Millisecond)
	}
	dups := 0
	for i := range n {
		c := seen[strconv.Itoa(i)]
		if c == 0 {
			t.Fatalf("record %d lost (%d of %d seen)", i, len(seen), n)
		}
		dups += c - 1
	}
	t.Logf("%d records, %d duplicates", n, dups)
	if dups > 2*50 {
		t.Fatalf("%d duplicates, more than the batches in hand", dups)
	}
}

type slowProc struct {
	p     flow.Processor
	delay time.Duration
}

func (s *slowProc) Process(ctx context.Context, evs []event.Event) error {
	time.Sleep(s.delay)
	return s.p.Process(ctx, evs)
}

func TestSourceLagAndPushback(t *testing.T) {
	kc := kafkatest.New(t, 1, 1, "lagging")
	kafkatest.Produce(t, kc.Addrs, records("lagging", 0, 300)...)
	pl := sourcetest.NewPipeline(t, 100, 100, 20*time.Millisecond)
	reg := metrics.NewRegistry("a1")
	s := newSource(t, kc, reg, "r1", map[string]string{"kafka.topics": "lagging", "batchSize": "40"})
	start(t, s, pl)
	// The channel holds 100: the source is refused and the rest waits in Kafka.
	if !testutil.Eventually(func() bool {
		return lag(t, reg) >= 100 && testutil.Counter(reg, metrics.KindSource, "r1", "ChannelWriteFail") > 0
	}, 5*time.Second) {
		t.Fatalf("lag %v, ChannelWriteFail %d; want lag >= 100 while the channel is full", lag(t, reg), testutil.Counter(reg, metrics.KindSource, "r1", "ChannelWriteFail"))
	}
	got := pl.Drain(t, 300, 10*time.Second)
	if len(got) != 300 {
		t.Fatalf("got %d events after the channel drained, want 300", len(got))
	}
	if !testutil.Eventually(func() bool { return lag(t, reg) == 0 }, 5*time.Second) {
		t.Fatalf("lag %v after everything was consumed", lag(t, reg))
	}
}

func lag(t *testing.T, reg *metrics.Registry) float64 {
	mfs, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != "sluice_kafka_consumer_lag" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue()
			found = true
		}
	}
	if !found {
		return -1
	}
	return sum
}

func TestSourceConfig(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  string
	}{
		{"topics", map[string]string{"kafka.topics": "a,b"}, ""},
		{"legacy topic", map[string]string{"topic": "a", "groupId": "g"}, ""},
		{"no topic", map[string]string{}, "no topic to consume"},
		{"both", map[string]string{"kafka.topics": "a", "kafka.topics.regex": "b.*"}, "not both"},
		{"bad regex", map[string]string{"kafka.topics.regex": "a(("}, "not a valid regular expression"},
		{"auto commit", map[string]string{"kafka.topics": "a", "kafka.consumer.enable.auto.commit": "true"}, "sluice commits offsets itself"},
		{"unsupported", map[string]string{"kafka.topics": "a", "kafka.consumer.exclude.internal.topics": "true"}, "is not supported by sluice's Kafka client"},
		{"tuned", map[string]string{"kafka.topics": "a", "kafka.consumer.group.id": "g", "kafka.consumer.max.poll.records": "10",
			"kafka.consumer.partition.assignment.strategy": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
			"kafka.consumer.isolation.level":               "read_committed", "kafka.consumer.fetch.max.wait.ms": "10"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]string{"kafka.bootstrap.servers": "127.0.0.1:9092"}
			for k, v := range tc.props {
				m[k] = v
			}
			p := config.FromMap("a1.sources.r1.", m)
			if _, err := New(flow.Env{Name: "r1", Type: "kafka", Logger: quiet}, p); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			perr := p.Err()
			if (tc.want == "") != (perr == nil) || (perr != nil && !strings.Contains(perr.Error(), tc.want)) {
				t.Fatalf("problems %v, want %q", perr, tc.want)
			}
		})
	}
	_ = fmt.Sprint
}
