package elasticsearchsink_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	elasticsearchsink "github.com/sluicehq/sluice/internal/sink/elasticsearch"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// TestAgentWithFlumeClassName runs a whole agent whose sink is configured
// as in Flume (its class name, hostNames, indexName, indexType,
// clusterName) plus the VictoriaLogs parameters, and checks that every event
// of a seq source arrives, in @message: Flume's default serializer,
// LogStash, shapes the documents.
func TestAgentWithFlumeClassName(t *testing.T) {
	base := elasticsearchsink.StartVictoriaLogs(t)
	const n = 500
	conf := fmt.Sprintf(`
a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = seq
a1.sources.r1.totalEvents = %d
a1.sources.r1.batchSize = 50
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 10000
a1.channels.c1.transactionCapacity = 1000
a1.sinks.k1.type = org.apache.flume.sink.elasticsearch.ElasticSearchSink
a1.sinks.k1.channel = c1
a1.sinks.k1.hostNames = %s/insert/elasticsearch
a1.sinks.k1.indexName = foo_index
a1.sinks.k1.indexType = bar_type
a1.sinks.k1.clusterName = foobar_cluster
a1.sinks.k1.batchSize = 200
a1.sinks.k1.query._msg_field = @message
a1.sinks.k1.query.extra_fields = agent_test=1
`, n, base)
	agenttest.StartConf(t, conf)

	deadline := time.Now().Add(15 * time.Second)
	for {
		rows := elasticsearchsink.VLQuery(t, base, "agent_test:=1")
		if len(rows) == n {
			seen := map[string]bool{}
			for _, r := range rows {
				seen[r["_msg"]] = true
			}
			for i := range n {
				if !seen[strconv.Itoa(i)] {
					t.Fatalf("event %d missing", i)
				}
			}
			return
		}
		if len(rows) > n || time.Now().After(deadline) {
			t.Fatalf("VictoriaLogs holds %d events, want %d", len(rows), n)
		}
		time.Sleep(50 * time.Millisecond) // polling: VictoriaLogs has no notification
	}
}
