package essink_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	essink "github.com/sluicehq/sluice/internal/sink/elasticsearch"
)

// TestAgentWithFlumeClassName runs a whole agent whose sink is configured
// as in Flume (its class name, hostNames, indexName, indexType,
// clusterName) plus the VictoriaLogs parameters, and checks that every event
// of a seq source arrives, in @message: Flume's default serializer,
// LogStash, shapes the documents.
func TestAgentWithFlumeClassName(t *testing.T) {
	base := essink.StartVictoriaLogs(t)
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
	file := filepath.Join(t.TempDir(), "es.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Options{File: file, Name: "a1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())

	deadline := time.Now().Add(15 * time.Second)
	for {
		rows := essink.VLQuery(t, base, "agent_test:=1")
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
