package kafkasource

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// drainSet takes events from pl until it holds every body in want, or
// timeout passes, and returns the bodies seen.
func drainSet(t *testing.T, pl *sourcetest.Pipeline, want []string, timeout time.Duration) map[string]int {
	t.Helper()
	seen := map[string]int{}
	missing := func() int {
		n := 0
		for _, w := range want {
			if seen[w] == 0 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(timeout)
	for missing() > 0 && time.Now().Before(deadline) {
		for _, e := range pl.Take(t, 1000, 200*time.Millisecond) {
			seen[string(e.Body)]++
		}
	}
	return seen
}

// The topic is deleted under a running source, left missing (the cluster
// does not create topics by itself), and created again; records are
// written to the new topic at once, before the source can have noticed.
// While the topic is missing the source must not spin (it used 60-80 % of
// a core, polling errors in a loop), logs a few lines and, after the grace
// period, reports the missing topic through Health. Once the topic is back
// (a new topic ID) the source reads every record of the new topic, although
// auto.offset.reset is Kafka's latest, and Health is nil again.
// With a regex (kafka.topics.regex) the missing topic is no error (the
// regex matches nothing for a while), and the source finds the new topic at
// its next metadata refresh (metadata.max.age.ms, shortened here), as it
// finds any new topic that matches.
func TestSourceTopicRecreated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		props map[string]string
		// missingIsUnhealthy: the topic is named, so its absence is a failure.
		missingIsUnhealthy bool
	}{
		{"topics", map[string]string{"kafka.topics": "src"}, true},
		{"regex", map[string]string{"kafka.topics.regex": "^sr[c]$", "kafka.consumer.metadata.max.age.ms": "1000"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { testSourceTopicRecreated(t, tc.props, tc.missingIsUnhealthy) })
	}
}

func testSourceTopicRecreated(t *testing.T, props map[string]string, missingIsUnhealthy bool) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 2, "src")
	logs := &kafkatest.Logs{}
	pl := sourcetest.NewPipeline(t, 100000, 1000, 100*time.Millisecond)
	props["kafka.consumer.auto.offset.reset"] = "latest"
	props["healthGraceMillis"] = "1000"
	s := newSourceLog(t, kc, metrics.NewRegistry("a1"), "r1", props, logs.Logger())
	start(t, s, pl)
	health := testutil.HealthOf(s)

	// With latest, only records written after the group joined count.
	joined := false
	for i := 0; i < 100 && !joined; i++ {
		kafkatest.Produce(t, kc.Addrs, records("src", 1000000+i, 1)...)
		joined = len(pl.Take(t, 100, 200*time.Millisecond)) > 0
	}
	if !joined {
		t.Fatal("the source never read the topic")
	}
	kafkatest.Produce(t, kc.Addrs, records("src", 0, 100)...)
	if seen := drainSet(t, pl, bodies(0, 100), 10*time.Second); len(seen) < 100 {
		t.Fatalf("read %d of 100 records before the topic was deleted", len(seen))
	}

	kc.Delete(t, "src")
	time.Sleep(300 * time.Millisecond)
	cpu0, t0 := testutil.CPUTime(), time.Now()
	time.Sleep(kafkatest.Outage())
	cpu, window := testutil.CPUTime()-cpu0, time.Since(t0)
	t.Logf("topic missing: CPU %v over %v (%.1f%%)", cpu, window.Round(time.Millisecond), 100*cpu.Seconds()/window.Seconds())
	if cpu > window/10 {
		t.Errorf("the process used %v of CPU in %v while the topic was missing: the source spins", cpu, window)
	}
	switch err := health(); {
	case !missingIsUnhealthy:
		if err != nil {
			t.Errorf("Health() = %v while no topic matches the regex", err)
		}
	case err == nil || !strings.Contains(err.Error(), "topic src"):
		t.Errorf("Health() = %v while the topic is missing, want the reason", err)
	default:
		t.Logf("health while missing: %v", err)
	}

	if n := len(logs.Lines()); n > kafkatest.MaxOutageLogLines() {
		t.Errorf("%d log lines while the topic was missing, want at most %d:\n%s", n, kafkatest.MaxOutageLogLines(), strings.Join(logs.Lines()[:min(n, 20)], "\n"))
	}
	kc.Create(t, "src", 2)
	back := time.Now()
	kafkatest.Produce(t, kc.Addrs, records("src", 100, 200)...)
	seen := drainSet(t, pl, bodies(100, 200), 20*time.Second)
	for _, b := range bodies(100, 200) {
		if seen[b] == 0 {
			t.Fatalf("record %s of the re-created topic was not read (%d of 200 were)", b, len(seen))
		}
	}
	t.Logf("the re-created topic's 200 records were read within %v of its creation", time.Since(back).Round(time.Millisecond))
	if took := time.Since(back); took > 10*time.Second {
		t.Errorf("reading resumed %v after the topic was re-created, want within seconds", took)
	}
	if !testutil.Eventually(func() bool { return health() == nil }, 5*time.Second) {
		t.Errorf("Health() = %v after reading resumed", health())
	}
	lines := logs.Lines()
	t.Logf("%d log lines:\n%s", len(lines), strings.Join(lines, "\n"))
	if len(lines) > kafkatest.MaxOutageLogLines() {
		t.Errorf("%d log lines for one topic re-creation, want at most %d", len(lines), kafkatest.MaxOutageLogLines())
	}
}

