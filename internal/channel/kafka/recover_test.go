package kafkachannel

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// putter puts batches of 10 events named prefix0.. into ch until n were
// committed, retrying a refused batch after a pause, as a source whose
// sender retries does. wait waits up to timeout and returns how many were
// committed.
func putter(t *testing.T, ch flow.Channel, prefix string, n int) (wait func(timeout time.Duration) int) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i += 10 {
			evs := make([]event.Event, 10)
			for j := range evs {
				evs[j] = event.Event{Body: []byte(prefix + strconv.Itoa(i+j)), ReceivedAt: event.Now()}
			}
			for {
				err := testutil.PutCommit(ch, evs)
				if err == nil {
					break
				}
				if !errors.Is(err, flow.ErrChannelFull) {
					t.Errorf("put: %v", err)
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			mu.Lock()
			done += len(evs)
			mu.Unlock()
		}
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(halt)
	return func(timeout time.Duration) int {
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(timeout):
			halt()
		}
		mu.Lock()
		defer mu.Unlock()
		return done
	}
}

func bufLen(c *Channel) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// The channel's topic is deleted under it, left missing (the cluster does
// not create topics by itself), and created again. What the channel had
// fetched is still taken while the topic is missing (an open transaction
// commits, buffered events are taken): the agent does not lose what it
// holds. Puts are refused meanwhile (their source keeps them), the channel
// uses no CPU to speak of (it polled the fetch error in a loop at 60-80 %
// of a core and logged it thousands of times a second), logs a few lines
// and reports the missing topic through Health after the grace period.
// Once the topic is back (a new topic ID), the refused puts go into it and
// are taken within seconds, and Health is nil again.
func TestChannelTopicRecreated(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 1, "chan")
	logs := &kafkatest.Logs{}
	ch := buildLog(t, kc, "chan", "g", map[string]string{"healthGraceMillis": "1000"}, logs.Logger())
	startCh(t, ch)
	t.Cleanup(func() { ch.Stop(context.Background()) })
	health := testutil.HealthOf(ch)

	if err := testutil.PutCommit(ch, testutil.Events("a", 30)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.TakeAll(t, ch, 10, 10, 5*time.Second); len(got) != 10 {
		t.Fatalf("took %d of the first 10", len(got))
	}
	held := ch.Begin() // a sink's transaction, open across the deletion
	inHand, err := held.Take(context.Background(), nil, 5)
	if err != nil || len(inHand) != 5 {
		t.Fatalf("took %d into the open transaction: %v", len(inHand), err)
	}
	if !testutil.Eventually(func() bool { return bufLen(ch) == 15 }, 5*time.Second) {
		t.Fatalf("the channel fetched %d of the 15 remaining events", bufLen(ch))
	}

	kc.Delete(t, "chan")
	wait := putter(t, ch, "b", 100)
	time.Sleep(300 * time.Millisecond)
	cpu0, t0 := testutil.CPUTime(), time.Now()
	// What the channel holds is delivered while the topic is missing.
	if err := held.Commit(context.Background()); err != nil {
		t.Fatalf("commit of a take open across the deletion: %v", err)
	}
	kept := testutil.TakeAll(t, ch, 15, 15, 5*time.Second)
	if len(kept) != 15 || string(kept[0].Body) != "a15" || string(kept[14].Body) != "a29" {
		t.Fatalf("the events the channel had fetched before the deletion: took %q, want a15..a29", testutil.Bodies(kept))
	}
	time.Sleep(time.Until(t0.Add(kafkatest.Outage())))
	cpu, window := testutil.CPUTime()-cpu0, time.Since(t0)
	t.Logf("topic missing: CPU %v over %v (%.1f%%)", cpu, window.Round(time.Millisecond), 100*cpu.Seconds()/window.Seconds())
	if cpu > window/10 {
		t.Errorf("the process used %v of CPU in %v while the topic was missing: the channel spins", cpu, window)
	}
	if err := health(); err == nil || !strings.Contains(err.Error(), "topic chan") {
		t.Errorf("Health() = %v while the topic is missing, want the reason", err)
	} else {
		t.Logf("health while missing: %v", err)
	}

	if n := len(logs.Lines()); n > kafkatest.MaxOutageLogLines() {
		t.Errorf("%d log lines while the topic was missing, want at most %d:\n%s", n, kafkatest.MaxOutageLogLines(), strings.Join(logs.Lines()[:min(n, 20)], "\n"))
	}
	kc.Create(t, "chan", 1)
	back := time.Now()
	if n := wait(20 * time.Second); n != 100 {
		t.Fatalf("%d of 100 puts committed after the topic came back", n)
	}
	got := testutil.TakeAll(t, ch, 100, 50, 10*time.Second)
	t.Logf("puts and takes resumed %v after the topic was re-created", time.Since(back).Round(time.Millisecond))
	seen := map[string]int{}
	for _, e := range got {
		seen[string(e.Body)]++
	}
	for i := range 100 {
		if seen["b"+strconv.Itoa(i)] != 1 {
			t.Fatalf("event b%d taken %d times after the re-creation; took %d events", i, seen["b"+strconv.Itoa(i)], len(got))
		}
	}
	if took := time.Since(back); took > 10*time.Second {
		t.Errorf("the channel resumed %v after the topic was re-created, want within seconds", took)
	}
	if !testutil.Eventually(func() bool { return health() == nil }, 5*time.Second) {
		t.Errorf("Health() = %v after the channel resumed", health())
	}
	lines := logs.Lines()
	t.Logf("%d log lines:\n%s", len(lines), strings.Join(lines, "\n"))
	if len(lines) > kafkatest.MaxOutageLogLines() {
		t.Errorf("%d log lines for one topic re-creation, want at most %d", len(lines), kafkatest.MaxOutageLogLines())
	}
}

