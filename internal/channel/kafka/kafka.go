// Package kafkachannel is Flume's Kafka channel
// (org.apache.flume.channel.kafka.KafkaChannel) on franz-go: the events live
// in a Kafka topic, so an agent holds no state of its own and a replacement
// agent (same consumer group) takes over the backlog.
//
// Transactions:
//   - Put stages events; Commit produces them (with the configured acks) and
//     returns only when Kafka acknowledged every one, or fails with an error
//     wrapping flow.ErrChannelFull (Kafka unreachable within
//     delivery.timeout.ms), so sources push back. Rollback drops them.
//   - Take hands out records the channel's consumer fetched, up to the
//     transaction's capacity, waiting (for ctx) only when none is there.
//     Commit commits the consumer group's offsets up to the oldest record
//     still out in an open transaction; Rollback puts the taken records back
//     at the head, so they are taken again in order (rewinding to the
//     uncommitted offsets without a round trip to Kafka).
//
// Several sinks may take concurrently; a partition's offset advances only
// over records whose take committed. When the group rebalances, the channel
// waits (bounded) for open transactions on the partitions it loses, commits
// their offsets and forgets their buffered records, so the next owner
// starts exactly there: nothing is lost, and at most a transaction that
// outlived the wait is delivered twice.
//
// Order is Kafka's: FIFO within a partition (use a one-partition topic for
// a strict FIFO channel). Len is -1 (the channel cannot count a topic
// cheaply); ChannelSize reports the consumer group's lag.
//
// The topic deleted and created again under a running channel (a new topic
// ID, or a cluster that restarted empty): franz-go keeps failing a topic
// whose ID changed until it is purged from the client. A put that fails so
// purges it from the producer and sends its records again at once, to the
// topic as it is now (if the topic is missing, the put fails and its source
// retries it); a fetch that fails so purges it from the consumer, which
// subscribes again and reads the new topic from its start.
// What the channel still holds is not lost: records it had fetched from the
// old topic stay in its buffer and in open transactions and are taken as
// usual (their offsets are not committed: the old topic is gone). Records of
// the old topic it had not fetched are gone with the topic: deleting it is
// the operator's act. Failing polls back off instead of spinning, and the
// channel reports through Health when it cannot reach its brokers or its
// topic for longer than healthGraceMillis.
package kafkachannel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
)

// Defaults.
const (
	DefaultTopic       = "flume-channel"
	DefaultGroup       = "flume"
	DefaultPollTimeout = 500 * time.Millisecond
	// DefaultTransactionCapacity bounds one transaction (sluice's own
	// property; Flume's Kafka channel has none).
	DefaultTransactionCapacity = 10000
	// receivedHeader carries Event.ReceivedAt (Unix ns) in a Kafka record
	// header, next to the value Flume reads.
	receivedHeader = "sluice.received"
	revokeWait     = 10 * time.Second
	commitTimeout  = 10 * time.Second
)

// Channel is the Kafka channel. Build it with New.
type Channel struct {
	env         flow.Env
	brokers     []string
	topic       string
	parse       bool
	partHeader  string // partitionIdHeader: "" for none
	defaultPart int32  // defaultPartitionId: -1 for none
	txCap       int
	pollTimeout time.Duration
	producer    *kafkaconf.Producer
	consumer    *kafkaconf.Consumer
	log         *slog.Logger
	throttle    *logthrottle.Throttle // single events that repeat (re-created topics, records not in the Flume format)
	commits     *logthrottle.Streak   // failing offset commits
	health      *kafkaconf.Health     // tells the channel's outages, one streak each
	recreated   kafkaconf.Recreated
	// prodGen counts the purges of the topic from the producer, so that
	// several puts failing at once purge it once; forgetMu serialises them.
	prodGen  atomic.Int64
	forgetMu sync.Mutex

	counters                                    *metrics.ChannelCounters
	sendTimer, getTimer, commitTimer, rollbacks *atomic.Int64
	lag                                         *kafkaconf.Lag

	prod, cons *kgo.Client
	pollCancel context.CancelFunc
	pollDone   chan struct{}
	probeDone  chan struct{}
	commitMu   sync.Mutex // serialises offset commits, so offsets never go back
	// pollMu is held by the poller from a poll until its records are
	// buffered, and by a revocation, so an in-flight poll cannot buffer
	// records of a partition after the partition was revoked.
	pollMu sync.Mutex

	mu       sync.Mutex
	buf      []*rec // fetched and not taken, in order
	notEmpty chan struct{}
	space    chan struct{}
	parts    map[tp]*partState
	// orphans are partitions of a deleted topic whose records the channel
	// still holds: taken as usual, never committed.
	orphans []*partState
	stopped bool
}

