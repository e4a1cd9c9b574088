package thriftsink_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
	"github.com/sluicehq/sluice/internal/thriftrpc/thrifttest"
)

// TestAgentThriftHop runs an agent configured as in Flume (the thrift
// source and sink by their class names, the sink speaking binary to a
// binary server) between two Python Thrift peers: events a Python client
// sends in compact arrive, with their headers, at a Python server.
func TestAgentThriftHop(t *testing.T) {
	peer := thrifttest.New(t)
	srv := peer.Serve(t, thrifttest.ServerOptions{Protocol: "binary"})
	port := testutil.FreePort(t)
	_, sinkPort, _ := net.SplitHostPort(srv.Addr)
	conf := fmt.Sprintf(`
a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = org.apache.flume.source.ThriftSource
a1.sources.r1.channels = c1
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.threads = 4
a1.channels.c1.type = memory
a1.channels.c1.capacity = 10000
a1.channels.c1.transactionCapacity = 1000
a1.sinks.k1.type = org.apache.flume.sink.ThriftSink
a1.sinks.k1.channel = c1
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = %s
a1.sinks.k1.protocol = binary
a1.sinks.k1.batch-size = 100
`, port, sinkPort)
	agenttest.StartConf(t, conf)

	var batch []event.Event
	for i := range 300 {
		batch = append(batch, event.Event{Headers: event.HeadersOf(map[string]string{"seq": fmt.Sprint(i), "host": "web-1"}), Body: []byte(fmt.Sprintf("line %d", i))})
	}
	statuses := peer.Send(t, fmt.Sprintf("127.0.0.1:%d", port), "compact", "", []thrifttest.Call{
		{Method: "appendBatch", Events: batch[:200]},
		{Method: "append", Events: batch[200:201]},
		{Method: "appendBatch", Events: batch[201:]},
	})
	if fmt.Sprint(statuses) != "[OK OK OK]" {
		t.Fatalf("replies %v", statuses)
	}
	var got []thrifttest.Received
	if !testutil.Eventually(func() bool { got = srv.Events(); return len(got) >= len(batch) }, 10*time.Second) {
		t.Fatalf("the server took %d of %d events", len(got), len(batch))
	}
	if len(got) != len(batch) {
		t.Fatalf("the server took %d events, want %d", len(got), len(batch))
	}
	for i, e := range batch {
		g := got[i]
		if !bytes.Equal(g.Body, e.Body) || g.Headers.Value("seq") != e.Headers.Value("seq") || g.Headers.Value("host") != "web-1" || len(g.Headers) != 2 {
			t.Fatalf("event %d: %q %v, want %q %v", i, g.Body, g.Headers, e.Body, e.Headers)
		}
	}
}
