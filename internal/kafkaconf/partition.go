package kafkaconf

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KeyHeader is the event header whose value becomes the Kafka record key, in
// Flume's Kafka sink and Kafka channel alike.
const KeyHeader = "key"

// manualKey marks a record's context when the record carries its own
// partition (Flume's partitionIdHeader or defaultPartitionId).
type manualKey struct{}

// WithManualPartition returns a context that makes Partitioner send a
// record produced with it to the record's own Partition.
func WithManualPartition(ctx context.Context) context.Context {
	return context.WithValue(ctx, manualKey{}, true)
}

func isManual(r *kgo.Record) bool { return r.Context != nil && r.Context.Value(manualKey{}) != nil }

// Partitioner sends records marked with WithManualPartition to their own
// Partition, and the rest through Kafka's default partitioning: murmur2 of
// the key, as Java's producer, so keyed records land where a Flume agent
// would put them; sticky batches without a key.
//
// A manual partition the topic does not have fails the record ("invalid
// record partitioning choice"), unless Wrap is set: then a record without
// a key goes to that number modulo the partitions, and one with a key
// through the default partitioning.
type Partitioner struct{ Wrap bool }

// ForTopic implements kgo.Partitioner.
func (p Partitioner) ForTopic(t string) kgo.TopicPartitioner {
	return topicPartitioner{kgo.StickyKeyPartitioner(nil).ForTopic(t), p.Wrap}
}

type topicPartitioner struct {
	inner kgo.TopicPartitioner
	wrap  bool
}

func (t topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return isManual(r) || t.inner.RequiresConsistency(r)
}

func (t topicPartitioner) Partition(r *kgo.Record, n int) int {
	if !isManual(r) {
		return t.inner.Partition(r, n)
	}
	switch {
	case int(r.Partition) < n || !t.wrap:
		return int(r.Partition) // out of range without wrap: kgo fails the record
	case !t.inner.RequiresConsistency(r):
		return int(r.Partition) % n
	default:
		return t.inner.Partition(r, n)
	}
}

func (t topicPartitioner) OnNewBatch() {
	if nb, ok := t.inner.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}

// InvalidPartition reports whether err is franz-go's failure of a record
// whose manual partition the topic does not have.
func InvalidPartition(err error) bool {
	return err != nil && strings.Contains(err.Error(), "invalid record partitioning choice")
}
