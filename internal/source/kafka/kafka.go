// Package kafkasource is Flume's Kafka source
// (org.apache.flume.source.kafka.KafkaSource) on franz-go: a consumer group
// member that puts what it polls into its channels and commits the offsets
// only after the channels committed, so a crash or a rebalance redelivers
// at most the batch in hand and loses nothing.
//
// Batches are adaptive: a poll returns what the client has fetched, up to
// batchSize, without waiting to fill; it waits (up to batchDurationMillis)
// only when nothing is there. Rebalances are held off while a batch is
// between the poll and its offset commit (kgo's BlockRebalanceOnPoll), so a
// partition never changes owner with a batch half done; a batch that a full
// channel holds back for longer than max.poll.interval.ms gets the member
// dropped from the group, and that batch (only) is delivered again by the
// partition's next owner.
//
// A topic deleted and created again under a running source (a new topic ID,
// or a cluster that restarted empty) makes its fetches fail with
// UNKNOWN_TOPIC_ID, which franz-go keeps returning until the topic is
// purged from the client: the source purges it and subscribes again, and
// reads the new topic from its start (its records were all written after
// the re-creation, whatever auto.offset.reset says; with kafka.topics.regex
// the client finds the new topic at its next metadata refresh,
// metadata.max.age.ms, as any new topic that matches). Records of the old
// topic that were not yet read are gone with it. Failing polls back off
// instead of spinning, and the source reports through Health when it cannot
// reach its brokers or topics for longer than healthGraceMillis.
package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kafkaconf"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
)

// Flume's defaults.
const (
	DefaultBatchSize     = 1000
	DefaultBatchDuration = 1000 * time.Millisecond
	DefaultGroup         = "flume"
	DefaultTopicHeader   = "topic"
	commitTimeout        = 10 * time.Second
)

// Source is the Kafka source. Build it with New.
type Source struct {
	env             flow.Env
	brokers         []string
	topics          []string
	regex           bool
	consumer        *kafkaconf.Consumer
	batchSize       int
	batchDur        time.Duration
	useFlumeFormat  bool
	setTopicHeader  bool
	topicHeader     string
	headerMap       []headerMapping // header.<event header> = <Kafka header>
	timestampHeader string          // gets the record's timestamp (ms) when set

	counters              *metrics.SourceCounters
	getTimer, commitTimer *atomic.Int64
	emptyCount            *atomic.Int64
	lag                   *kafkaconf.Lag
	log                   *slog.Logger
	throttle              *logthrottle.Throttle // single events that repeat (re-created topics, records not in the Flume format)
	commits, puts         *logthrottle.Streak   // failing offset commits; a channel refusing batches
	health                *kafkaconf.Health     // tells the source's outages, one streak each
	recreated             kafkaconf.Recreated

	mu        sync.Mutex
	cl        *kgo.Client
	cancel    context.CancelFunc
	done      chan struct{}
	probeDone chan struct{}
}