type tp struct {
	topic     string
	partition int32
}

// partState tracks one owned partition: the records fetched and not yet
// durably taken, in offset order.
type partState struct {
	tp      tp
	open    []*rec
	next    int64 // offset after the last record fetched
	done    int64 // offset after the last record whose take committed (-1: none)
	taken   int   // records out in open transactions
	revoked bool
	dirty   bool // done advanced since the last successful offset commit
}

type rec struct {
	r     *kgo.Record
	ps    *partState
	taken bool
	done  bool
}

// New builds a Kafka channel from its properties: kafka.bootstrap.servers
// (required), kafka.topic (flume-channel), kafka.consumer.group.id (flume),
// parseAsFlumeEvent (true), pollTimeout (500 ms), sluice's
// transactionCapacity (10000) and healthGraceMillis (30000), and kafka.producer.* / kafka.consumer.*
// (see kafkaconf; acks default all, delivery.timeout.ms 10000 and
// auto.offset.reset earliest here, as Flume's KafkaChannel sets them: a
// channel must not skip the events put before its consumer group first
// joined, which Kafka's latest does). Flume 1.6's brokerList, topic, groupId and
// readSmallestOffset (false: latest) count when the new keys are unset.
// As Flume's, the "key" header is the record key, and partitionIdHeader and
// defaultPartitionId choose a partition (a header that is not a number, or
// a partition the topic lacks, refuses the put).
func New(env flow.Env, p *config.Props) (flow.Channel, error) {
	c := &Channel{env: env, log: env.Log().With("channel", env.Name), parts: map[tp]*partState{},
		throttle: logthrottle.New(kafkaconf.LogEvery, 1)}
	c.brokers = kafkaconf.Brokers(p, "brokerList")
	kafkaconf.ReadZooKeeperKeys(p)
	// Flume 1.6's topic, groupId and readSmallestOffset count when the new
	// keys are unset, as Flume 1.11's KafkaChannel still translates them.
	c.topic = strings.TrimSpace(p.String("kafka.topic", p.String("topic", DefaultTopic)))
	if c.topic == "" {
		p.Errorf("kafka.topic", "the topic must not be empty")
	}
	c.parse = p.Bool("parseAsFlumeEvent", true)
	c.partHeader = p.String("partitionIdHeader", "")
	c.defaultPart = -1
	if p.Has("defaultPartitionId") {
		c.defaultPart = int32(p.IntRange("defaultPartitionId", 0, 0, math.MaxInt32))
	}
	c.txCap = p.IntRange("transactionCapacity", DefaultTransactionCapacity, 1, math.MaxInt32)
	c.pollTimeout = time.Duration(p.IntRange("pollTimeout", int(DefaultPollTimeout/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	c.producer = kafkaconf.ReadProducer(p, "kafka.producer.", kafkaconf.ProducerDefaults{Acks: "all", DeliveryTimeout: 10 * time.Second, Env: kafkaconf.Env{Sys: env.Sys, Log: env.Log()}})
	reset := "earliest"
	if p.Has("readSmallestOffset") && !p.Bool("readSmallestOffset", false) {
		reset = "latest"
	}
	c.consumer = kafkaconf.ReadConsumer(p, "kafka.consumer.", kafkaconf.ConsumerDefaults{Group: p.String("groupId", DefaultGroup), Reset: reset, Env: kafkaconf.Env{Sys: env.Sys, Log: env.Log()}})
	c.health = kafkaconf.NewHealth(kafkaconf.ReadHealthGrace(p))
	c.health.Tell(c.log, "kafka channel: Kafka fails; retrying (puts are refused or wait meanwhile, takes find nothing new)",
		"kafka channel: Kafka works again")
	c.commits = &logthrottle.Streak{Log: c.log, Level: slog.LevelWarn,
		Failed:    "kafka channel: offset commit failed; it is retried with the next commit, and a restart before then delivers those events again",
		Recovered: "kafka channel: offset commits succeed again"}

	c.counters = metrics.NewChannelCounters(env.Name, env.Type)
	c.sendTimer = c.counters.Counter("KafkaEventSendTimer")
	c.getTimer = c.counters.Counter("KafkaEventGetTimer")
	c.commitTimer = c.counters.Counter("KafkaCommitTimer")
	c.rollbacks = c.counters.Counter("RollbackCount")
	c.lag = kafkaconf.NewLag(env.Registry(), env.Name)
	c.counters.SetSize(c.size, func() int64 { return 0 })
	env.Registry().Add(c.counters.Set)
	return c, nil
}

// Health reports whether the channel reaches its brokers and its topic (see
// flow.HealthReporter).
func (c *Channel) Health() error { return c.health.Err() }

// TransactionCapacity is the most events one transaction may put or take.
func (c *Channel) TransactionCapacity() int { return c.txCap }

// Len is -1: the events are in Kafka.
func (c *Channel) Len() int { return -1 }

// size is the consumer group's lag: records in the topic not yet taken for
// good (as far as this member's fetches know).
func (c *Channel) size() int64 {
	c.mu.Lock()
	n := int64(0)
	count := func(ps *partState) {
		for _, r := range ps.open {
			if !r.done {
				n++
			}
		}
	}
	for _, ps := range c.parts {
		count(ps)
	}
	for _, ps := range c.orphans {
		count(ps)
	}
	c.mu.Unlock()
	return n + c.lag.Total()
}

// Start builds the producer and the consumer (which joins the group) and
// starts fetching. It does not wait for Kafka.
func (c *Channel) Start(context.Context) error {
	popts, err := c.producer.Options(c.brokers)
	if err != nil {
		return fmt.Errorf("kafka channel %s: %w", c.env.Name, err)
	}
	popts = append(popts, kgo.DefaultProduceTopic(c.topic), kgo.WithLogger(kafkaconf.Logger(c.log)),
		kgo.RecordPartitioner(kafkaconf.Partitioner{}))
	prod, err := kgo.NewClient(popts...)
	if err != nil {
		return fmt.Errorf("kafka channel %s: %w", c.env.Name, err)
	}
	c.ensureTopic(prod)
	copts, err := c.consumer.Options(c.brokers)
	if err != nil {
		prod.Close()
		return fmt.Errorf("kafka channel %s: %w", c.env.Name, err)
	}
	copts = append(copts,
		kgo.ConsumeTopics(c.topic),
		kgo.WithLogger(kafkaconf.Logger(c.log)),
		kgo.AdjustFetchOffsetsFn(c.recreated.AdjustOffsets),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			defer panics.Guard("kafka channel " + c.env.Name + ": partitions assigned")
			c.assigned(ctx, cl, m)
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			defer panics.Guard("kafka channel " + c.env.Name + ": partitions revoked")
			c.revoked(ctx, cl, m, true)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			defer panics.Guard("kafka channel " + c.env.Name + ": partitions lost")
			c.revoked(ctx, cl, m, false)
		}),
	)
	cons, err := kgo.NewClient(copts...)
	if err != nil {
		prod.Close()
		return fmt.Errorf("kafka channel %s: %w", c.env.Name, err)
	}
	c.prod, c.cons = prod, cons
	c.counters.Started()
	c.lag.Register()
	ctx, cancel := context.WithCancel(context.Background())
	c.pollCancel, c.pollDone, c.probeDone = cancel, make(chan struct{}), make(chan struct{})
	panics.Go("kafka channel "+c.env.Name+": poller", func() { c.poll(ctx) })
	probe := &kafkaconf.Probe{Client: prod, Brokers: c.brokers, Health: c.health,
		Interval: kafkaconf.ProbeInterval(c.health.Grace()), Topics: []string{c.topic}}
	probeDone := c.probeDone
	panics.Go("kafka channel "+c.env.Name+": broker probe", func() { defer close(probeDone); probe.Run(ctx) })
	return nil
}

// ensureTopic asks the brokers for the topic's metadata, allowing them to
// create it (as a Java producer's first send would), so the consumer finds
// it when it joins. Best effort: Kafka may be down, and the producer asks
// again on the first put.
func (c *Channel) ensureTopic(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = true
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(c.topic)
	req.Topics = append(req.Topics, t)
	if _, err := req.RequestWith(ctx, cl); err != nil {
		c.log.Debug("kafka channel: topic metadata at start", "err", err)
	}
}

// Stop stops fetching, commits the offsets of what was taken, leaves the
// group and closes the clients. Events not taken stay in Kafka.
func (c *Channel) Stop(context.Context) error {
	if c.cons == nil {
		return nil
	}
	c.pollCancel()
	<-c.pollDone
	<-c.probeDone
	c.mu.Lock()
	c.stopped = true
	c.wake()
	c.mu.Unlock()
	c.commitOffsets(nil)
	c.cons.Close()
	c.prod.Close()
	c.throttle.Flush()
	c.commits.Stop()
	c.health.Stop()
	c.lag.Unregister()
	c.counters.Stopped()
	return nil
}

// wake tells waiting takers that records arrived (or the channel stopped).
// Caller holds mu.
func (c *Channel) wake() {
	if c.notEmpty != nil {
		close(c.notEmpty)
		c.notEmpty = nil
	}
}

// maxBuffered bounds the records fetched ahead of the takers.
func (c *Channel) maxBuffered() int { return max(2*min(c.txCap, 10000), 1000) }

// poll fetches records into buf while it has room.
func (c *Channel) poll(ctx context.Context) {
	defer close(c.pollDone)
	stale := kafkaconf.FetchStale(c.health.Grace())
	retry := kafkaconf.FetchBackoff(c.health.Grace())
	failedPolls := 0
	for ctx.Err() == nil {
		c.mu.Lock()
		room := c.maxBuffered() - len(c.buf)
		if room <= 0 {
			if c.space == nil {
				c.space = make(chan struct{})
			}
			wait := c.space
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-wait:
			}
			continue
		}
		c.mu.Unlock()

		c.pollMu.Lock()
		t0 := time.Now()
		pctx, cancel := context.WithTimeout(ctx, c.pollTimeout)
		fs := c.cons.PollRecords(pctx, room)
		cancel()
		c.getTimer.Add(time.Since(t0).Milliseconds())
		if fs.IsClientClosed() {
			c.pollMu.Unlock()
			return
		}
		failed, gone := false, false
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			failed = true
			if kafkaconf.TopicGone(err) && t == c.topic {
				// Not a failure to tell: forgetConsumed, below, subscribes
				// again at once and says so.
				gone = true
				return
			}
			c.health.Fail("fetch", kafkaconf.FetchError(t, p, err), stale)
		})
		c.lag.Observe(fs)
		c.mu.Lock()
		added := 0
		fs.EachRecord(func(r *kgo.Record) {
			ps := c.parts[tp{r.Topic, r.Partition}]
			if ps == nil || ps.revoked || r.Offset < ps.next {
				return
			}
			ps.next = r.Offset + 1
			x := &rec{r: r, ps: ps}
			ps.open = append(ps.open, x)
			c.buf = append(c.buf, x)
			added++
		})
		if added > 0 {
			c.wake()
		}
		c.mu.Unlock()
		c.pollMu.Unlock()
		if fs.NumRecords() > 0 {
			c.health.OK("fetch")
		}
		if gone {
			c.forgetConsumed()
		}
		if !failed || added > 0 {
			failedPolls = 0
			continue
		}
		failedPolls++
		if !kafkaconf.Sleep(ctx, retry(failedPolls)) {
			return
		}
	}
}

