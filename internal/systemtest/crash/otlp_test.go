package crash

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/otlptest"
)

// TestOTLPLoss runs the agent binary as an OTLP bridge, otlp source →
// file channel → otlp sink, under four OpenTelemetry SDK exporters
// (otlploggrpc, retrying), while the downstream (pdata's gRPC server) is
// stopped twice and the agent is killed with SIGKILL once and started
// again: every record an exporter had acknowledged (Export returned nil)
// must reach the downstream. The default run sends 20,000 records with 2 s
// outages; the full run, 200,000 records with 10 s outages, is
//
//	SLUICE_LONG=1 go test -run TestOTLPLoss -v ./internal/systemtest/crash/
func TestOTLPLoss(t *testing.T) {
	total, outage := 20_000, 2*time.Second
	if os.Getenv("SLUICE_LONG") != "" {
		total, outage = 200_000, 10*time.Second
	}
	const senders, batch = 4, 500
	// The senders spread their records over the whole run, so that both
	// outages and the kill fall while they send.
	span := 3*outage + 2*time.Second
	pause := span / time.Duration(total/senders/batch)
	down := otlptest.NewGRPCReceiver(t, nil)
	base := testutil.MemoryDir(t)
	port := testutil.FreePort(t)
	conf := filepath.Join(base, "agent.properties")
	testutil.WriteFile(t, conf, fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = otlp
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.grpcPort = %d
a1.sources.r1.httpPort = -1
a1.sources.r1.channels = c1
a1.channels.c1.type = file
a1.channels.c1.checkpointDir = %s
a1.channels.c1.dataDirs = %s
a1.channels.c1.capacity = 400000
a1.channels.c1.transactionCapacity = 1000
a1.channels.c1.minimumRequiredSpace = 0
a1.sinks.k1.type = otlp
a1.sinks.k1.endpoint = %s
a1.sinks.k1.batchSize = 1000
a1.sinks.k1.compression = none
a1.sinks.k1.channel = c1
`, port, filepath.Join(base, "ck"), filepath.Join(base, "data"), down.Addr()))
	addr := "127.0.0.1:" + strconv.Itoa(port)

	agent := startAgent(t, conf)
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	// Each sender exports its share in batches; a batch is acknowledged
	// when Export returns nil (the SDK retries UNAVAILABLE and a refused
	// connection by itself meanwhile).
	res := resource.NewSchemaless(attribute.String("service.name", "loss-test"))
	per := total / senders
	var acked atomic.Int64
	ackedIDs := make([][]string, senders)
	failed := make([]int, senders)
	var wg sync.WaitGroup
	start := time.Now()
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exp, err := otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(addr), otlploggrpc.WithInsecure(),
				otlploggrpc.WithRetry(otlploggrpc.RetryConfig{Enabled: true, InitialInterval: 100 * time.Millisecond,
					MaxInterval: time.Second, MaxElapsedTime: 2 * time.Minute}))
			if err != nil {
				t.Error(err)
				return
			}
			defer exp.Shutdown(context.Background())
			for first := 0; first < per; first += batch {
				n := min(batch, per-first)
				recs := otlptest.Records(res, "loss", func(ctx context.Context, l log.Logger) {
					for i := range n {
						var r log.Record
						r.SetTimestamp(time.Now())
						r.SetBody(attribute.StringValue(fmt.Sprintf("s%d-%d", s, first+i)))
						r.AddAttributes(attribute.Int("seq", first+i))
						l.Emit(ctx, r)
					}
				})
				if err := exportRecords(exp, recs); err != nil {
					failed[s] += n
					continue
				}
				for i := range n {
					ackedIDs[s] = append(ackedIDs[s], fmt.Sprintf("s%d-%d", s, first+i))
				}
				acked.Add(int64(n))
				time.Sleep(pause)
			}
		}()
	}
	at := func(frac float64) { time.Sleep(time.Until(start.Add(time.Duration(frac * float64(span))))) }
	outageAt := func(frac float64) {
		at(frac)
		t.Logf("%v: %d acknowledged, %d delivered: downstream stopped for %v", time.Since(start).Round(time.Millisecond), acked.Load(), down.Count(), outage)
		down.Stop()
		time.Sleep(outage)
		if err := down.Start(); err != nil {
			t.Fatal(err)
		}
	}
	outageAt(0.1)
	at(0.5)
	t.Logf("%v: %d acknowledged, %d delivered: SIGKILL", time.Since(start).Round(time.Millisecond), acked.Load(), down.Count())
	agent.Signal(syscall.SIGKILL)
	agent.Exit(10 * time.Second)
	agent = startAgent(t, conf)
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	outageAt(0.6)
	wg.Wait()
	t.Logf("%v: senders done: %d acknowledged, %d not (export failed)", time.Since(start).Round(time.Millisecond), acked.Load(), failed[0]+failed[1]+failed[2]+failed[3])

	var want []string
	for _, ids := range ackedIDs {
		want = append(want, ids...)
	}
	delivered := map[string]int{}
	missing := func() []string {
		clear(delivered)
		for _, lr := range down.Records() {
			delivered[lr.Body().Str()]++
		}
		var miss []string
		for _, id := range want {
			if delivered[id] == 0 {
				miss = append(miss, id)
			}
		}
		return miss
	}
	deadline := time.Now().Add(2 * time.Minute)
	var miss []string
	for {
		if miss = missing(); len(miss) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	dups := 0
	for _, n := range delivered {
		dups += n - 1
	}
	t.Logf("%v: %d acknowledged, %d distinct delivered, %d duplicates, %d missing", time.Since(start).Round(time.Millisecond),
		len(want), len(delivered), dups, len(miss))
	if len(miss) > 0 {
		t.Fatalf("%d acknowledged records never reached the downstream, such as %s", len(miss), strings.Join(miss[:min(5, len(miss))], ", "))
	}
	if len(want) < total*9/10 {
		t.Fatalf("only %d of %d records acknowledged: the load did not get through", len(want), total)
	}
	agent.Signal(syscall.SIGTERM)
	if code := agent.Exit(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
}

func exportRecords(exp *otlploggrpc.Exporter, recs []sdklog.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return exp.Export(ctx, recs)
}