// New builds a Kafka source from its properties: kafka.bootstrap.servers
// (required), kafka.topics (a comma list) or kafka.topics.regex,
// kafka.consumer.group.id (flume), batchSize (1000), batchDurationMillis
// (1000), useFlumeEventFormat (false), setTopicHeader (true), topicHeader
// (topic), timestampHeader, header.<event header> = <Kafka header>, sluice's
// healthGraceMillis (30000), and kafka.consumer.* (see
// kafkaconf.ReadConsumer; the offset reset is Kafka's latest unless set).
// Flume 1.6's topic and groupId are read when the new names are not set.
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env, log: env.Log().With("source", env.Name), throttle: logthrottle.New(kafkaconf.LogEvery, 1)}
	s.brokers = kafkaconf.Brokers(p, "")
	kafkaconf.ReadZooKeeperKeys(p)
	legacyTopic := p.String("topic", "")
	regex := strings.TrimSpace(p.String("kafka.topics.regex", ""))
	topics := p.Split("kafka.topics", ",")
	switch {
	case regex != "":
		if len(topics) > 0 {
			p.Errorf("kafka.topics.regex", "set kafka.topics or kafka.topics.regex, not both")
		}
		if _, err := regexp.Compile(regex); err != nil {
			p.Errorf("kafka.topics.regex", "not a valid regular expression: %v", err)
		}
		s.topics, s.regex = []string{regex}, true
	case len(topics) > 0:
		s.topics = topics
	case legacyTopic != "":
		s.topics = []string{legacyTopic}
	default:
		p.Errorf("kafka.topics", "no topic to consume; set kafka.topics (a comma-separated list) or kafka.topics.regex")
	}
	group := p.String("groupId", DefaultGroup)
	s.consumer = kafkaconf.ReadConsumer(p, "kafka.consumer.", kafkaconf.ConsumerDefaults{Group: group, Reset: "latest", Env: kafkaconf.Env{Sys: env.Sys, Log: env.Log()}})
	s.batchSize = p.IntRange("batchSize", DefaultBatchSize, 1, math.MaxInt32)
	if s.consumer.MaxPoll > 0 {
		s.batchSize = min(s.batchSize, s.consumer.MaxPoll)
	}
	s.batchDur = time.Duration(p.IntRange("batchDurationMillis", int(DefaultBatchDuration/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	s.useFlumeFormat = p.Bool("useFlumeEventFormat", false)
	s.setTopicHeader = p.Bool("setTopicHeader", true)
	s.topicHeader = p.String("topicHeader", DefaultTopicHeader)
	s.timestampHeader = strings.TrimSpace(p.String("timestampHeader", ""))
	for _, k := range p.Keys("header.") {
		name, kafkaName := strings.TrimPrefix(k, "header."), strings.TrimSpace(p.String(k, ""))
		if name == "" || kafkaName == "" {
			p.Errorf(k, "write header.<event header> = <Kafka header name>, both not empty")
			continue
		}
		s.headerMap = append(s.headerMap, headerMapping{flume: name, kafka: kafkaName})
	}
	// Flume's PollableSource sleeps after an empty poll or a full channel;
	// sluice's poll waits up to batchDurationMillis for records instead, and a
	// full channel is retried sooner (see put), so events flow again sooner.
	for _, k := range []string{"backoffSleepIncrement", "maxBackoffSleep"} {
		p.Ignored(k, "the poll waits up to batchDurationMillis for records, and a full channel is retried after 50 ms doubling to 1 s")
	}
	s.health = kafkaconf.NewHealth(kafkaconf.ReadHealthGrace(p))
	s.health.Tell(s.log, "kafka source: cannot consume from Kafka; retrying (the records wait in Kafka)", "kafka source: consuming again")
	s.commits = &logthrottle.Streak{Log: s.log, Level: slog.LevelWarn,
		Failed:    "kafka source: offset commit failed; the batch will be delivered again after a restart or rebalance (unless its topic was deleted)",
		Recovered: "kafka source: offset commits succeed again"}
	s.puts = &logthrottle.Streak{Log: s.log, Level: slog.LevelWarn,
		Failed:    "kafka source: channel refused a batch; holding it and retrying",
		Recovered: "kafka source: the channel takes batches again"}

	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.getTimer = s.counters.Counter("KafkaEventGetTimer")
	s.commitTimer = s.counters.Counter("KafkaCommitTimer")
	s.emptyCount = s.counters.Counter("KafkaEmptyCount")
	env.Registry().Add(s.counters.Set)
	s.lag = kafkaconf.NewLag(env.Registry(), env.Name)
	return s, nil
}

// BatchSize reports batchSize, so the agent can check it against the
// channels' transactionCapacity.
func (s *Source) BatchSize() int { return s.batchSize }

// Health reports whether the source reaches its brokers and reads its
// topics (see flow.HealthReporter).
func (s *Source) Health() error { return s.health.Err() }

// Start joins the consumer group and polls in a goroutine that Stop ends.
// It does not wait for a broker.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		return fmt.Errorf("kafka source %s: already started", s.env.Name)
	}
	opts, err := s.consumer.Options(s.brokers)
	if err != nil {
		return fmt.Errorf("kafka source %s: %w", s.env.Name, err)
	}
	opts = append(opts,
		kgo.ConsumeTopics(s.topics...),
		kgo.BlockRebalanceOnPoll(),
		kgo.WithLogger(kafkaconf.Logger(s.log)),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			defer panics.Guard("kafka source " + s.env.Name + ": partitions revoked")
			s.lag.Forget(m)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			defer panics.Guard("kafka source " + s.env.Name + ": partitions lost")
			s.lag.Forget(m)
		}),
		kgo.AdjustFetchOffsetsFn(s.recreated.AdjustOffsets),
	)
	if s.regex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka source %s: %w", s.env.Name, err)
	}
	s.counters.Started()
	s.lag.Register()
	ctx, cancel := context.WithCancel(context.Background())
	s.cl, s.cancel, s.done, s.probeDone = cl, cancel, make(chan struct{}), make(chan struct{})
	done := s.done
	panics.Go("kafka source "+s.env.Name+": poller", func() { s.run(ctx, cl, p, done) })
	probe := &kafkaconf.Probe{Client: cl, Brokers: s.brokers, Health: s.health, Interval: kafkaconf.ProbeInterval(s.health.Grace())}
	if !s.regex {
		probe.Topics = s.topics
	}
	probeDone := s.probeDone
	panics.Go("kafka source "+s.env.Name+": broker probe", func() { defer close(probeDone); probe.Run(ctx) })
	return nil
}