// The brokers go away under a channel: Health says so after the grace
// period, the outage is logged as one failure streak, and afterwards
// puts and takes work and Health is nil again.
func TestChannelBrokerOutageHealth(t *testing.T) {
	kc := kafkatest.New(t, 1, 1, "down")
	logs := &kafkatest.Logs{}
	ch := buildLog(t, kc, "down", "g", map[string]string{"healthGraceMillis": "1000"}, logs.Logger())
	startCh(t, ch)
	t.Cleanup(func() { ch.Stop(context.Background()) })
	health := testutil.HealthOf(ch)
	if err := testutil.PutCommit(ch, testutil.Events("a", 10)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.TakeAll(t, ch, 10, 10, 5*time.Second); len(got) != 10 {
		t.Fatalf("took %d of 10 before the outage", len(got))
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
	if err := testutil.PutCommit(ch, testutil.Events("b", 10)); err != nil {
		t.Fatalf("put after the outage: %v", err)
	}
	if got := testutil.TakeAll(t, ch, 10, 10, 10*time.Second); len(got) != 10 {
		t.Fatalf("took %d of 10 after the outage", len(got))
	}
	kafkatest.CheckOutageLog(t, logs,
		"kafka channel: Kafka fails; retrying (puts are refused or wait meanwhile, takes find nothing new)",
		"kafka channel: Kafka works again")
}

// The cluster restarts empty under the channel (its topic is there again,
// empty, under a new topic ID; the consumer group and its offsets are
// gone): puts and takes carry on with the new cluster within seconds.
func TestChannelBrokerRestartedEmpty(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 1, "wiped")
	ch := build(t, kc, "wiped", "g", map[string]string{"healthGraceMillis": "1000"})
	startCh(t, ch)
	t.Cleanup(func() { ch.Stop(context.Background()) })
	if err := testutil.PutCommit(ch, testutil.Events("a", 20)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.TakeAll(t, ch, 20, 20, 5*time.Second); len(got) != 20 {
		t.Fatalf("took %d of 20 before the restart", len(got))
	}
	kc.RestartEmpty(t)
	back := time.Now()
	wait := putter(t, ch, "b", 100)
	if n := wait(20 * time.Second); n != 100 {
		t.Fatalf("%d of 100 puts committed after the restart", n)
	}
	got := testutil.TakeAll(t, ch, 100, 50, 10*time.Second)
	seen := map[string]int{}
	for _, e := range got {
		seen[string(e.Body)]++
	}
	for i := range 100 {
		if seen["b"+strconv.Itoa(i)] != 1 {
			t.Fatalf("event b%d taken %d times after the restart; took %d events", i, seen["b"+strconv.Itoa(i)], len(got))
		}
	}
	t.Logf("puts and takes resumed %v after the cluster restarted empty", time.Since(back).Round(time.Millisecond))
	if took := time.Since(back); took > 10*time.Second {
		t.Errorf("the channel resumed %v after the restart, want within seconds", took)
	}
	if health := testutil.HealthOf(ch); !testutil.Eventually(func() bool { return health() == nil }, 5*time.Second) {
		t.Errorf("Health() = %v after the channel resumed", health())
	}
}

// A put into a topic that was re-created since the last put is not refused:
// its records, failed on the old topic ID, are sent again at once to the new
// topic (a refused put would have the source push back on its senders).
func TestChannelPutIntoRecreatedTopic(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 1, "again")
	ch := build(t, kc, "again", "g", nil)
	startCh(t, ch)
	t.Cleanup(func() { ch.Stop(context.Background()) })
	if err := testutil.PutCommit(ch, testutil.Events("a", 5)); err != nil {
		t.Fatal(err)
	}
	kc.Recreate(t, "again", 1)
	if err := testutil.PutCommit(ch, testutil.Events("b", 5)); err != nil {
		t.Fatalf("the first put after the re-creation: %v", err)
	}
	// The a events the channel had fetched before the deletion (if it had)
	// are still taken; the b events come from the new topic.
	seen := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for seen["b4"] == 0 && time.Now().Before(deadline) {
		for _, e := range testutil.TakeAll(t, ch, 10, 10, 200*time.Millisecond) {
			seen[string(e.Body)]++
		}
	}
	for i := range 5 {
		if n := seen["b"+strconv.Itoa(i)]; n != 1 {
			t.Fatalf("event b%d taken %d times (took %v)", i, n, seen)
		}
	}
}