// forgetConsumed drops the consumer's state of the topic, which was deleted
// (and perhaps created again under a new topic ID), and subscribes to it
// again. The records the channel holds from the old topic stay takeable;
// their partitions become orphans, whose offsets are never committed (a
// commit would go to the new topic, or fail).
func (c *Channel) forgetConsumed() {
	c.throttle.Log(c.log, slog.LevelWarn, "topic gone",
		"kafka channel: the channel's topic was deleted or re-created (its topic ID changed); subscribing again and reading it from its start. The events the channel had fetched stay in it; events of the old topic it had not fetched are gone with the topic",
		"topic", c.topic)
	c.pollMu.Lock()
	c.mu.Lock()
	for k, ps := range c.parts {
		if k.topic != c.topic {
			continue
		}
		delete(c.parts, k)
		ps.commitOffset() // drop what is done
		if len(ps.open) > 0 {
			c.orphans = append(c.orphans, ps)
		}
	}
	c.mu.Unlock()
	c.pollMu.Unlock()
	c.lag.ForgetTopic(c.topic)
	c.recreated.Mark(c.topic)
	c.cons.PurgeTopicsFromClient(c.topic)
	c.cons.AddConsumeTopics(c.topic)
}

func (c *Channel) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			k := tp{t, p}
			c.parts[k] = &partState{tp: k, next: -1, done: -1}
		}
	}
}