// Stop ends polling, waits for the batch in hand (ctx bounds the wait: a
// batch not committed by then is delivered again later), and leaves the
// group.
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	cl, cancel, done, probeDone := s.cl, s.cancel, s.done, s.probeDone
	s.cl = nil
	s.mu.Unlock()
	if cl == nil {
		return nil
	}
	cancel()
	<-probeDone
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("kafka source %s: stop: %w", s.env.Name, ctx.Err())
	}
	cl.CloseAllowingRebalance()
	if err == nil {
		<-done
	}
	s.throttle.Flush()
	s.commits.Stop()
	s.puts.Stop()
	s.health.Stop()
	s.lag.Unregister()
	s.counters.Stopped()
	return err
}

func (s *Source) run(ctx context.Context, cl *kgo.Client, p flow.Processor, done chan struct{}) {
	defer close(done)
	events := make([]event.Event, 0, s.batchSize)
	// A poll that brings only errors is followed by a pause, growing while
	// they last: kgo returns a partition's error at once on every poll, so
	// polling again straight away would spin a core.
	stale := kafkaconf.FetchStale(s.health.Grace())
	retry := kafkaconf.FetchBackoff(s.health.Grace())
	failedPolls := 0
	for ctx.Err() == nil {
		t0 := time.Now()
		pctx, cancel := context.WithTimeout(ctx, s.batchDur)
		fs := cl.PollRecords(pctx, s.batchSize)
		cancel()
		s.getTimer.Add(time.Since(t0).Milliseconds())
		if ctx.Err() != nil || fs.IsClientClosed() {
			cl.AllowRebalance()
			return
		}
		var gone []string
		failed := false
		fs.EachError(func(t string, part int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			failed = true
			if kafkaconf.TopicGone(err) {
				// Not a failure to tell: forget, below, subscribes again at
				// once and says so.
				if !slices.Contains(gone, t) {
					gone = append(gone, t)
				}
				return
			}
			s.health.Fail("fetch "+t, kafkaconf.FetchError(t, part, err), stale)
		})
		s.lag.Observe(fs)
		recs := fs.Records()
		for i, r := range recs {
			if i == 0 {
				s.health.OK("fetch ") // records arrive: the consumer group works
			}
			if i == 0 || r.Topic != recs[i-1].Topic {
				s.health.OK("fetch " + r.Topic)
			}
		}
		if len(recs) > 0 {
			if !s.deliver(ctx, cl, p, recs, events) {
				cl.AllowRebalance()
				return // stopping: the offsets stay uncommitted, the batch comes again
			}
		} else {
			s.emptyCount.Add(1)
		}
		cl.AllowRebalance()
		if len(gone) > 0 {
			s.forget(cl, gone)
		}
		if !failed || len(recs) > 0 {
			failedPolls = 0
			continue
		}
		failedPolls++
		if !kafkaconf.Sleep(ctx, retry(failedPolls)) {
			return
		}
	}
}

