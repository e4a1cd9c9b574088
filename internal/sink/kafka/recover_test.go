package kafkasink

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// put puts events named prefix0..prefixN-1 into the sink's channel.
func put(t *testing.T, pl *sourcetest.Pipeline, prefix string, n int) {
	t.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{Body: []byte(prefix + strconv.Itoa(i)), ReceivedAt: event.Now()}
	}
	if err := pl.Processor.Process(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

// runSink drives the sink with the agent's SinkRunner (its backoff after
// failures included) until the test ends.
func runSink(t *testing.T, s flow.Sink, log *slog.Logger) {
	r := flow.NewSinkRunner("k1", s, log)
	r.Start()
	t.Cleanup(func() { r.Stop(context.Background()) })
}

// The topic is deleted under a running sink and created again later, on a
// cluster that does not create topics by itself: while it is missing the
// sink fails, holds the events in the channel, uses no CPU to speak of,
// logs a few lines and, after the grace period, reports it through Health;
// once the topic is back (with a new topic ID) every held event goes to it
// within seconds and Health is nil again. Before the sink purged the stale
// topic from its client it failed with UNKNOWN_TOPIC_ID for good.
func TestSinkTopicRecreated(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 2, "re")
	logs := &kafkatest.Logs{}
	pl := sourcetest.NewPipeline(t, 10000, 1000, 100*time.Millisecond)
	s, reg := newSinkLog(t, kc, pl, map[string]string{"kafka.topic": "re", "healthGraceMillis": "1000"}, logs.Logger())
	runSink(t, s, logs.Logger())
	health := testutil.HealthOf(s)

	put(t, pl, "a", 100)
	if !testutil.Eventually(func() bool { return counter(reg, "EventDrainSuccessCount") == 100 }, 10*time.Second) {
		t.Fatalf("only %d of 100 events delivered before the topic was deleted", counter(reg, "EventDrainSuccessCount"))
	}
	kc.Delete(t, "re")
	put(t, pl, "b", 300)
	time.Sleep(300 * time.Millisecond) // the first failures
	cpu0, t0 := testutil.CPUTime(), time.Now()
	time.Sleep(kafkatest.Outage())
	cpu, window := testutil.CPUTime()-cpu0, time.Since(t0)
	t.Logf("topic missing: CPU %v over %v (%.1f%%)", cpu, window.Round(time.Millisecond), 100*cpu.Seconds()/window.Seconds())
	if cpu > window/10 {
		t.Errorf("the process used %v of CPU in %v while the topic was missing: the sink spins", cpu, window)
	}
	// The batch being retried is out of the channel only while it is tried.
	if n := pl.Channel.Len(); n < 200 {
		t.Errorf("the channel holds %d events while the topic is missing, want the 300 put after the deletion less the batch in hand", n)
	}
	if err := health(); err == nil || !strings.Contains(err.Error(), "topic re ") {
		t.Errorf("Health() = %v while the topic is missing, want the failure", err)
	} else {
		t.Logf("health while missing: %v", err)
	}

	if n := len(logs.Lines()); n > kafkatest.MaxOutageLogLines() {
		t.Errorf("%d log lines while the topic was missing, want at most %d:\n%s", n, kafkatest.MaxOutageLogLines(), strings.Join(logs.Lines()[:min(n, 20)], "\n"))
	}
	kc.Create(t, "re", 2)
	back := time.Now()
	got := map[string]bool{}
	kafkatest.ReadUntil(t, kc.Addrs, []string{"re"}, 20*time.Second, func(recs []*kgo.Record) bool {
		for _, r := range recs {
			got[string(r.Value)] = true
		}
		return len(got) >= 300
	})
	t.Logf("the 300 held events reached the re-created topic %v after it was created", time.Since(back).Round(time.Millisecond))
	for i := range 300 {
		if !got["b"+strconv.Itoa(i)] {
			t.Fatalf("event b%d did not reach the re-created topic (%d of 300 did)", i, len(got))
		}
	}
	if took := time.Since(back); took > 10*time.Second {
		t.Errorf("delivery resumed %v after the topic was re-created, want within seconds", took)
	}
	if !testutil.Eventually(func() bool { return health() == nil }, 5*time.Second) {
		t.Errorf("Health() = %v after delivery resumed", health())
	}
	lines := logs.Lines()
	t.Logf("%d log lines:\n%s", len(lines), strings.Join(lines, "\n"))
	if len(lines) > kafkatest.MaxOutageLogLines() {
		t.Errorf("%d log lines for one topic re-creation, want at most %d", len(lines), kafkatest.MaxOutageLogLines())
	}
}

