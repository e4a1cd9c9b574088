package crash

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestKafkaRecoversWithoutRestart runs the real agent with a Kafka source,
// a Kafka channel and a Kafka sink (source topic "in", channel topic
// "chan", sink topic "out") on an in-process cluster that does not create
// topics by itself. The cluster restarts empty under the agent (every topic
// back, empty, under a new topic ID; the consumer groups gone): records
// written to the new "in" reach the new "out", with no restart and no
// reload. Then the brokers go away: /healthz turns 503 after the grace
// period, naming all three components, and 200 again once the brokers are
// back; each component tells the outage as one failure streak that ends
// with its recovery, with no ERROR and none of the Kafka client's own lines
// (SLUICE_LONG=1 makes the outage 30 s).
func TestKafkaRecoversWithoutRestart(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 1, "in", "chan", "out")
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	const grace = 3 * time.Second
	conf := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, conf, fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = org.apache.flume.source.kafka.KafkaSource
a1.sources.r1.kafka.bootstrap.servers = %[1]s
a1.sources.r1.kafka.topics = in
a1.sources.r1.kafka.consumer.auto.offset.reset = earliest
a1.sources.r1.kafka.consumer.heartbeat.interval.ms = 200
a1.sources.r1.batchDurationMillis = 100
a1.sources.r1.healthGraceMillis = %[2]d
a1.sources.r1.channels = c1
a1.channels.c1.type = org.apache.flume.channel.kafka.KafkaChannel
a1.channels.c1.kafka.bootstrap.servers = %[1]s
a1.channels.c1.kafka.topic = chan
a1.channels.c1.kafka.consumer.heartbeat.interval.ms = 200
a1.channels.c1.pollTimeout = 100
a1.channels.c1.healthGraceMillis = %[2]d
a1.sinks.k1.type = org.apache.flume.sink.kafka.KafkaSink
a1.sinks.k1.channel = c1
a1.sinks.k1.kafka.bootstrap.servers = %[1]s
a1.sinks.k1.kafka.topic = out
a1.sinks.k1.allowTopicOverride = false
a1.sinks.k1.healthGraceMillis = %[2]d
`, kc.Brokers(), grace.Milliseconds()))
	p := startAgent(t, conf, "--http", httpAddr)

	produce := func(prefix string, n int) []string {
		recs := make([]*kgo.Record, n)
		want := make([]string, n)
		for i := range recs {
			want[i] = prefix + strconv.Itoa(i)
			recs[i] = &kgo.Record{Topic: "in", Value: []byte(want[i])}
		}
		kafkatest.Produce(t, kc.Addrs, recs...)
		return want
	}
	arrive := func(want []string, within time.Duration) {
		t.Helper()
		got := map[string]bool{}
		kafkatest.ReadUntil(t, kc.Addrs, []string{"out"}, within, func(recs []*kgo.Record) bool {
			for _, r := range recs {
				got[string(r.Value)] = true
			}
			for _, w := range want {
				if !got[w] {
					return false
				}
			}
			return true
		})
		for _, w := range want {
			if !got[w] {
				t.Fatalf("event %s did not reach topic out within %v", w, within)
			}
		}
	}

	arrive(produce("a", 10), 20*time.Second)
	testutil.WaitFor(t, 10*time.Second, "/healthz 200", func() bool { code, _ := healthz(t, httpAddr); return code == 200 })

	kc.RestartEmpty(t)
	wiped := time.Now()
	arrive(produce("b", 10), 30*time.Second)
	t.Logf("events flowed again %v after the cluster restarted empty", time.Since(wiped).Round(time.Millisecond))
	testutil.WaitFor(t, 10*time.Second, "/healthz 200 after the restart", func() bool { code, _ := healthz(t, httpAddr); return code == 200 })
	// What the agent does about the new topic IDs is said in its own
	// words; kgo's "we do not adopt the new ID, the topic fails with
	// UNKNOWN_TOPIC_ID until it is purged" reads as permanent.
	for _, rec := range p.Log.Records("") {
		if msg, _ := rec["msg"].(string); rec["level"] != "DEBUG" && strings.HasPrefix(msg, "kafka client:") {
			t.Errorf("kgo's own line at %v: %v", rec["level"], rec)
		}
	}

	before := len(p.Log.Records(""))
	kc.Down()
	down := time.Now()
	if code, body := healthz(t, httpAddr); code != 200 && time.Since(down) < grace {
		t.Errorf("/healthz %d %q within the grace period of an outage", code, body)
	}
	testutil.WaitFor(t, grace+15*time.Second, "/healthz 503 with the brokers down", func() bool { code, _ := healthz(t, httpAddr); return code == 503 })
	code, body := healthz(t, httpAddr)
	t.Logf("/healthz %v into the outage: %d\n%s", time.Since(down).Round(time.Millisecond), code, body)
	if since := time.Since(down); since < grace {
		t.Errorf("/healthz turned 503 %v into the outage, before the %v grace period", since, grace)
	}
	for _, c := range []string{"source r1", "channel c1", "sink k1"} {
		testutil.WaitFor(t, 10*time.Second, "/healthz names "+c, func() bool { _, body := healthz(t, httpAddr); return strings.Contains(body, c) })
	}
	time.Sleep(time.Until(down.Add(kafkatest.Outage())))
	kc.Up(t)
	up := time.Now()
	testutil.WaitFor(t, 15*time.Second, "/healthz 200 after the outage", func() bool { code, _ := healthz(t, httpAddr); return code == 200 })
	t.Logf("/healthz 200 %v after the brokers came back", time.Since(up).Round(time.Millisecond))
	arrive(produce("c", 10), 20*time.Second)

	// The outage in the log: each component tells it once (its first
	// failure, at most a summary per 30 s and one at its end, then its
	// recovery), no ERROR, none of the Kafka client's own lines.
	streaks := map[string][2]string{
		"r1": {"kafka source: cannot consume from Kafka; retrying (the records wait in Kafka)", "kafka source: consuming again"},
		"c1": {"kafka channel: Kafka fails; retrying (puts are refused or wait meanwhile, takes find nothing new)", "kafka channel: Kafka works again"},
		"k1": {"kafka sink: cannot deliver to Kafka; the events stay in the channel and are sent again", "kafka sink: delivering again"},
	}
	for _, st := range streaks {
		p.WaitLog(st[1], 20*time.Second)
	}
	outage := up.Sub(down)
	maxSummaries := 1 + int(outage/(30*time.Second))
	recs := p.Log.Records("")[before:]
	warn, errs := 0, 0
	for comp, st := range streaks {
		var seq []string
		for _, rec := range recs {
			if rec["component"] != comp || rec["level"] == "DEBUG" {
				continue
			}
			switch msg := rec["msg"].(string); {
			case msg == st[0] && len(seq) == 0:
				seq = append(seq, "first")
			case msg == st[0]+" (repeated)" && len(seq) > 0 && seq[len(seq)-1] != "recovered":
				seq = append(seq, "summary")
			case msg == st[1] && len(seq) > 0 && seq[len(seq)-1] != "recovered":
				seq = append(seq, "recovered")
			default:
				seq = append(seq, fmt.Sprintf("unexpected %v %q", rec["level"], msg))
			}
		}
		t.Logf("%s over a %v outage: %v", comp, outage.Round(time.Millisecond), seq)
		if len(seq) < 2 || seq[0] != "first" || seq[len(seq)-1] != "recovered" || len(seq)-2 > maxSummaries ||
			slices.ContainsFunc(seq[1:len(seq)-1], func(s string) bool { return s != "summary" }) {
			t.Errorf("%s: lines %v, want first, at most %d summaries, recovered", comp, seq, maxSummaries)
		}
	}
	for _, rec := range recs {
		switch rec["level"] {
		case "ERROR":
			errs++
		case "WARN":
			warn++
		}
	}
	t.Logf("%d ERROR and %d WARN lines in a %v outage", errs, warn, outage.Round(time.Millisecond))
	if errs > 0 || warn > 3*(1+maxSummaries) {
		t.Errorf("%d ERROR and %d WARN lines in a %v outage, want none and at most %d", errs, warn, outage, 3*(1+maxSummaries))
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
}