// deliver puts a polled batch into the channels and commits its offsets;
// false means the source is stopping.
func (s *Source) deliver(ctx context.Context, cl *kgo.Client, p flow.Processor, recs []*kgo.Record, events []event.Event) bool {
	n := int64(len(recs))
	s.counters.EventReceived.Add(n)
	if !s.put(ctx, p, recs, events) {
		return false
	}
	s.counters.EventAccepted.Add(n)
	t1 := time.Now()
	// Not ctx: a Stop during the commit must not lose it (Stop waits).
	cctx, ccancel := context.WithTimeout(context.Background(), commitTimeout)
	err := cl.CommitRecords(cctx, recs...)
	ccancel()
	if err != nil {
		s.commits.Fail(err, "events", n)
	} else {
		s.commits.Ok()
	}
	s.commitTimer.Add(time.Since(t1).Milliseconds())
	return true
}

// forget drops the client's state of topics that were deleted (and perhaps
// created again under a new topic ID) and subscribes to them again, so the
// source goes on with the topics as they are now. franz-go keeps failing a
// topic whose ID changed until it is purged.
func (s *Source) forget(cl *kgo.Client, topics []string) {
	s.throttle.Log(s.log, slog.LevelWarn, "topic gone",
		"kafka source: a topic was deleted or re-created under the source (its topic ID changed); subscribing again and reading it from its start. Records of the old topic not yet read are gone with it",
		"topics", topics)
	s.recreated.Mark(topics...)
	cl.PurgeTopicsFromClient(topics...)
	// With a regex the client finds the topic again by itself.
	cl.AddConsumeTopics(topics...)
}

// put hands the records to the processor, retrying with backoff while the
// channels refuse them; false means the source is stopping.
func (s *Source) put(ctx context.Context, p flow.Processor, recs []*kgo.Record, events []event.Event) bool {
	wait := 50 * time.Millisecond
	for {
		// Built afresh for every attempt: interceptors change events in place.
		events = s.toEvents(recs, events[:0])
		err := p.Process(ctx, events)
		clear(events)
		if err == nil {
			s.puts.Ok()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.counters.ChannelWriteFail.Add(1)
		s.puts.Fail(err, "events", len(recs), "retry_in", wait.String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// toEvents turns records into Flume events with the headers Flume's Kafka
// source adds when absent: timestamp (the record's timestamp in ms, as
// Flume 1.11 sets it; Flume 1.9 and 1.10 used the receive time, which a
// record without a timestamp gets here), the topic header, partition and
// offset; key is set from the record's key.
func (s *Source) toEvents(recs []*kgo.Record, dst []event.Event) []event.Event {
	now := event.Now()
	nowMs := strconv.FormatInt(now/1e6, 10)
	for _, r := range recs {
		var e event.Event
		if s.useFlumeFormat {
			fe, err := kafkaconf.DecodeFlumeEvent(r.Value)
			if err != nil {
				s.counters.EventReadFail.Add(1)
				s.throttle.Log(s.log, slog.LevelWarn, "not flume", "kafka source: record is not in the Flume event format (useFlumeEventFormat = true); delivering its value as the body",
					"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				e.Body = r.Value
			} else {
				e = fe
			}
		} else {
			e.Body = r.Value
		}
		h := e.Headers
		if cap(h) < len(h)+5 {
			h = append(make(event.Headers, 0, len(h)+5), h...)
		}
		ts := nowMs
		if !r.Timestamp.IsZero() {
			ts = strconv.FormatInt(r.Timestamp.UnixMilli(), 10)
		}
		setIfAbsent(&h, "timestamp", ts)
		if s.timestampHeader != "" {
			h.Set(s.timestampHeader, ts)
		}
		for _, m := range s.headerMap {
			for _, rh := range r.Headers {
				if rh.Key == m.kafka {
					h.Set(m.flume, string(rh.Value)) // as Flume: set, not if absent; the last one wins
				}
			}
		}
		if s.setTopicHeader {
			setIfAbsent(&h, s.topicHeader, r.Topic)
		}
		setIfAbsent(&h, "partition", strconv.Itoa(int(r.Partition)))
		setIfAbsent(&h, "offset", strconv.FormatInt(r.Offset, 10))
		if r.Key != nil {
			h.Set("key", string(r.Key))
		}
		e.Headers = h
		e.ReceivedAt = now
		dst = append(dst, e)
	}
	return dst
}

// headerMapping copies a Kafka record header into an event header.
type headerMapping struct{ flume, kafka string }

func setIfAbsent(h *event.Headers, k, v string) {
	if !h.Has(k) {
		*h = append(*h, event.Header{Key: k, Value: v})
	}
}