func bodies(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(from + i)
	}
	return out
}

// The brokers go away under a running source: after the grace period
// Health says no broker answers, the outage is logged as one streak,
// and when the brokers are back the source reads on and Health is nil.
func TestSourceBrokerOutageHealth(t *testing.T) {
	kc := kafkatest.New(t, 1, 1, "down")
	logs := &kafkatest.Logs{}
	pl := sourcetest.NewPipeline(t, 100000, 1000, 100*time.Millisecond)
	s := newSourceLog(t, kc, metrics.NewRegistry("a1"), "r1", map[string]string{
		"kafka.topics": "down", "healthGraceMillis": "1000",
	}, logs.Logger())
	start(t, s, pl)
	health := testutil.HealthOf(s)
	kafkatest.Produce(t, kc.Addrs, records("down", 0, 10)...)
	if seen := drainSet(t, pl, bodies(0, 10), 10*time.Second); len(seen) < 10 {
		t.Fatalf("read %d of 10 records before the outage", len(seen))
	}
	if err := health(); err != nil {
		t.Errorf("Health() = %v with the brokers up", err)
	}
	kc.Down()
	down := time.Now()
	time.Sleep(500 * time.Millisecond)
	if err := health(); err != nil {
		t.Errorf("Health() = %v %v into the outage, before the 1s grace period", err, time.Since(down))
	}
	if !testutil.Eventually(func() bool { return health() != nil }, 5*time.Second) {
		t.Error("Health() stayed nil with the brokers down past the grace period")
	}
	t.Logf("unhealthy %v into the outage: %v", time.Since(down).Round(time.Millisecond), health())
	cpu0, t0 := testutil.CPUTime(), time.Now()
	time.Sleep(time.Until(down.Add(kafkatest.Outage())))
	cpu, window := testutil.CPUTime()-cpu0, time.Since(t0)
	t.Logf("brokers down: CPU %v over %v", cpu, window.Round(time.Millisecond))
	if cpu > window/10 {
		t.Errorf("the process used %v of CPU in %v while the brokers were down", cpu, window)
	}
	kc.Up(t)
	up := time.Now()
	if !testutil.Eventually(func() bool { return health() == nil }, 10*time.Second) {
		t.Errorf("Health() = %v 10s after the brokers came back", health())
	}
	t.Logf("healthy %v after the brokers came back", time.Since(up).Round(time.Millisecond))
	kafkatest.Produce(t, kc.Addrs, records("down", 10, 10)...)
	if seen := drainSet(t, pl, bodies(10, 10), 10*time.Second); len(seen) < 10 {
		t.Fatalf("read %d of 10 records after the outage", len(seen))
	}
	kafkatest.CheckOutageLog(t, logs,
		"kafka source: cannot consume from Kafka; retrying (the records wait in Kafka)",
		"kafka source: consuming again")
}