// revoked lets open transactions on the partitions finish (up to
// revokeWait), commits their offsets (unless lost: the group no longer
// accepts them) and forgets the partitions.
func (c *Channel) revoked(ctx context.Context, _ *kgo.Client, m map[string][]int32, commit bool) {
	c.pollMu.Lock() // an in-flight poll buffers first; its records are dropped below
	defer c.pollMu.Unlock()
	c.mu.Lock()
	var states []*partState
	for t, ps := range m {
		for _, p := range ps {
			if s := c.parts[tp{t, p}]; s != nil {
				states = append(states, s)
			}
		}
	}
	// Buffered records of these partitions go: the next owner reads them.
	kept := c.buf[:0]
	for _, x := range c.buf {
		if !contains(states, x.ps) {
			kept = append(kept, x)
		}
	}
	clear(c.buf[len(kept):])
	c.buf = kept
	deadline := time.Now().Add(revokeWait)
	// On Stop, open transactions are abandoned: their events come again.
	for busy(states) && !c.stopped && time.Now().Before(deadline) && ctx.Err() == nil {
		c.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		c.mu.Lock()
	}
	if busy(states) && !c.stopped {
		c.log.Warn("kafka channel: partitions revoked while transactions still hold their events; the next owner will deliver those again")
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, s := range states {
		if commit {
			if o, ok := s.commitOffset(); ok {
				if offsets[s.tp.topic] == nil {
					offsets[s.tp.topic] = map[int32]kgo.EpochOffset{}
				}
				offsets[s.tp.topic][s.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: o}
			}
		}
		s.revoked = true
		delete(c.parts, s.tp)
	}
	c.mu.Unlock()
	c.lag.Forget(m)
	if len(offsets) > 0 {
		c.commitOffsets(offsets)
	}
}

func contains(states []*partState, ps *partState) bool {
	for _, s := range states {
		if s == ps {
			return true
		}
	}
	return false
}

func busy(states []*partState) bool {
	for _, s := range states {
		if s.taken > 0 {
			return true
		}
	}
	return false
}

// commitOffset drops the leading done records and returns the offset to
// commit when it advanced. Caller holds mu.
func (s *partState) commitOffset() (int64, bool) {
	i := 0
	for i < len(s.open) && s.open[i].done {
		s.done = s.open[i].r.Offset + 1
		i++
	}
	if i > 0 {
		clear(s.open[:i])
		s.open = s.open[i:]
		s.dirty = true
	}
	if !s.dirty || s.done < 0 {
		return 0, false
	}
	return s.done, true
}

// pruneOrphans forgets partitions of a deleted topic once every record the
// channel held from them was taken for good. Caller holds mu.
func (c *Channel) pruneOrphans() {
	kept := c.orphans[:0]
	for _, ps := range c.orphans {
		ps.commitOffset()
		if len(ps.open) > 0 {
			kept = append(kept, ps)
		}
	}
	clear(c.orphans[len(kept):])
	c.orphans = kept
}

// commitOffsets commits offsets, or (nil) every owned partition's
// committable offset. Commits are serialised so an older offset never
// overwrites a newer one.
func (c *Channel) commitOffsets(offsets map[string]map[int32]kgo.EpochOffset) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	var states []*partState
	if offsets == nil {
		offsets = map[string]map[int32]kgo.EpochOffset{}
		c.mu.Lock()
		for _, s := range c.parts {
			if o, ok := s.commitOffset(); ok {
				if offsets[s.tp.topic] == nil {
					offsets[s.tp.topic] = map[int32]kgo.EpochOffset{}
				}
				offsets[s.tp.topic][s.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: o}
				states = append(states, s)
			}
		}
		c.mu.Unlock()
	}
	if len(offsets) == 0 {
		return
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	var cerr error
	c.cons.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cerr = commitError(resp, err)
	})
	c.commitTimer.Add(time.Since(t0).Milliseconds())
	if cerr != nil {
		c.commits.Fail(cerr)
		return
	}
	c.commits.Ok()
	c.mu.Lock()
	for _, s := range states {
		if o := offsets[s.tp.topic][s.tp.partition].Offset; o == s.done {
			s.dirty = false
		}
	}
	c.mu.Unlock()
}

