package kafkaconf

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
)

// LogEvery is how often a Kafka component repeats a log line about single
// events that keep coming (a topic re-created again and again, records not
// in the Flume format): the first goes out at once, then one line per
// interval with the count held back. Failure streaks are told by Health.
const LogEvery = 10 * time.Second

// Logger adapts slog to kgo's logger, at DEBUG only. kgo's warnings and
// errors during an outage ("unable to open connection to broker" twice a
// second, "group manage loop errored", "bumping error count on first
// stored batch") are the library's view of a failure the component tells
// itself, once per outage, through its Health (whose probe's error carries
// the dial error); and some read as permanent ("we do not adopt the new
// ID") where the component recovers in seconds and says how.
func Logger(l *slog.Logger) kgo.Logger { return kgoLogger{l} }

type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	if k.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo // kgo's own debug level is a firehose
	}
	return kgo.LogLevelNone
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	k.l.Log(context.Background(), slog.LevelDebug, "kafka client: "+msg, append(keyvals[:len(keyvals):len(keyvals)], "kgo_level", level.String())...)
}

// The Flume event format: a Kafka record's value holding one binary
// AvroFlumeEvent (headers and body), as Flume's Kafka sink writes with
// useFlumeEventFormat and its Kafka channel with parseAsFlumeEvent.

// AppendFlumeEvent appends e in the Flume event format to dst.
func AppendFlumeEvent(dst []byte, e *event.Event) []byte { return avrorpc.AppendFlumeEvent(dst, e) }

// DecodeFlumeEvent decodes a record value in the Flume event format; the
// event aliases value.
func DecodeFlumeEvent(value []byte) (event.Event, error) { return avrorpc.DecodeFlumeEvent(value) }

// Lag tracks the consumer lag of one component per partition: the high
// watermark a fetch reported minus the next offset the component will
// commit. It is exported to Prometheus as sluice_kafka_consumer_lag
// {agent, component, topic, partition} while the component runs.
type Lag struct {
	agent, component string
	reg              *metrics.Registry

	mu   sync.Mutex
	hw   map[tp]int64 // high watermark
	next map[tp]int64 // next offset to consume
}

type tp struct {
	topic     string
	partition int32
}

// NewLag returns the lag tracker of component.
func NewLag(reg *metrics.Registry, component string) *Lag {
	return &Lag{agent: reg.Agent, component: component, reg: reg, hw: map[tp]int64{}, next: map[tp]int64{}}
}

// Observe records what a poll returned: each partition's high watermark
// and the offset after its last record.
func (l *Lag) Observe(fs kgo.Fetches) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		k := tp{p.Topic, p.Partition}
		if p.HighWatermark >= 0 {
			l.hw[k] = p.HighWatermark
		}
		if n := len(p.Records); n > 0 {
			l.next[k] = p.Records[n-1].Offset + 1
		}
	})
}

// Forget drops partitions the component no longer owns.
func (l *Lag) Forget(revoked map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, ps := range revoked {
		for _, p := range ps {
			delete(l.hw, tp{t, p})
			delete(l.next, tp{t, p})
		}
	}
}

// ForgetTopic drops every partition of topic.
func (l *Lag) ForgetTopic(topic string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.hw {
		if k.topic == topic {
			delete(l.hw, k)
		}
	}
	for k := range l.next {
		if k.topic == topic {
			delete(l.next, k)
		}
	}
}

// Total is the lag summed over the partitions.
func (l *Lag) Total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sum int64
	for k, hw := range l.hw {
		if n, ok := l.next[k]; ok && hw > n {
			sum += hw - n
		}
	}
	return sum
}

var lagDesc = prometheus.NewDesc("sluice_kafka_consumer_lag",
	"Records in a Kafka partition after the last one the component consumed (high watermark minus next offset), per partition.",
	[]string{"agent", "component", "topic", "partition"}, nil)

// Describe sends nothing: the collector is unchecked, since partitions come and go.
func (l *Lag) Describe(chan<- *prometheus.Desc) {}

// Collect sends the lag of every partition seen.
func (l *Lag) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, hw := range l.hw {
		n, ok := l.next[k]
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(max(hw-n, 0)),
			l.agent, l.component, k.topic, strconv.Itoa(int(k.partition)))
	}
}

// Register adds the lag to the agent's Prometheus registry; Unregister
// removes it (on Stop, so a reload can register the new component's).
func (l *Lag) Register() { _ = l.reg.Prometheus().Register(l) }

// Unregister removes the lag from the Prometheus registry.
func (l *Lag) Unregister() { l.reg.Prometheus().Unregister(l) }
