// Package kafkasink is Flume's Kafka sink (org.apache.flume.sink.kafka.KafkaSink)
// on franz-go: it takes a batch from its channel, produces every event as a
// Kafka record and commits the take only after Kafka acknowledged every
// record of the batch (with the configured acks); any failure rolls the
// whole batch back into the channel (at-least-once).
//
// Like Flume's, the sink flushes at the end of each batch, so linger.ms
// never delays a batch: it only matters when several batches are in the
// producer at once, which one sink does not do. While the brokers are
// unreachable a batch waits (up to delivery.timeout.ms) and is sent as soon
// as a broker answers again; meanwhile the channel fills and its sources
// push back.
//
// A topic deleted and created again (a new topic ID, or a cluster that
// restarted empty) fails the batch in hand with UNKNOWN_TOPIC_ID: the sink
// then drops the client's state of that topic and produces the failed
// records again at once, to the topic as it is now; if that fails too (the
// topic is missing), the batch goes back into the channel and is retried
// after the runner's backoff. Records the old topic had acknowledged are gone with it (deleting
// a topic is the operator's act); nothing the channel still holds is lost.
// The sink reports through Health when it cannot reach its brokers, or
// deliver, for longer than healthGraceMillis.
package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"sort"
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
	DefaultTopic     = "default-flume-topic"
	DefaultBatchSize = 100
	DefaultTopicHdr  = "topic"
	KeyHeader        = kafkaconf.KeyHeader
)

// Options are the sink's settings besides the producer's.
type Options struct {
	Brokers             []string
	Topic               string // may hold %{header} escapes
	AllowTopicOverride  bool
	TopicHeader         string
	UseFlumeEventFormat bool
	DefaultPartition    int // -1: none
	PartitionHeader     string
	TimestampHeader     string
	HeaderMap           map[string]string // Flume header -> Kafka record header
	// HealthGrace is how long the sink may fail to reach its brokers or
	// to deliver before Health reports it (healthGraceMillis).
	HealthGrace time.Duration
}

// Writer produces batches to Kafka for a flow.BatchSink.
type Writer struct {
	name     string // the sink's, for the log line of a panic
	opt      Options
	producer *kafkaconf.Producer
	topic    topicTemplate
	log      *slog.Logger
	send     *atomic.Int64 // KafkaEventSendTimer, ms
	rollback *atomic.Int64 // RollbackCount

	cl        *kgo.Client
	probeStop context.CancelFunc
	probeDone chan struct{}
	recs      []kgo.Record
	recsBad   bool // a record of recs may still be in the client
	values    []byte

	health   *kafkaconf.Health     // tells the sink's outages, one streak each
	throttle *logthrottle.Throttle // re-created topics, which may repeat
}

// Sink is the Kafka sink: the shared batch loop over a Writer, which also
// reports the Writer's health.
type Sink struct {
	*flow.BatchSink
	w *Writer
}

// Health reports whether the sink reaches its brokers and delivers (see
// flow.HealthReporter).
func (s *Sink) Health() error { return s.w.Health() }