func commitError(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}

// Durable implements flow.Durable: its events are in the Kafka topic: a stop or a crash keeps them for the next start.
func (c *Channel) Durable() bool { return true }

// Held is the group's lag as this member sees it plus the records it holds
// for open transactions: what the agent reports as kept at a stop.
func (c *Channel) Held() int { return int(c.size()) }

// Begin opens a transaction.
func (c *Channel) Begin() flow.Transaction { return &tx{c: c} }

type tx struct {
	c     *Channel
	puts  []event.Event
	takes []*rec
	ended bool
}

func (t *tx) Put(events []event.Event) error {
	t.c.counters.EventPutAttempt.Add(int64(len(events)))
	if len(t.puts)+len(events) > t.c.txCap {
		return flow.FullErrorf("channel %s: a transaction of more than %d events (transactionCapacity)", t.c.env.Name, t.c.txCap)
	}
	if h := t.c.partHeader; h != "" {
		for i := range events {
			if v, ok := events[i].Headers[h]; ok {
				if _, err := parsePartition(v); err != nil {
					// As Flume's KafkaChannel, which refuses the put ("Non
					// integer partition id specified"): the sender hears of it.
					return fmt.Errorf("channel %s: event header %s (partitionIdHeader) = %q: %w", t.c.env.Name, h, v, err)
				}
			}
		}
	}
	t.puts = append(t.puts, events...)
	return nil
}

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
		if v, ok := e.Headers[c.partHeader]; ok {
			if n, err := parsePartition(v); err == nil {
				return n, true
			}
		}
	}
	return c.defaultPart, c.defaultPart >= 0
}

