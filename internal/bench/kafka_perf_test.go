package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// The Kafka measurements (opt-in, like the others):
//   SLUICE_PERF=1 go test -run PerfKafka -v ./internal/bench/
// The pipeline is the articles': netcat -> memory -> Kafka sink, into an
// in-process Kafka (franz-go's kfake), read back by a kgo consumer that
// parses each record's body with ParseLine.

func kafkaCluster(t *testing.T, topics ...string) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ",")
}

func kafkaSinkConfig(brokers, topic string, extra string) string {
	return fmt.Sprintf("a1.sinks.k1.type = org.apache.flume.sink.kafka.KafkaSink\n"+
		"a1.sinks.k1.kafka.bootstrap.servers = %s\na1.sinks.k1.kafka.topic = %s\n%s", brokers, topic, extra)
}

func stage(reg *metrics.Registry, st metrics.Stage) metrics.StageLatency {
	for _, s := range reg.LatencySnapshot() {
		if s.Stage == st && s.Component == "k1" {
			return s
		}
	}
	return metrics.StageLatency{}
}

// TestPerfKafkaLatency200 sends 200 events/s of 1 KiB with linger.ms 0 and
// 10 and reports the latency from the sender to the consumer, and the
// sink's own stage (take to Kafka's acknowledgement).
func TestPerfKafkaLatency200(t *testing.T) {
	testutil.RequirePerf(t)
	seconds := testutil.EnvInt("SLUICE_PERF_SECONDS", 20)
	const rate, size = 200, 1024
	count := rate * seconds
	for _, linger := range []int{0, 10} {
		t.Run(fmt.Sprintf("linger.ms=%d", linger), func(t *testing.T) {
			topic := fmt.Sprintf("lat%d", linger)
			brokers := kafkaCluster(t, topic)
			ncPort := testutil.FreePort(t)
			a := agenttest.StartConf(t, pipelineConfig(ncPort, kafkaSinkConfig(brokers, topic,
				fmt.Sprintf("a1.sinks.k1.kafka.producer.linger.ms = %d\n", linger))))
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+60)*time.Second)
			defer cancel()
			recv, err := ConsumeKafka(ctx, brokers, topic)
			if err != nil {
				t.Fatal(err)
			}
			defer recv.Close()
			s, err := Dial(fmt.Sprintf("127.0.0.1:%d", ncPort))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Paced(ctx, 0, count, size, time.Second/rate); err != nil {
				t.Fatal(err)
			}
			if err := recv.WaitFor(ctx, count); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			rep := recv.Report(count)
			sk := stage(a.Metrics(), metrics.StageSink)
			t.Logf("netcat->memory->kafka (linger.ms %d): %v", linger, rep)
			t.Logf("  sink stage (take to ack): p50 %.3f ms p99 %.3f ms max %.3f ms over %d events",
				ms(sk.P50), ms(sk.P99), ms(sk.Max), sk.Count)
			if rep.Lost != 0 || rep.Duplicated != 0 {
				t.Fatalf("lost %d, duplicated %d", rep.Lost, rep.Duplicated)
			}
		})
	}
}

// TestPerfKafkaThroughput floods 1 KiB events through netcat -> memory ->
// Kafka sink and reports events/s from the first send to the last record
// read back, for flumeBatchSize 100 (Flume's default) and 1000.
func TestPerfKafkaThroughput(t *testing.T) {
	testutil.RequirePerf(t)
	total := testutil.EnvInt("SLUICE_PERF_EVENTS", 200_000)
	const size = 1024
	for _, batch := range []int{100, 1000} {
		t.Run(fmt.Sprintf("flumeBatchSize=%d", batch), func(t *testing.T) {
			topic := fmt.Sprintf("tp%d", batch)
			brokers := kafkaCluster(t, topic)
			ncPort := testutil.FreePort(t)
			agenttest.StartConf(t, pipelineConfig(ncPort, kafkaSinkConfig(brokers, topic,
				fmt.Sprintf("a1.sinks.k1.flumeBatchSize = %d\n", batch))))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			recv, err := ConsumeKafka(ctx, brokers, topic)
			if err != nil {
				t.Fatal(err)
			}
			defer recv.Close()
			s, err := Dial(fmt.Sprintf("127.0.0.1:%d", ncPort))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := s.Flood(0, total, size); err != nil {
				t.Fatal(err)
			}
			if err := recv.WaitFor(ctx, total); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			_ = s.Close()
			rep := recv.Report(total)
			t.Logf("flumeBatchSize %d: %d events of %d B in %v: %.0f events/s, %.1f MiB/s (lost %d, dup %d)",
				batch, total, size, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(),
				float64(total)*size/elapsed.Seconds()/(1<<20), rep.Lost, rep.Duplicated)
			if rep.Lost != 0 {
				t.Fatalf("lost %d", rep.Lost)
			}
		})
	}
}
