package crashtest

import (
	"fmt"
	"net"
	"path/filepath"
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
// back; "unable to open connection" is logged a few times, not twice a
// second per client.
func TestKafkaRecoversWithoutRestart(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 1, "in", "chan", "out")
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	const grace = 3 * time.Second
	conf := filepath.Join(t.TempDir(), "a.properties")
	writeFile(t, conf, fmt.Sprintf(`a1.sources = r1
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
	waitUntil(t, 10*time.Second, "/healthz 200", func() bool { code, _ := healthz(t, httpAddr); return code == 200 })

	kc.RestartEmpty(t)
	wiped := time.Now()
	arrive(produce("b", 10), 30*time.Second)
	t.Logf("events flowed again %v after the cluster restarted empty", time.Since(wiped).Round(time.Millisecond))
	waitUntil(t, 10*time.Second, "/healthz 200 after the restart", func() bool { code, _ := healthz(t, httpAddr); return code == 200 })

	kc.Down()
	down := time.Now()
	if code, body := healthz(t, httpAddr); code != 200 && time.Since(down) < grace {
		t.Errorf("/healthz %d %q within the grace period of an outage", code, body)
	}
	waitUntil(t, grace+15*time.Second, "/healthz 503 with the brokers down", func() bool { code, _ := healthz(t, httpAddr); return code == 503 })
	code, body := healthz(t, httpAddr)
	t.Logf("/healthz %v into the outage: %d\n%s", time.Since(down).Round(time.Millisecond), code, body)
	if since := time.Since(down); since < grace {
		t.Errorf("/healthz turned 503 %v into the outage, before the %v grace period", since, grace)
	}
	for _, c := range []string{"source r1", "channel c1", "sink k1"} {
		waitUntil(t, 10*time.Second, "/healthz names "+c, func() bool { _, body := healthz(t, httpAddr); return strings.Contains(body, c) })
	}
	refused := strings.Count(p.log.String(), "unable to open connection")
	kc.Up(t)
	up := time.Now()
	waitUntil(t, 15*time.Second, "/healthz 200 after the outage", func() bool { code, _ := healthz(t, httpAddr); return code == 200 })
	t.Logf("/healthz 200 %v after the brokers came back", time.Since(up).Round(time.Millisecond))
	arrive(produce("c", 10), 20*time.Second)

	// Three components, each with its own throttle: a line each at the
	// start of the outage, and one summary per 10 s after.
	outage := up.Sub(down)
	t.Logf("%d lines on refused connections in a %v outage", refused, outage.Round(time.Millisecond))
	if max := 3 * (1 + int(outage/(10*time.Second))); refused > max {
		t.Errorf("%d lines on refused connections in a %v outage, want at most %d (throttled)", refused, outage, max)
	}
	p.signal(syscall.SIGTERM)
	if code := p.exit(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
}
