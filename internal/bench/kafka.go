package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// InProcessKafka as the brokers starts an in-process fake Kafka (franz-go's
// kfake, one broker, 3 partitions) for the run: the pipeline can be
// measured without a cluster, though not against a real broker's disk and
// network. kfake is a test tool: only a build with -tags kfake carries it
// (kfake.go); the agent's binary does not (nokfake.go).
const InProcessKafka = "kfake"

// ConsumeKafka starts a receiver that consumes topic from brokers (a
// comma-separated host:port list) from its start, as the downstream of a
// kafka sink, and records each record's value (a generated line, or an
// Avro-encoded Flume event whose body is one: useFlumeEventFormat).
func ConsumeKafka(ctx context.Context, brokers, topic string) (*Receiver, error) {
	if brokers == "" {
		return nil, errors.New("bench kafka receiver: no brokers given (--kafka-brokers host:port,...)")
	}
	if topic == "" {
		return nil, errors.New("bench kafka receiver: no topic given")
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AllowAutoTopicCreation(),
		kgo.FetchMaxWait(50*time.Millisecond),
	)
	if err != nil {
		return nil, fmt.Errorf("bench kafka receiver: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cl.Ping(pctx)
	cancel()
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("bench kafka receiver: no broker answers at %s: %w", brokers, err)
	}
	r := NewReceiver()
	cctx, stop := context.WithCancel(context.Background())
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		<-r.stop
		stop()
	}()
	go func() {
		defer r.wg.Done()
		defer cl.Close()
		for cctx.Err() == nil {
			fetches := cl.PollFetches(cctx)
			now := time.Now().UnixNano()
			fetches.EachRecord(func(rec *kgo.Record) { r.RecordAt(rec.Value, now) })
		}
	}()
	return r, nil
}
