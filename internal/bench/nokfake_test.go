//go:build !kfake

package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The agent's binary carries no fake Kafka: asked for one, the bench says
// which build has it, and measures nothing.
func TestInProcessKafkaNeedsABenchBuild(t *testing.T) {
	var out, errs bytes.Buffer
	code := Main(context.Background(), []string{"--send", "netcat", "--to", "127.0.0.1:1", "--receive", "kafka",
		"--kafka-brokers", InProcessKafka, "--count", "1"}, &out, &errs)
	if code == 0 || !strings.Contains(errs.String(), "go build -tags kfake") {
		t.Fatalf("exit %d, stderr %q; want a failure naming the kfake build", code, errs.String())
	}
}