func (t *tx) Take(ctx context.Context, dst []event.Event, max int) ([]event.Event, error) {
	c := t.c
	max = min(max, c.txCap-len(t.takes))
	if max <= 0 {
		return dst, nil
	}
	c.mu.Lock()
	for len(c.buf) == 0 {
		if c.stopped {
			c.mu.Unlock()
			return dst, flow.ErrClosed
		}
		if ctx.Err() != nil {
			c.mu.Unlock()
			c.counters.EventTakeAttempt.Add(1)
			return dst, nil
		}
		if c.notEmpty == nil {
			c.notEmpty = make(chan struct{})
		}
		wait := c.notEmpty
		c.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-wait:
		}
		c.mu.Lock()
	}
	k := min(max, len(c.buf))
	got := c.buf[:k]
	for _, x := range got {
		x.taken = true
		x.ps.taken++
	}
	t.takes = append(t.takes, got...)
	clear(c.buf[:k])
	c.buf = c.buf[k:]
	if len(c.buf) == 0 {
		c.buf = nil
	}
	if c.space != nil && len(c.buf) < c.maxBuffered()/2 {
		close(c.space)
		c.space = nil
	}
	c.mu.Unlock()

	attempts := int64(k)
	if k < max {
		attempts++
	}
	c.counters.EventTakeAttempt.Add(attempts)
	for _, x := range t.takes[len(t.takes)-k:] {
		dst = append(dst, c.toEvent(x.r))
	}
	return dst, nil
}

