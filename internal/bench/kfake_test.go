//go:build kfake

package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A bench build (-tags kfake) starts the in-process Kafka that
// --kafka-brokers kfake names: what is produced to it is consumed back.
func TestInProcessKafka(t *testing.T) {
	brokers, stop, err := startFakeKafka("bench")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r, err := ConsumeKafka(context.Background(), brokers, "bench")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.DefaultProduceTopic("bench"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	now := time.Now()
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Value: AppendLine(nil, uint64(i), now, 64)})
	}
	if err := p.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.WaitFor(ctx, 10); err != nil {
		t.Fatal(err)
	}
}
