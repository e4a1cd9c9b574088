package kafkachannel

// The producer side: a put's events become records (as Flume events when
// parseAsFlumeEvent, into the partition partitionIdHeader or
// defaultPartitionId names), produced with every acknowledgement waited
// for; records that failed on a re-created topic are sent once more, to the
// topic as it is now (forgetProduced).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf"
	"github.com/sluicehq/sluice/internal/panics"
)

// parsePartition reads a partition number from a header value.
func parsePartition(v string) (int32, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, errors.New("not a partition number (a whole number from 0)")
	}
	return int32(n), nil
}

// partitionOf is the partition an event is put into: its partitionIdHeader,
// else defaultPartitionId, as Flume's KafkaChannel; false: Kafka's
// partitioning (by the key header, else sticky).
func (c *Channel) partitionOf(e *event.Event) (int32, bool) {
	if c.partHeader != "" {
		if v, ok := e.Headers.Get(c.partHeader); ok {
			if n, err := parsePartition(v); err == nil {
				return n, true
			}
		}
	}
	return c.defaultPart, c.defaultPart >= 0
}

// produce sends the puts and waits for every acknowledgement. The wait for
// room in the client's buffer (max.block.ms) is the channel's wait for
// space, so stop ends it too; records handed to the client are
// acknowledged or failed within delivery.timeout.ms, whatever stop does.
func (t *tx) produce(stop context.Context) error {
	c := t.c
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.producer.DeliveryTimeout)
	defer cancel()
	bctx, bcancel := context.WithTimeout(ctx, max(c.producer.MaxBlock, time.Millisecond))
	defer bcancel()
	unwatch := panics.AfterFunc(stop, "kafka channel "+c.env.Name+": put stop", bcancel)
	defer unwatch()
	recs := make([]kgo.Record, len(t.puts))
	pending := make([]*kgo.Record, len(t.puts))
	var values []byte
	var offs []int
	if c.parse {
		offs = make([]int, len(t.puts)+1)
		for i := range t.puts {
			values = kafkaconf.AppendFlumeEvent(values, &t.puts[i])
			offs[i+1] = len(values)
		}
	}
	now := time.Now()
	var manual context.Context
	for i := range t.puts {
		e := &t.puts[i]
		r := &recs[i]
		r.Context, r.Timestamp = ctx, now
		if k, ok := e.Headers.Get(kafkaconf.KeyHeader); ok {
			r.Key = []byte(k)
		}
		if p, ok := c.partitionOf(e); ok {
			if manual == nil {
				manual = kafkaconf.WithManualPartition(ctx)
			}
			r.Partition, r.Context = p, manual
		}
		if c.parse {
			r.Value = values[offs[i]:offs[i+1]:offs[i+1]]
		} else {
			r.Value = e.Body
		}
		if e.ReceivedAt != 0 {
			r.Headers = []kgo.RecordHeader{{Key: receivedHeader, Value: strconv.AppendInt(nil, e.ReceivedAt, 10)}}
		}
		pending[i] = r
	}
	var err error
	for attempt := 0; ; attempt++ {
		gen := c.prodGen.Load()
		res := c.send(ctx, bctx, pending)
		err = res.first
		if err == nil || !res.gone {
			break
		}
		c.forgetProduced(gen, err)
		// Every record that failed failed on the stale topic ID: with the
		// topic purged, they go to the topic as it is now, at once,
		// rather than back to the source as a refused put.
		if attempt > 0 || res.other || ctx.Err() != nil {
			break
		}
		pending = res.failed
	}
	c.sendTimer.Add(time.Since(t0).Milliseconds())
	if err != nil && kafkaconf.InvalidPartition(err) {
		// The events' fault, not Kafka's: refused, and the channel stays healthy.
		return fmt.Errorf("channel %s: a put names a partition topic %s does not have (partitionIdHeader %q, defaultPartitionId %d): %w",
			c.env.Name, c.topic, c.partHeader, c.defaultPart, err)
	}
	if err != nil && stop.Err() != nil {
		// Not Kafka's fault: the source is stopping; records still waiting
		// for room in the client's buffer were failed.
		return flow.FullWaitEnded(stop, "channel %s: the put of %d events stopped waiting for room in the Kafka client's buffer (%v)",
			c.env.Name, len(t.puts), err)
	}
	if err != nil {
		c.health.Fail("put", fmt.Errorf("puts fail: Kafka refuses them or does not acknowledge them within %v (delivery.timeout.ms): %w",
			c.producer.DeliveryTimeout, err), c.health.Grace()/2)
		return flow.FullErrorf("channel %s: Kafka refused a put of %d events, or did not acknowledge it within %v (delivery.timeout.ms): %v",
			c.env.Name, len(t.puts), c.producer.DeliveryTimeout, err)
	}
	c.health.OK("put")
	return nil
}

// sent is what became of the records of one send.
type sent struct {
	first  error // the first failure
	failed []*kgo.Record
	gone   bool // a record failed on a stale topic ID
	other  bool // a record failed for another reason
}

// send produces recs and waits for every promise (a promise always comes:
// when ctx ends, what was not sent fails with it).
func (c *Channel) send(ctx, bctx context.Context, recs []*kgo.Record) sent {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		res sent
	)
	guard := "kafka channel " + c.env.Name + ": produce result"
	promise := func(r *kgo.Record, err error) { // called by the client's goroutines
		defer panics.Guard(guard)
		if err != nil {
			mu.Lock()
			if res.first == nil {
				res.first = err
			}
			res.failed = append(res.failed, r)
			if kafkaconf.TopicGone(err) {
				res.gone = true
			} else {
				res.other = true
			}
			mu.Unlock()
		}
		wg.Done()
	}
	wg.Add(len(recs))
	for _, r := range recs {
		c.prod.Produce(bctx, r, promise)
	}
	done := make(chan struct{})
	panics.Go("kafka channel "+c.env.Name+": put", func() { wg.Wait(); close(done) })
	select {
	case <-done:
	case <-ctx.Done():
		<-done // the context fails what was not sent; in-flight requests finish
	}
	mu.Lock()
	defer mu.Unlock()
	return res
}

// forgetProduced drops the producer's state of the topic, which was deleted
// (and perhaps created again under a new topic ID): franz-go fails every
// record for a topic whose ID changed until it is purged, and produces to
// the topic as it is now once it is. Puts that failed so at the same time
// (the same gen) purge once, and wait for that purge: a later purge would
// fail records already on their way to the new topic.
func (c *Channel) forgetProduced(gen int64, err error) {
	c.forgetMu.Lock()
	defer c.forgetMu.Unlock()
	if !c.prodGen.CompareAndSwap(gen, gen+1) {
		return
	}
	c.throttle.Log(c.log, slog.LevelWarn, "topic gone (put)",
		"kafka channel: the channel's topic was deleted or re-created (its topic ID changed); putting into the topic as it is now",
		"topic", c.topic, "err", err)
	c.prod.PurgeTopicsFromProducing(c.topic)
}
