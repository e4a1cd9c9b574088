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
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/config"
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

// Durable implements flow.Durable: its events are in the Kafka topic: a stop or a crash keeps them for the next start.
func (c *Channel) Durable() bool { return true }

// Held is the group's lag as this member sees it plus the records it holds
// for open transactions: what the agent reports as kept at a stop.
func (c *Channel) Held() int { return int(c.size()) }

// Begin opens a transaction.
func (c *Channel) Begin() flow.Transaction { return &tx{c: c} }