// The brokers go away under a sink that has events to deliver: after the
// grace period Health says no broker answers, the outage is logged as
// one failure streak, and once the brokers are back
// everything is delivered and Health is nil again.
func TestSinkBrokerOutageHealth(t *testing.T) {
	kc := kafkatest.New(t, 1, 1, "down")
	logs := &kafkatest.Logs{}
	pl := sourcetest.NewPipeline(t, 10000, 1000, 100*time.Millisecond)
	s, reg := newSinkLog(t, kc, pl, map[string]string{"kafka.topic": "down", "healthGraceMillis": "1000",
		"kafka.producer.delivery.timeout.ms": "2000"}, logs.Logger())
	runSink(t, s, logs.Logger())
	health := testutil.HealthOf(s)
	put(t, pl, "a", 10)
	if !testutil.Eventually(func() bool { return counter(reg, "EventDrainSuccessCount") == 10 }, 10*time.Second) {
		t.Fatal("events not delivered before the outage")
	}
	if err := health(); err != nil {
		t.Errorf("Health() = %v with the brokers up", err)
	}
	kc.Down()
	down := time.Now()
	put(t, pl, "b", 100)
	time.Sleep(500 * time.Millisecond)
	if err := health(); err != nil {
		t.Errorf("Health() = %v %v into the outage, before the 1s grace period", err, time.Since(down))
	}
	if !testutil.Eventually(func() bool { return health() != nil }, 5*time.Second) {
		t.Error("Health() stayed nil with the brokers down past the grace period")
	}
	t.Logf("unhealthy %v into the outage: %v", time.Since(down).Round(time.Millisecond), health())
	time.Sleep(time.Until(down.Add(kafkatest.Outage())))
	kc.Up(t)
	up := time.Now()
	if !testutil.Eventually(func() bool { return health() == nil }, 10*time.Second) {
		t.Errorf("Health() = %v 10s after the brokers came back", health())
	}
	t.Logf("healthy %v after the brokers came back", time.Since(up).Round(time.Millisecond))
	if !testutil.Eventually(func() bool { return counter(reg, "EventDrainSuccessCount") == 110 }, 10*time.Second) {
		t.Fatalf("%d of 110 events delivered after the outage", counter(reg, "EventDrainSuccessCount"))
	}
	kafkatest.CheckOutageLog(t, logs,
		"kafka sink: cannot deliver to Kafka; the events stay in the channel and are sent again",
		"kafka sink: delivering again")
}

// The cluster restarts empty under the sink (its topic is there again,
// empty, under a new topic ID): the events the channel holds go to it
// within seconds.
func TestSinkBrokerRestartedEmpty(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 2, "wiped")
	pl := sourcetest.NewPipeline(t, 10000, 1000, 100*time.Millisecond)
	s, reg := newSink(t, kc, pl, map[string]string{"kafka.topic": "wiped"})
	runSink(t, s, quiet)
	put(t, pl, "a", 50)
	if !testutil.Eventually(func() bool { return counter(reg, "EventDrainSuccessCount") == 50 }, 10*time.Second) {
		t.Fatal("events not delivered before the restart")
	}
	kc.RestartEmpty(t)
	back := time.Now()
	put(t, pl, "b", 100)
	got := map[string]bool{}
	kafkatest.ReadUntil(t, kc.Addrs, []string{"wiped"}, 20*time.Second, func(recs []*kgo.Record) bool {
		for _, r := range recs {
			got[string(r.Value)] = true
		}
		return len(got) >= 100
	})
	for i := range 100 {
		if !got["b"+strconv.Itoa(i)] {
			t.Fatalf("event b%d did not reach the restarted cluster (%d of 100 did)", i, len(got))
		}
	}
	t.Logf("delivery resumed %v after the cluster restarted empty", time.Since(back).Round(time.Millisecond))
	if took := time.Since(back); took > 10*time.Second {
		t.Errorf("delivery resumed %v after the restart, want within seconds", took)
	}
}

// A batch for a topic that was re-created since the last batch is not
// failed: its records, failed on the old topic ID, are sent again at once to
// the new topic (a failed batch would wait for the runner's backoff).
func TestSinkBatchIntoRecreatedTopic(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 2, "again")
	pl := sourcetest.NewPipeline(t, 1000, 100, 100*time.Millisecond)
	s, _ := newSink(t, kc, pl, map[string]string{"kafka.topic": "again"})
	put(t, pl, "a", 10)
	drain(t, s, pl)
	kc.Recreate(t, "again", 2)
	put(t, pl, "b", 10)
	if _, err := s.Process(context.Background()); err != nil {
		t.Fatalf("the first batch after the re-creation: %v", err)
	}
	if recs := kafkatest.ReadAll(t, kc.Addrs, "again", 10, 10*time.Second); len(recs) != 10 {
		t.Fatalf("%d records in the re-created topic, want the batch's 10", len(recs))
	}
}
