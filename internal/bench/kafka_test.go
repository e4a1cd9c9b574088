package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestConsumeKafka produces generated lines to a topic of an in-process
// Kafka (kfake) and checks the receiver counts them, duplicates included.
func TestConsumeKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "bench"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	r, err := ConsumeKafka(context.Background(), brokers, "bench")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("bench"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	now := time.Now()
	var recs []*kgo.Record
	for i := range 100 {
		recs = append(recs, &kgo.Record{Value: AppendLine(nil, uint64(i), now, 64)[:64]})
	}
	recs = append(recs, &kgo.Record{Value: AppendLine(nil, 5, now, 64)}) // a duplicate
	if err := p.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.WaitFor(ctx, 100); err != nil {
		t.Fatal(err)
	}
	rep := r.Report(100)
	for rep.Duplicated == 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		rep = r.Report(100)
	}
	if rep.Received != 100 || rep.Lost != 0 || rep.Duplicated != 1 || rep.Malformed != 0 {
		t.Errorf("%v malformed %d", rep, rep.Malformed)
	}
}

func TestConsumeKafkaNoBroker(t *testing.T) {
	port, err := pickPort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = ConsumeKafka(ctx, "127.0.0.1:"+itoa(port), "bench")
	if err == nil || !strings.Contains(err.Error(), "no broker answers") {
		t.Fatalf("err = %v", err)
	}
}
