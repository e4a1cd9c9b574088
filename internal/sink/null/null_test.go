package nullsink

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestDrainsChannelInBatches(t *testing.T) {
	ctx := context.Background()
	reg := metrics.NewRegistry("a1")
	ch, err := memorychannel.New(flow.Env{Agent: "a1", Name: "c1", Type: "memory"},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "1000", "transactionCapacity": "100"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer ch.Stop(ctx)
	p := config.FromMap("a1.sinks.k1.", map[string]string{"batchSize": "100"})
	s, err := New(flow.Env{Agent: "a1", Name: "k1", Type: "null", Metrics: reg, Channel: ch}, p)
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := testutil.PutCommit(ch, testutil.Events("e", 50)); err != nil {
			t.Fatal(err)
		}
	}
	for ch.Len() > 0 {
		if _, err := s.Process(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Stop(ctx)
	got := map[string]string{}
	for _, set := range reg.Sets() {
		if set.Name == "k1" {
			set.Each(func(k, v string) { got[k] = v })
		}
	}
	for k, v := range map[string]string{"EventDrainSuccessCount": "250", "BatchCompleteCount": "2", "BatchUnderflowCount": "1"} {
		if got[k] != v {
			t.Errorf("%s = %s, want %s", k, got[k], v)
		}
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		props map[string]string
		batch int
		err   string
	}{
		{map[string]string{}, 100, ""},
		{map[string]string{"batchSize": "7"}, 7, ""},
		{map[string]string{"batchSize": "0"}, 100, "a1.sinks.k1.batchSize: 0 is out of range"},
		{map[string]string{"batchSize": "many"}, 100, `"many" is not a whole number`},
	}
	for _, tt := range tests {
		p := config.FromMap("a1.sinks.k1.", tt.props)
		s, err := New(flow.Env{Name: "k1", Type: "null"}, p)
		if err != nil {
			t.Fatal(err)
		}
		p.Unused()
		if tt.err == "" && p.Err() != nil || tt.err != "" && (p.Err() == nil || !strings.Contains(p.Err().Error(), tt.err)) {
			t.Errorf("%v: problems %v, want %q", tt.props, p.Err(), tt.err)
		}
		if got := s.(flow.BatchSizer).BatchSize(); got != tt.batch {
			t.Errorf("%v: batch size %d, want %d", tt.props, got, tt.batch)
		}
	}
}
