package config

import (
	"strings"
	"testing"
)

// As in Flume, an agent may lack sources (it drains its channels, say a file
// channel whose source was removed) or sinks (its sources fill a Kafka or
// durable channel); only one with neither is refused.
func TestAgentsMayLackSourcesOrSinks(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       string // a problem that must be reported, or "" for none
	}{
		{"sink only on kafka", "a1.channels = c1\na1.sinks = k1\na1.channels.c1.type = org.apache.flume.channel.kafka.KafkaChannel\na1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n", ""},
		{"source only on kafka", "a1.channels = c1\na1.sources = r1\na1.channels.c1.type = KAFKA\na1.sources.r1.type = seq\na1.sources.r1.channels = c1\n", ""},
		{"sink only on file", "a1.channels = c1\na1.sinks = k1\na1.channels.c1.type = file\na1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n", ""},
		{"source only on memory", "a1.channels = c1\na1.sources = r1\na1.channels.c1.type = memory\na1.sources.r1.type = seq\na1.sources.r1.channels = c1\n", ""},
		{"neither", "a1.channels = c1\na1.channels.c1.type = memory\n", "f.properties: a1.sources: the agent has neither sources nor sinks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := LoadReader("f.properties", strings.NewReader(tc.conf), "a1", Lookup{})
			switch {
			case tc.want == "" && (err != nil || len(a.Problems.Sorted()) > 0):
				t.Fatalf("unexpected problems: %v", a.Problems.Sorted())
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("problems %v, want %q", err, tc.want)
			}
		})
	}
}
