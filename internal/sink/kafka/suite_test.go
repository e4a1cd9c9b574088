package kafkasink

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// TestSinkSuite runs the sink contract against an in-process broker
// (kfake) on a one-partition topic (Kafka orders within a partition). To
// refuse, the broker answers every produce with NOT_ENOUGH_REPLICAS (a
// real broker's answer when min.insync.replicas are not in sync); the
// client retries until delivery.timeout.ms, then the batch fails. To stall,
// it holds produce requests unanswered.
func TestSinkSuite(t *testing.T) {
	kc := kafkatest.New(t, 1, 1)
	var seq atomic.Int64
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		topic := "suite-" + strconv.FormatInt(seq.Add(1), 10)
		kc.Create(t, topic, 1)
		b := newBroker(t, kc, topic)
		p := config.FromMap("a1.sinks.k1.", map[string]string{"kafka.bootstrap.servers": kc.Brokers(), "kafka.topic": topic,
			"flumeBatchSize": "100", "kafka.producer.delivery.timeout.ms": "2000"})
		env.Type, env.Logger = "kafka", quiet
		s, err := New(env, p)
		if err != nil || p.Err() != nil {
			t.Fatal(err, p.Err())
		}
		return s, sinktest.Downstream{Delivered: b.bodies.Get, Refuse: b.refuse, Stall: b.stall, Accept: b.accept}
	})
}

// broker steers produce requests to one topic of kc and reads back what
// the topic holds.
type broker struct {
	kc     *kafkatest.Cluster
	topic  string
	bodies sinktest.Bodies

	mu      sync.Mutex
	fault   *kfake.FaultHandle
	stalled chan struct{} // closed by accept; nil when not stalled
}

func newBroker(t *testing.T, kc *kafkatest.Cluster, topic string) *broker {
	b := &broker{kc: kc, topic: topic}
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		b.mu.Lock()
		wait := b.stalled
		b.mu.Unlock()
		if wait != nil {
			kc.SleepControl(func() { <-wait })
		}
		return nil, nil, false // then answered as the broker does
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) { b.bodies.Add(string(r.Value)) })
		}
	}()
	t.Cleanup(func() {
		b.accept()
		cancel()
		<-done
		cl.Close()
	})
	return b
}

func (b *broker) refuse() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fault == nil {
		b.fault = b.kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: b.topic, Err: kerr.NotEnoughReplicas, Count: -1})
	}
}

func (b *broker) stall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stalled == nil {
		b.stalled = make(chan struct{})
	}
}

func (b *broker) accept() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fault != nil {
		b.fault.Remove()
		b.fault = nil
	}
	if b.stalled != nil {
		close(b.stalled)
		b.stalled = nil
	}
}