// toEvent turns a record into the event it holds.
func (c *Channel) toEvent(r *kgo.Record) event.Event {
	var e event.Event
	if c.parse {
		fe, err := kafkaconf.DecodeFlumeEvent(r.Value)
		if err == nil {
			e = fe
		} else {
			c.throttle.Log(c.log, slog.LevelWarn, "not flume", "kafka channel: record is not a Flume event (parseAsFlumeEvent = true); taking its value as the body",
				"partition", r.Partition, "offset", r.Offset, "err", err)
			e.Body = r.Value
		}
	} else {
		e.Body = r.Value
	}
	for _, h := range r.Headers {
		if h.Key == receivedHeader {
			e.ReceivedAt, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	e.CommittedAt = max(r.Timestamp.UnixNano(), e.ReceivedAt)
	return e
}

func (t *tx) Commit(ctx context.Context) error {
	if t.ended {
		return errors.New("kafka channel: transaction already ended")
	}
	c := t.c
	if len(t.puts) > 0 {
		if err := t.produce(ctx); err != nil {
			return err
		}
		c.counters.EventPutSuccess.Add(int64(len(t.puts)))
		clear(t.puts)
		t.puts = nil
	}
	if len(t.takes) > 0 {
		c.mu.Lock()
		for _, x := range t.takes {
			x.done = true
			x.ps.taken--
		}
		c.pruneOrphans()
		c.mu.Unlock()
		c.counters.EventTakeSuccess.Add(int64(len(t.takes)))
		t.takes = nil
		c.commitOffsets(nil)
	}
	t.ended = true
	return nil
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
		if k, ok := e.Headers[kafkaconf.KeyHeader]; ok {
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

func (t *tx) Rollback() error {
	if t.ended {
		return nil
	}
	t.ended = true
	c := t.c
	clear(t.puts)
	t.puts = nil
	if len(t.takes) == 0 {
		return nil
	}
	c.rollbacks.Add(1)
	c.mu.Lock()
	back := make([]*rec, 0, len(t.takes)+len(c.buf))
	for _, x := range t.takes {
		x.taken = false
		x.ps.taken--
		if !x.ps.revoked {
			back = append(back, x)
		}
	}
	c.buf = append(back, c.buf...)
	if len(back) > 0 {
		c.wake()
	}
	c.mu.Unlock()
	t.takes = nil
	return nil
}
