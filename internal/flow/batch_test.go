package flow_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// limitProc is a Processor that reports its channels' transactionCapacity.
type limitProc struct{ n int }

func (limitProc) Process(context.Context, []event.Event) error { return nil }
func (p limitProc) TxLimit() int                               { return p.n }

type plainProc struct{}

func (plainProc) Process(context.Context, []event.Event) error { return nil }

func TestBatchingLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		props map[string]string
		def   int
		proc  flow.Processor
		size  int // what BatchSize reports
		limit int
	}{
		{"default grows to transactionCapacity", nil, 100, limitProc{1000}, 100, 1000},
		{"default, exec's 20", nil, 20, limitProc{1000}, 20, 1000},
		{"default, capacity below the default", nil, 100, limitProc{50}, 100, 100},
		{"default, capacity unknown", nil, 100, plainProc{}, 100, 100},
		{"default, no channel has a capacity", nil, 100, limitProc{0}, 100, 100},
		{"default, bounded", nil, 100, limitProc{1000000}, 100, flow.MaxAdaptiveBatch},
		{"explicit is a maximum", map[string]string{"batchSize": "100"}, 100, limitProc{1000}, 100, 100},
		{"explicit above the capacity stays", map[string]string{"batchSize": "5000"}, 100, limitProc{1000}, 5000, 5000},
		{"explicit equal to the default is still explicit", map[string]string{"batchSize": "20"}, 20, limitProc{1000}, 20, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := config.FromMap("a1.sources.r1.", tc.props)
			b := flow.ReadBatching(p, "batchSize", tc.def)
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			if b.Size() != tc.size {
				t.Errorf("Size() = %d, want %d", b.Size(), tc.size)
			}
			if got := b.Limit(tc.proc); got != tc.limit {
				t.Errorf("Limit() = %d, want %d", got, tc.limit)
			}
			if b.Explicit() != (tc.props != nil) {
				t.Errorf("Explicit() = %v", b.Explicit())
			}
		})
	}
}

func TestBatchingBadValue(t *testing.T) {
	p := config.FromMap("a1.sources.r1.", map[string]string{"batchSize": "0"})
	b := flow.ReadBatching(p, "batchSize", 100)
	if p.Err() == nil {
		t.Fatal("batchSize 0 was accepted")
	}
	if b.Size() != 100 {
		t.Fatalf("Size() = %d after a bad value, want the default", b.Size())
	}
}

// The processor's limit is the smallest transactionCapacity over every
// channel it puts into, optional ones included: a batch of that many events
// is one transaction in each.
func TestProcessorTxLimit(t *testing.T) {
	s := newProc(t, []string{"c1", "c2"}, map[string]int{"c2": 50}, map[string]string{"optional": "c2"})
	if got := s.proc.TxLimit(); got != 50 {
		t.Fatalf("TxLimit() = %d, want 50 (c2's transactionCapacity)", got)
	}
	if got := flow.DefaultBatching(100).Limit(s.proc); got != 100 {
		t.Fatalf("a default batch of 100 over a channel of 50: limit %d, want 100 (the agent refuses that config)", got)
	}
	s = newProc(t, []string{"c1"}, nil, nil)
	if got := flow.DefaultBatching(20).Limit(s.proc); got != 100 {
		t.Fatalf("default limit %d, want c1's transactionCapacity 100", got)
	}
}
