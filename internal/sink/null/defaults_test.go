package nullsink

import (
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// TestFlumeDefaults builds the sink as Flume's NullSink is configured:
// without batchSize it takes Flume's 100, and Flume's logEveryNEvents loads
// without an unknown-key warning (sluice counts drained events in its
// metrics instead of logging every N).
func TestFlumeDefaults(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		batch int
	}{
		{"no keys", nil, 100},
		{"logEveryNEvents", map[string]string{"logEveryNEvents": "10000"}, 100},
		{"batchSize", map[string]string{"batchSize": "7"}, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := config.FromMap("a1.sinks.k1.", tc.props)
			s, err := New(flow.Env{Agent: "a1", Name: "k1", Type: "null", Metrics: metrics.NewRegistry("a1")}, p)
			if err != nil {
				t.Fatal(err)
			}
			p.Unused()
			if err := p.Err(); err != nil {
				t.Fatalf("problems: %v", err)
			}
			if got := s.(interface{ BatchSize() int }).BatchSize(); got != tc.batch {
				t.Errorf("batch size %d, want %d", got, tc.batch)
			}
		})
	}
}