// New builds a Kafka sink from its properties (see the package comment of
// kafkaconf for kafka.producer.*): kafka.bootstrap.servers (required),
// kafka.topic (default-flume-topic; %{header} escapes), flumeBatchSize
// (100), useFlumeEventFormat (false), allowTopicOverride (true),
// topicHeader (topic), partitionIdHeader, defaultPartitionId,
// timestampHeader, header.<flume header> = <Kafka header> and sluice's
// healthGraceMillis (30000). Flume 1.6's
// brokerList, topic, batchSize and requiredAcks are read when the new names
// are not set.
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	opt := Options{DefaultPartition: -1}
	opt.Brokers = kafkaconf.Brokers(p, "brokerList")
	opt.Topic = p.String("topic", DefaultTopic)
	opt.Topic = strings.TrimSpace(p.String("kafka.topic", opt.Topic))
	batch := p.IntRange("batchSize", DefaultBatchSize, 1, math.MaxInt32)
	batch = p.IntRange("flumeBatchSize", batch, 1, math.MaxInt32)
	acks := p.String("requiredAcks", "1")
	producer := kafkaconf.ReadProducer(p, "kafka.producer.", kafkaconf.ProducerDefaults{Acks: acks, Env: kafkaconf.Env{Sys: env.Sys, Log: env.Log()}})
	opt.UseFlumeEventFormat = p.Bool("useFlumeEventFormat", false)
	opt.AllowTopicOverride = p.Bool("allowTopicOverride", true)
	opt.TopicHeader = p.String("topicHeader", DefaultTopicHdr)
	opt.PartitionHeader = p.String("partitionIdHeader", "")
	if p.Has("defaultPartitionId") {
		opt.DefaultPartition = p.IntRange("defaultPartitionId", 0, 0, math.MaxInt32)
	}
	opt.TimestampHeader = p.String("timestampHeader", "")
	opt.HealthGrace = kafkaconf.ReadHealthGrace(p)
	for _, k := range p.Keys("header.") {
		name := strings.TrimPrefix(k, "header.")
		v := strings.TrimSpace(p.String(k, ""))
		if v == "" {
			p.Errorf(k, "the Kafka header name is empty; write header.%s = <Kafka header name>", name)
			continue
		}
		if opt.HeaderMap == nil {
			opt.HeaderMap = map[string]string{}
		}
		opt.HeaderMap[name] = v
	}
	tt, err := parseTopic(opt.Topic)
	if err != nil {
		p.Errorf("kafka.topic", "%v", err)
	}

	c := metrics.NewSinkCounters(env.Name, env.Type)
	w := newWriter(opt, producer, tt, env.Log().With("sink", env.Name))
	w.name = env.Name
	w.send, w.rollback = c.Counter("KafkaEventSendTimer"), c.Counter("RollbackCount")
	env.Registry().Add(c.Set)
	return &Sink{BatchSink: flow.NewBatchSink(env, w, batch, c), w: w}, nil
}

func newWriter(opt Options, producer *kafkaconf.Producer, tt topicTemplate, log *slog.Logger) *Writer {
	if opt.HealthGrace <= 0 {
		opt.HealthGrace = kafkaconf.DefaultHealthGrace
	}
	w := &Writer{
		opt: opt, producer: producer, topic: tt, log: log,
		send: new(atomic.Int64), rollback: new(atomic.Int64),
		health:   kafkaconf.NewHealth(opt.HealthGrace),
		throttle: logthrottle.New(kafkaconf.LogEvery, 1),
	}
	w.health.Tell(log, "kafka sink: cannot deliver to Kafka; the events stay in the channel and are sent again", "kafka sink: delivering again")
	return w
}

// Health returns nil unless, for longer than the grace period, no broker
// answered or no batch was acknowledged, and then why.
func (w *Writer) Health() error { return w.health.Err() }

