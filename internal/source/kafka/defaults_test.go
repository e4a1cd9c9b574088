package kafkasource

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
)

// TestFlumeDefaults builds the source with only the required keys and checks
// the values of Flume 1.11's KafkaSource: batchSize 1000, batchDurationMillis
// 1000, group flume, Kafka's auto.offset.reset (latest), setTopicHeader true,
// topicHeader topic, useFlumeEventFormat false; Flume's PollableSource keys
// backoffSleepIncrement and maxBackoffSleep load without a warning; and the
// timestamp header is the record's timestamp (message.timestamp() in Flume
// 1.11), not the time sluice read it.
func TestFlumeDefaults(t *testing.T) {
	p := config.FromMap("a1.sources.r1.", map[string]string{
		"kafka.bootstrap.servers": "127.0.0.1:9092",
		"kafka.topics":            "t",
		"backoffSleepIncrement":   "1000",
		"maxBackoffSleep":         "5000",
	})
	src, err := New(flow.Env{Name: "r1", Type: "kafka", Logger: quiet}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatalf("Flume's keys gave problems: %v", err)
	}
	s := src.(*Source)
	got := []struct {
		key       string
		got, want any
	}{
		{"batchSize", s.batchSize, 1000},
		{"batchDurationMillis", s.batchDur, 1000 * time.Millisecond},
		{"kafka.consumer.group.id", s.consumer.Group, "flume"},
		{"kafka.consumer.auto.offset.reset", s.consumer.Reset, "latest"},
		{"setTopicHeader", s.setTopicHeader, true},
		{"topicHeader", s.topicHeader, "topic"},
		{"useFlumeEventFormat", s.useFlumeFormat, false},
	}
	for _, g := range got {
		if g.got != g.want {
			t.Errorf("%s = %v, want %v (Flume's)", g.key, g.got, g.want)
		}
	}

	produced := time.Date(2024, 5, 6, 7, 8, 9, 123e6, time.UTC)
	evs := s.toEvents([]*kgo.Record{
		{Topic: "t", Partition: 2, Offset: 7, Timestamp: produced, Value: []byte("a")},
		{Topic: "t", Partition: 2, Offset: 8, Value: []byte("b")}, // no timestamp: the receive time
	}, nil)
	if want := strconv.FormatInt(produced.UnixMilli(), 10); evs[0].Headers.Value("timestamp") != want {
		t.Errorf("timestamp header %q, want the record's timestamp %s", evs[0].Headers.Value("timestamp"), want)
	}
	if ms, err := strconv.ParseInt(evs[1].Headers.Value("timestamp"), 10, 64); err != nil || time.Since(time.UnixMilli(ms)) > time.Minute {
		t.Errorf("timestamp header of a record without one %q, want the receive time", evs[1].Headers.Value("timestamp"))
	}
	if h := evs[0].Headers; h.Value("topic") != "t" || h.Value("partition") != "2" || h.Value("offset") != "7" {
		t.Errorf("headers %v, want topic t, partition 2, offset 7", h)
	}
}

// TestHeaderMapping checks the User Guide's header.<flume header> = <Kafka
// header>: the Kafka header's value (the last one when it repeats) is set on
// the event, replacing a header the event had, and a missing Kafka header
// sets nothing; and timestampHeader, which gets the record's timestamp.
func TestHeaderMapping(t *testing.T) {
	p := config.FromMap("a1.sources.r1.", map[string]string{
		"kafka.bootstrap.servers": "127.0.0.1:9092",
		"kafka.topics":            "t",
		"header.trace":            "trace-id",
		"header.timestamp":        "produced-at",
		"header.absent":           "nope",
		"timestampHeader":         "kafka.ts",
	})
	src, err := New(flow.Env{Name: "r1", Type: "kafka", Logger: quiet}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	evs := src.(*Source).toEvents([]*kgo.Record{{Topic: "t", Value: []byte("a"), Timestamp: time.UnixMilli(5),
		Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("x1")}, {Key: "trace-id", Value: []byte("x2")}, {Key: "produced-at", Value: []byte("42")}}}}, nil)
	h := evs[0].Headers
	if h.Value("trace") != "x2" || h.Value("timestamp") != "42" || h.Value("kafka.ts") != "5" {
		t.Errorf("headers %v, want trace x2 (the last trace-id), timestamp 42 (from produced-at) and kafka.ts 5 (timestampHeader)", h)
	}
	if _, ok := h.Get("absent"); ok {
		t.Errorf("header absent set (%q) though the record has no nope header", h.Value("absent"))
	}
}
