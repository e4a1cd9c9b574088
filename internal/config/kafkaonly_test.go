package config

import (
	"strings"
	"testing"
)

// An agent whose channels are all Kafka channels may lack sources or sinks
// (events arrive or leave through Kafka); any other agent needs both.
func TestKafkaChannelAgentsMayLackSourcesOrSinks(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       string // a problem that must be reported, or "" for none
	}{
		{"sink only on kafka", "a1.channels = c1\na1.sinks = k1\na1.channels.c1.type = org.apache.flume.channel.kafka.KafkaChannel\na1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n", ""},
		{"source only on kafka", "a1.channels = c1\na1.sources = r1\na1.channels.c1.type = KAFKA\na1.sources.r1.type = seq\na1.sources.r1.channels = c1\n", ""},
		{"sink only on memory", "a1.channels = c1\na1.sinks = k1\na1.channels.c1.type = memory\na1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n", "a1.sources: the agent has no sources"},
		{"source only on memory", "a1.channels = c1\na1.sources = r1\na1.channels.c1.type = memory\na1.sources.r1.type = seq\na1.sources.r1.channels = c1\n", "a1.sinks: the agent has no sinks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadReader("f.properties", strings.NewReader(tc.conf), "a1", Lookup{})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected problems: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("problems %v, want %q", err, tc.want)
			}
		})
	}
}