// Start builds the Kafka client. It does not wait for a broker: the first
// batch connects, and waits while none answers.
func (w *Writer) Start(context.Context) error {
	opts, err := w.producer.Options(w.opt.Brokers)
	if err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	opts = append(opts, kgo.WithLogger(kafkaconf.Logger(w.log)), kgo.RecordPartitioner(kafkaconf.Partitioner{Wrap: true}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	w.cl = cl
	// The probe tells an idle sink (or one whose batch waits for a dead
	// broker) whether Kafka answers.
	ctx, cancel := context.WithCancel(context.Background())
	w.probeStop, w.probeDone = cancel, make(chan struct{})
	probe := &kafkaconf.Probe{Client: cl, Brokers: w.opt.Brokers, Health: w.health, Interval: kafkaconf.ProbeInterval(w.opt.HealthGrace)}
	probeDone := w.probeDone
	panics.Go("kafka sink "+w.name+": broker probe", func() { defer close(probeDone); probe.Run(ctx) })
	return nil
}

// Stop closes the client; records still buffered fail.
func (w *Writer) Stop(context.Context) error {
	if w.cl != nil {
		w.probeStop()
		<-w.probeDone
		w.cl.Close()
		w.cl = nil
	}
	w.throttle.Flush()
	w.health.Stop()
	return nil
}

// Write produces events and returns nil only when Kafka acknowledged every
// one of them.
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	if w.cl == nil {
		return errors.New("kafka sink: not started")
	}
	start := time.Now()
	n := len(events)
	if cap(w.recs) < n || w.recsBad {
		w.recs = make([]kgo.Record, n)
		w.recsBad = false
	}
	recs := w.recs[:n]
	if w.opt.UseFlumeEventFormat {
		w.values = w.values[:0]
	}
	var manual context.Context
	dctx, dcancel := context.WithTimeout(ctx, w.producer.DeliveryTimeout)
	defer dcancel()
	bctx, cancel := context.WithTimeout(dctx, max(w.producer.MaxBlock, time.Millisecond))
	defer cancel()
	// Encode first, so the values slab does not move under records in flight.
	var offs []int
	if w.opt.UseFlumeEventFormat {
		offs = make([]int, n+1)
		for i := range events {
			w.values = kafkaconf.AppendFlumeEvent(w.values, &events[i])
			offs[i+1] = len(w.values)
		}
	}
	pending := make([]*kgo.Record, n)
	for i := range events {
		e := &events[i]
		r := &recs[i]
		*r = kgo.Record{Topic: w.topicOf(e), Context: dctx}
		if w.opt.UseFlumeEventFormat {
			r.Value = w.values[offs[i]:offs[i+1]:offs[i+1]]
		} else {
			r.Value = e.Body
		}
		if k, ok := e.Headers.Get(KeyHeader); ok {
			r.Key = []byte(k)
		}
		if p, ok := w.partitionOf(e); ok {
			if manual == nil {
				manual = kafkaconf.WithManualPartition(dctx)
			}
			r.Partition, r.Context = int32(p), manual
		}
		if w.opt.TimestampHeader != "" {
			if ts, err := strconv.ParseInt(e.Headers.Value(w.opt.TimestampHeader), 10, 64); err == nil {
				r.Timestamp = time.UnixMilli(ts)
			}
		}
		for fh, kh := range w.opt.HeaderMap {
			if v, ok := e.Headers.Get(fh); ok {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: kh, Value: []byte(v)})
			}
		}
		pending[i] = r
	}
	for attempt := 0; ; attempt++ {
		res, ok := w.produce(ctx, dctx, bctx, pending)
		if !ok {
			// Records not yet sent fail with the context; records in
			// flight may still be written (a retry then duplicates them).
			w.recsBad = true // promises may still write to recs
			w.rollback.Add(1)
			if ctx.Err() != nil {
				return fmt.Errorf("kafka sink: stopped while waiting for acknowledgements: %w", ctx.Err())
			}
			//nolint:staticcheck // ST1005: "Kafka" is a name; /healthz shows the text as it is
			w.health.Fail("delivery", fmt.Errorf("Kafka does not acknowledge batches within delivery.timeout.ms (%v)", w.producer.DeliveryTimeout), 0)
			// Told by the health streak: the runner does not log it again.
			return logthrottle.AsReported(fmt.Errorf("kafka sink: batch of %d not acknowledged within delivery.timeout.ms (%v)", n, w.producer.DeliveryTimeout))
		}
		if res.err == nil {
			break
		}
		if len(res.gone) > 0 {
			w.forget(res.gone, res.err)
			// Every record that failed failed on a stale topic ID:
			// with the topic purged, they go to the topic as it is now,
			// at once rather than after the runner's backoff.
			if attempt == 0 && !res.other {
				pending = res.failed
				continue
			}
		}
		w.rollback.Add(1)
		//nolint:staticcheck // ST1005: "Kafka" is a name; /healthz shows the text as it is
		w.health.Fail("delivery", fmt.Errorf("Kafka refuses batches: %w", res.err), 0)
		return logthrottle.AsReported(fmt.Errorf("kafka sink: batch of %d not acknowledged: %w", n, res.err))
	}
	w.send.Add(time.Since(start).Milliseconds())
	w.health.OK("delivery")
	return nil
}

// produced is what became of the records of one produce call.
type produced struct {
	err    error // the first failure
	failed []*kgo.Record
	gone   []string // topics whose records failed on a stale topic ID
	other  bool     // a record failed for another reason
}

