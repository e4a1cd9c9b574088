package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// testdata/seed000.properties is, verbatim, the low-latency Avro -> memory
// -> Kafka agent of the article in seeds/000 (section 4.1), one key per
// line: the first config a Flume user tries. It carries three keys sluice
// does not read (two the Avro source has in no Flume version, and the
// common kafka.flumeBatchSize misspelling of flumeBatchSize).
const seedFile = "testdata/seed000.properties"

var problemLine = regexp.MustCompile(`^testdata/seed000\.properties:(\d+): (\S+): (.*)$`)

// TestSeedConfigValidates: validate prints exactly the three warnings (with
// their lines and the suggestion for the misspelling) and exits 0; with
// --strict the same warnings make it exit 1.
func TestSeedConfigValidates(t *testing.T) {
	code, out, _ := runCLI("validate", "-f", seedFile, "-n", "agent")
	if code != 0 {
		t.Fatalf("exit %d, want 0; output:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"testdata/seed000.properties:9: agent.sources.avroSource.batchSize: ignored: sluice does not read it",
		"testdata/seed000.properties:10: agent.sources.avroSource.batchDurationMillis: ignored: sluice does not read it",
		"testdata/seed000.properties:22: agent.sinks.kafkaSink.kafka.flumeBatchSize: ignored: sluice does not read it; did you mean agent.sinks.kafkaSink.flumeBatchSize?",
		"testdata/seed000.properties: agent agent is valid, with 3 warnings",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("validate printed:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	for _, l := range lines[:3] {
		if !problemLine.MatchString(l) {
			t.Errorf("not a FILE:LINE: key: message line: %q", l)
		}
	}

	code, out, _ = runCLI("validate", "--strict", "-f", seedFile, "-n", "agent")
	if code != 1 || !strings.Contains(out, "has 3 warnings, which --strict counts as errors") {
		t.Fatalf("--strict: exit %d, output:\n%s", code, out)
	}
}

// TestSeedConfigRuns starts `sluice agent` in process on the seed config,
// its Kafka address pointed at an in-process Kafka (kfake) and nothing else
// changed, sends events to its Avro source on port 41414 as the article's
// clients do, and finds every one in the topic, body and headers intact.
// The three ignored keys are logged as warnings, and the agent runs.
func TestSeedConfigRuns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:41414")
	if err != nil {
		t.Fatalf("the seed config's Avro port 41414 is taken on this machine: %v", err)
	}
	ln.Close()

	kafka := kafkatest.New(t, 2, 1, "test-topic")
	seed, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(seed), "kf-01:9092,kf-02:9092", kafka.Brokers(), 1)
	if conf == string(seed) {
		t.Fatal("the seed config's Kafka address was not found")
	}
	file := filepath.Join(t.TempDir(), "seed000.properties")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var stderr testutil.LogBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"agent", "-f", file, "-n", "agent"}, nil, io.Discard, &stderr) }()
	defer func() {
		cancel()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("exit %d; log:\n%s", c, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop")
		}
	}()

	var cl *avrorpc.Client
	for i := 0; ; i++ {
		cl, err = avrorpc.Dial(ctx, "127.0.0.1:41414", avrorpc.ClientConfig{})
		if err == nil {
			break
		}
		if i == 200 {
			t.Fatalf("avro source never listened: %v; log:\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer cl.Close()
	const n = 200
	for i := 0; i < n; i += 20 {
		var batch []event.Event
		for j := i; j < i+20; j++ {
			batch = append(batch, event.Event{Headers: event.HeadersOf(map[string]string{"seq": fmt.Sprint(j)}), Body: []byte(fmt.Sprintf(`{"msg":"event %d"}`, j))})
		}
		if st, err := cl.AppendBatch(ctx, batch); err != nil || st != avrorpc.OK {
			t.Fatalf("appendBatch: %v, %v; log:\n%s", st, err, stderr.String())
		}
	}
	recs := kafkatest.ReadAll(t, kafka.Addrs, "test-topic", n, 20*time.Second)
	if len(recs) != n {
		t.Fatalf("%d of %d events in the topic; log:\n%s", len(recs), n, stderr.String())
	}
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r.Value)] = true
	}
	for i := 0; i < n; i++ {
		if !seen[fmt.Sprintf(`{"msg":"event %d"}`, i)] {
			t.Fatalf("event %d missing from the topic", i)
		}
	}
	log := stderr.String()
	for _, key := range []string{"batchSize", "batchDurationMillis", "kafka.flumeBatchSize"} {
		if !regexp.MustCompile(`level=WARN msg=".*seed000\.properties:\d+: agent\.\S+\.` + regexp.QuoteMeta(key) + `: ignored: sluice does not read it`).MatchString(log) {
			t.Errorf("log lacks the warning for %s:\n%s", key, log)
		}
	}
}
