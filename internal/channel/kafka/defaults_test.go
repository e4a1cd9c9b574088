package kafkachannel

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
)

// TestFlumeDefaults builds the channel with only the required key (and with
// Flume 1.6's names, which Flume 1.11's KafkaChannel still translates) and
// checks the values Flume's KafkaChannel would use: the defaults of
// KafkaChannelConfiguration (topic flume-channel, group flume, acks all,
// auto.offset.reset earliest, pollTimeout 500 ms, parseAsFlumeEvent true),
// topic and groupId when kafka.topic and kafka.consumer.group.id are unset,
// and readSmallestOffset choosing earliest or latest when
// kafka.consumer.auto.offset.reset is unset.
func TestFlumeDefaults(t *testing.T) {
	tests := []struct {
		name                string
		props               map[string]string
		topic, group, reset string
	}{
		{"required keys only", nil, "flume-channel", "flume", "earliest"},
		{"legacy topic", map[string]string{"topic": "old"}, "old", "flume", "earliest"},
		{"kafka.topic wins", map[string]string{"topic": "old", "kafka.topic": "new"}, "new", "flume", "earliest"},
		{"legacy groupId", map[string]string{"groupId": "g1"}, "flume-channel", "g1", "earliest"},
		{"group.id wins", map[string]string{"groupId": "g1", "kafka.consumer.group.id": "g2"}, "flume-channel", "g2", "earliest"},
		{"readSmallestOffset false", map[string]string{"readSmallestOffset": "false"}, "flume-channel", "flume", "latest"},
		{"readSmallestOffset true", map[string]string{"readSmallestOffset": "true"}, "flume-channel", "flume", "earliest"},
		{"auto.offset.reset wins", map[string]string{"readSmallestOffset": "false", "kafka.consumer.auto.offset.reset": "earliest"}, "flume-channel", "flume", "earliest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]string{"kafka.bootstrap.servers": "127.0.0.1:9092"}
			for k, v := range tc.props {
				m[k] = v
			}
			p := config.FromMap("a1.channels.c1.", m)
			ch, err := New(flow.Env{Name: "c1", Type: "kafka", Logger: quiet}, p)
			if err != nil {
				t.Fatal(err)
			}
			p.Unused()
			if err := p.Problems().Err(); err != nil {
				t.Fatal(err)
			}
			c := ch.(*Channel)
			if c.topic != tc.topic || c.consumer.Group != tc.group || c.consumer.Reset != tc.reset {
				t.Errorf("topic %q, group %q, auto.offset.reset %q; want %q, %q, %q (Flume's)",
					c.topic, c.consumer.Group, c.consumer.Reset, tc.topic, tc.group, tc.reset)
			}
			if c.producer.Acks != "all" || c.pollTimeout != 500*time.Millisecond || !c.parse {
				t.Errorf("acks %q, pollTimeout %v, parseAsFlumeEvent %v; want all, 500ms, true (Flume's)",
					c.producer.Acks, c.pollTimeout, c.parse)
			}
		})
	}
}