// produce hands recs to the client and waits for every promise; false
// means dctx ended first (some promises may still run).
func (w *Writer) produce(ctx, dctx, bctx context.Context, recs []*kgo.Record) (produced, bool) {
	var (
		mu  sync.Mutex
		res produced
		wg  sync.WaitGroup
	)
	guard := "kafka sink " + w.name + ": produce result"
	promise := func(r *kgo.Record, err error) { // called by the client's goroutines
		defer panics.Guard(guard)
		if err != nil {
			mu.Lock()
			if res.err == nil {
				res.err = fmt.Errorf("topic %s partition %d: %w", r.Topic, r.Partition, err)
			}
			res.failed = append(res.failed, r)
			if !kafkaconf.TopicGone(err) {
				res.other = true
			} else if !slices.Contains(res.gone, r.Topic) {
				res.gone = append(res.gone, r.Topic)
			}
			mu.Unlock()
		}
		wg.Done()
	}
	wg.Add(len(recs))
	for _, r := range recs {
		w.cl.Produce(bctx, r, promise)
	}
	if w.producer.Linger > 0 {
		_ = w.cl.Flush(ctx) // Flume flushes each batch; a ctx error shows below
	}
	done := make(chan struct{})
	panics.Go("kafka sink "+w.name+": send", func() { wg.Wait(); close(done) })
	select {
	case <-done:
	case <-dctx.Done():
		return produced{}, false
	}
	mu.Lock()
	defer mu.Unlock()
	return res, true
}

// forget drops the client's state of topics that were deleted (and perhaps
// created again under a new ID): franz-go keeps failing a topic whose ID
// changed until it is purged, and produces to the topic as it is now once
// it is. Every promise of the batch has returned, so none of its records is
// still in the client.
func (w *Writer) forget(topics []string, err error) {
	sort.Strings(topics)
	w.throttle.Log(w.log, slog.LevelWarn, "topic gone",
		"kafka sink: a topic was deleted or re-created under the sink (its topic ID changed); sending the batch to the topic as it is now (it stays in the channel until acknowledged). Records the old topic held are gone with it",
		"topics", topics, "err", err)
	w.cl.PurgeTopicsFromProducing(topics...)
}

// topicOf is the topic header (when allowed and present) or kafka.topic
// with its escapes replaced.
func (w *Writer) topicOf(e *event.Event) string {
	if w.opt.AllowTopicOverride {
		if t, ok := e.Headers.Get(w.opt.TopicHeader); ok && t != "" {
			return t
		}
	}
	return w.topic.expand(e.Headers)
}

// partitionOf is the partition from partitionIdHeader, else
// defaultPartitionId. A header that is not a number is ignored (the event
// is partitioned as if it had none) rather than blocking the channel, and
// logged.
func (w *Writer) partitionOf(e *event.Event) (int, bool) {
	if w.opt.PartitionHeader != "" {
		if v, ok := e.Headers.Get(w.opt.PartitionHeader); ok {
			p, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil && p >= 0 {
				return p, true
			}
			w.log.Warn("kafka sink: partition header is not a partition number; using the default partitioning",
				"header", w.opt.PartitionHeader, "value", v)
		}
	}
	if w.opt.DefaultPartition >= 0 {
		return w.opt.DefaultPartition, true
	}
	return 0, false
}

// topicTemplate is kafka.topic split into literal parts and %{header}
// references.
type topicTemplate struct {
	parts []topicPart
	fixed string // when there is no reference
}

type topicPart struct {
	text   string
	header bool
}

var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]*$`)

func parseTopic(s string) (topicTemplate, error) {
	var t topicTemplate
	if s == "" {
		return t, errors.New("the topic is empty")
	}
	rest := s
	for rest != "" {
		i := strings.Index(rest, "%{")
		if i < 0 {
			t.parts = append(t.parts, topicPart{text: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, topicPart{text: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return t, fmt.Errorf("%q has an unterminated %%{ escape; write %%{header}", s)
		}
		name := rest[i+2 : i+j]
		if name == "" {
			return t, fmt.Errorf("%q has an empty %%{} escape; write %%{header}", s)
		}
		t.parts = append(t.parts, topicPart{text: name, header: true})
		rest = rest[i+j+1:]
	}
	for _, p := range t.parts {
		if !p.header && !legalTopic.MatchString(p.text) {
			return t, fmt.Errorf("%q is not a valid Kafka topic: topics use only letters, digits, '.', '_' and '-'; only %%{header} escapes are replaced", s)
		}
	}
	if len(t.parts) == 1 && !t.parts[0].header {
		t.fixed = t.parts[0].text
	}
	return t, nil
}

// expand replaces each %{header} with the header's value ("" when absent,
// as Flume does).
func (t topicTemplate) expand(h event.Headers) string {
	if t.fixed != "" {
		return t.fixed
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.header {
			b.WriteString(h.Value(p.text))
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}
