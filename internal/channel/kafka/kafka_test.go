package kafkachannel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

var quiet = func() *slog.Logger {
	if os.Getenv("KDEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}()

var seq atomic.Int64

func build(t testing.TB, kc *kafkatest.Cluster, topic, group string, props map[string]string) *Channel {
	t.Helper()
	return buildLog(t, kc, topic, group, props, quiet)
}

// buildLog is build logging to log.
func buildLog(t testing.TB, kc *kafkatest.Cluster, topic, group string, props map[string]string, log *slog.Logger) *Channel {
	t.Helper()
	m := map[string]string{
		"kafka.bootstrap.servers":              kc.Brokers(),
		"kafka.topic":                          topic,
		"kafka.consumer.group.id":              group,
		"kafka.consumer.heartbeat.interval.ms": "100",
		"kafka.consumer.fetch.max.wait.ms":     "100",
		"pollTimeout":                          "100",
	}
	for k, v := range props {
		m[k] = v
	}
	p := config.FromMap("a1.channels.c1.", m)
	ch, err := New(flow.Env{Agent: "a1", Name: "c1", Type: "kafka", Logger: log, Metrics: metrics.NewRegistry("a1")}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	return ch.(*Channel)
}

// The channel contract, on a one-partition topic per test (Kafka orders
// within a partition). A topic has no capacity, so the full-channel tests
// do not apply (Unbounded); Len is -1 (NoLen).
func TestChannelSuite(t *testing.T) {
	kc := kafkatest.New(t, 1, 1)
	testutil.RunChannelSuite(t, func(t *testing.T, _, txCap int) flow.Channel {
		n := seq.Add(1)
		return build(t, kc, fmt.Sprintf("suite-%d", n), fmt.Sprintf("g-%d", n),
			map[string]string{"transactionCapacity": strconv.Itoa(txCap)})
	}, testutil.Unbounded(), testutil.NoLen())
}

func startCh(t *testing.T, ch *Channel) {
	t.Helper()
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A stopped agent's backlog is taken over by the next channel of the same
// group: events taken and committed are not delivered again, the rest are.
func TestChannelSurvivesRestart(t *testing.T) {
	kc := kafkatest.New(t, 1, 3, "backlog")
	a := build(t, kc, "backlog", "agents", nil)
	startCh(t, a)
	if err := testutil.PutCommit(a, testutil.Events("e", 300)); err != nil {
		t.Fatal(err)
	}
	first := testutil.TakeAll(t, a, 100, 50, 5*time.Second)
	if len(first) != 100 {
		t.Fatalf("took %d, want 100", len(first))
	}
	// A transaction open at shutdown is not committed: its events come again.
	tx := a.Begin()
	if _, err := tx.Take(context.Background(), nil, 20); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := build(t, kc, "backlog", "agents", nil)
	startCh(t, b)
	defer b.Stop(context.Background())
	rest := testutil.TakeAll(t, b, 200, 50, 5*time.Second)
	seen := map[string]int{}
	for _, e := range append(first, rest...) {
		seen[string(e.Body)]++
	}
	for i := range 300 {
		if seen["e"+strconv.Itoa(i)] != 1 {
			t.Fatalf("event e%d seen %d times (took %d then %d)", i, seen["e"+strconv.Itoa(i)], len(first), len(rest))
		}
	}
	for _, e := range rest {
		if e.Header("i") == "" || e.ReceivedAt == 0 {
			t.Fatalf("event lost its headers or receive time: %+v", e)
		}
	}
}

// Two agents share a group; one leaves mid-stream. Nothing is lost.
func TestChannelRebalance(t *testing.T) {
	const n = 2000
	kc := kafkatest.New(t, 1, 4, "shared")
	a := build(t, kc, "shared", "pair", nil)
	b := build(t, kc, "shared", "pair", nil)
	startCh(t, a)
	for i := 0; i < n; i += 100 {
		if err := testutil.PutCommit(a, testutil.Events("s"+strconv.Itoa(i)+"-", 100)); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	take := func(ch *Channel, max int, wait time.Duration) int {
		got := testutil.TakeAll(t, ch, max, 30, wait)
		for _, e := range got {
			seen[string(e.Body)]++
		}
		return len(got)
	}
	take(a, 300, 5*time.Second)
	startCh(t, b)
	defer b.Stop(context.Background())
	// Both take while the group rebalances.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && len(seen) < 1200 {
		take(a, 30, 50*time.Millisecond)
		take(b, 30, 50*time.Millisecond)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		take(b, n, 500*time.Millisecond)
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	if len(seen) != n {
		t.Fatalf("%d of %d events taken", len(seen), n)
	}
	t.Logf("%d events, %d duplicates", n, dups)
}

func TestChannelFlumeFormatInterop(t *testing.T) {
	// parseAsFlumeEvent: values are Flume's AvroFlumeEvent, readable by Flume.
	kc := kafkatest.New(t, 1, 1, "fmt", "raw")
	ch := build(t, kc, "fmt", "g1", nil)
	startCh(t, ch)
	defer ch.Stop(context.Background())
	if err := testutil.PutCommit(ch, []event.Event{{Headers: event.HeadersOf(map[string]string{"h": "v"}), Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	recs := kafkatest.ReadAll(t, kc.Addrs, "fmt", 1, 5*time.Second)
	if len(recs) != 1 {
		t.Fatal("no record")
	}
	e, err := kafkaconf.DecodeFlumeEvent(recs[0].Value)
	if err != nil || string(e.Body) != "x" || e.Header("h") != "v" {
		t.Fatalf("record value %q decodes to %+v, %v", recs[0].Value, e, err)
	}
	// parseAsFlumeEvent = false: the value is the body; records others wrote are events.
	raw := build(t, kc, "raw", "g2", map[string]string{"parseAsFlumeEvent": "false"})
	startCh(t, raw)
	defer raw.Stop(context.Background())
	kafkatest.Produce(t, kc.Addrs, &kgo.Record{Topic: "raw", Value: []byte("from elsewhere")})
	got := testutil.TakeAll(t, raw, 1, 1, 5*time.Second)
	if len(got) != 1 || string(got[0].Body) != "from elsewhere" {
		t.Fatalf("took %q", testutil.Bodies(got))
	}
}

func TestChannelConfig(t *testing.T) {
	tests := []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{}, ""},
		{map[string]string{"kafka.topic": "t", "parseAsFlumeEvent": "false", "pollTimeout": "100", "kafka.consumer.auto.offset.reset": "latest", "kafka.producer.linger.ms": "5"}, ""},
		{map[string]string{"kafka.producer.foo": "1"}, "kafka.producer.foo is not supported"},
		{map[string]string{"kafka.consumer.enable.auto.commit": "true"}, "sluice commits offsets itself"},
		{map[string]string{"pollTimeout": "0"}, "out of range"},
	}
	for i, tc := range tests {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			m := map[string]string{"kafka.bootstrap.servers": "127.0.0.1:9092"}
			for k, v := range tc.props {
				m[k] = v
			}
			p := config.FromMap("a1.channels.c1.", m)
			if _, err := New(flow.Env{Name: "c1", Type: "kafka", Logger: quiet}, p); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			perr := p.Err()
			if (tc.want == "") != (perr == nil) || (perr != nil && !strings.Contains(perr.Error(), tc.want)) {
				t.Fatalf("problems %v, want %q", perr, tc.want)
			}
		})
	}
}

// A put waiting for room in the producer's buffer (max.block.ms, here
// 60 s) is the Kafka channel's wait for space: its ctx ends it, the put
// fails as a full channel's would (the source refuses its sender), and the
// channel is not reported unhealthy for it. Records already handed to the
// broker are still acknowledged, so Commit returns once those are.
func TestPutWaitForBufferEndsWithCtx(t *testing.T) {
	kc := kafkatest.New(t, 1, 1, "slow")
	ch := build(t, kc, "slow", "g-slow", map[string]string{
		"kafka.producer.buffer.memory": "1024", // one event of the two below
		"kafka.producer.linger.ms":     "0",
	})
	startCh(t, ch)
	t.Cleanup(func() { _ = ch.Stop(context.Background()) })

	// The broker holds the first produce request until release is closed.
	release := make(chan struct{})
	var held atomic.Bool
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if held.CompareAndSwap(false, true) {
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	body := strings.Repeat("x", 700)
	events := []event.Event{{Body: []byte(body + "1")}, {Body: []byte(body + "2")}}

	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- testutil.PutCommitCtx(ctx, ch, events) }()
	time.Sleep(300 * time.Millisecond) // the second event waits for room
	cancel()
	time.AfterFunc(time.Second, func() { close(release) })
	select {
	case err := <-res:
		if !errors.Is(err, flow.ErrChannelFull) || !errors.Is(err, context.Canceled) {
			t.Fatalf("put cut while waiting for buffer room: err = %v, want one wrapping ErrChannelFull and context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("put still waiting 30 s after its ctx was cancelled")
	}
	if err := ch.Health(); err != nil {
		t.Fatalf("a put cut by its ctx marked the channel unhealthy: %v", err)
	}
}
