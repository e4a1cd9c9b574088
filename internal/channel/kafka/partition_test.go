package kafkachannel

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/kafkaconf"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func ev(body string, headers ...string) event.Event {
	e := event.Event{Body: []byte(body), Headers: event.HeadersOf(map[string]string{})}
	for i := 0; i+1 < len(headers); i += 2 {
		e.Headers.Set(headers[i], headers[i+1])
	}
	return e
}

// As Flume's KafkaChannel: the "key" header is the record key, the
// partitionIdHeader names the partition, defaultPartitionId is the
// partition of the rest; a header that is not a number refuses the put
// (Flume: "Non integer partition id specified"), and so does a partition the
// topic lacks, without making the channel unhealthy.
func TestChannelKeyAndPartitions(t *testing.T) {
	kc := kafkatest.New(t, 1, 3, "parts", "keyed")
	ch := build(t, kc, "parts", "g1", map[string]string{"partitionIdHeader": "pid", "defaultPartitionId": "1"})
	startCh(t, ch)
	defer ch.Stop(context.Background())
	if err := testutil.PutCommit(ch, []event.Event{
		ev("to2", "pid", "2", "key", "k1"),
		ev("default"),
		ev("to0", "pid", "0"),
		ev("keyed-default", "key", "a"),
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		partition int32
		key       string
	}{"to2": {2, "k1"}, "default": {1, ""}, "to0": {0, ""}, "keyed-default": {1, "a"}}
	for _, r := range kafkatest.ReadAll(t, kc.Addrs, "parts", 4, 5*time.Second) {
		body := string(mustDecode(t, r.Value).Body)
		w, ok := want[body]
		if !ok || r.Partition != w.partition || string(r.Key) != w.key {
			t.Errorf("event %q in partition %d with key %q, want partition %d key %q", body, r.Partition, r.Key, w.partition, w.key)
		}
		delete(want, body)
	}
	if len(want) > 0 {
		t.Fatalf("not in the topic: %v", want)
	}

	tx := ch.Begin()
	err := tx.Put([]event.Event{ev("bad", "pid", "two")})
	_ = tx.Rollback()
	if err == nil || !strings.Contains(err.Error(), `pid (partitionIdHeader) = "two"`) {
		t.Fatalf("put with a header that is not a number: %v, want it refused naming the header", err)
	}
	err = testutil.PutCommit(ch, []event.Event{ev("nowhere", "pid", "7")})
	if err == nil || !strings.Contains(err.Error(), "does not have") {
		t.Fatalf("put into partition 7 of a 3-partition topic: %v, want it refused", err)
	}
	if err := ch.Health(); err != nil {
		t.Fatalf("a refused partition made the channel unhealthy: %v", err)
	}
	if err := testutil.PutCommit(ch, []event.Event{ev("after")}); err != nil {
		t.Fatalf("a good put after the refused ones: %v", err)
	}

	// Without either setting: Kafka's partitioning, so events of one key
	// share a partition.
	keyed := build(t, kc, "keyed", "g2", nil)
	startCh(t, keyed)
	defer keyed.Stop(context.Background())
	var evs []event.Event
	for range 20 {
		evs = append(evs, ev("x", "key", "same"))
	}
	if err := testutil.PutCommit(keyed, evs); err != nil {
		t.Fatal(err)
	}
	parts := map[int32]int{}
	for _, r := range kafkatest.ReadAll(t, kc.Addrs, "keyed", 20, 5*time.Second) {
		if string(r.Key) != "same" {
			t.Fatalf("record key %q, want the key header", r.Key)
		}
		parts[r.Partition]++
	}
	if len(parts) != 1 {
		t.Fatalf("one key spread over partitions %v", parts)
	}
}

func mustDecode(t *testing.T, v []byte) event.Event {
	t.Helper()
	e, err := kafkaconf.DecodeFlumeEvent(v)
	if err != nil {
		t.Fatalf("record value is not a Flume event: %v", err)
	}
	return e
}
