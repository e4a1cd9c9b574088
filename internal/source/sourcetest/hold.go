package sourcetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

// HoldProcessor records what a source puts, batch by batch, for tests of
// how a source cuts its batches. Its first Process waits for Release, so
// what is sent meanwhile piles up in front of the source; TxLimit reports
// the transactionCapacity it was made with (flow.TxLimiter; 0 for none).
type HoldProcessor struct {
	txCap   int
	first   chan struct{}
	release chan struct{}

	mu     sync.Mutex
	sizes  []int
	bodies []string
}

// NewHoldProcessor returns a HoldProcessor whose TxLimit is txCap.
func NewHoldProcessor(txCap int) *HoldProcessor {
	return &HoldProcessor{txCap: txCap, first: make(chan struct{}), release: make(chan struct{})}
}

// TxLimit implements flow.TxLimiter.
func (p *HoldProcessor) TxLimit() int { return p.txCap }

// Process implements flow.Processor.
func (p *HoldProcessor) Process(_ context.Context, evs []event.Event) error {
	p.mu.Lock()
	n := len(p.sizes)
	p.sizes = append(p.sizes, len(evs))
	for _, e := range evs {
		p.bodies = append(p.bodies, string(e.Body))
	}
	p.mu.Unlock()
	if n == 0 {
		close(p.first)
		<-p.release
	}
	return nil
}

// First is closed once the first batch arrived; its Process then waits for
// Release.
func (p *HoldProcessor) First() <-chan struct{} { return p.first }

// Release lets the first Process return, and every later one go through.
func (p *HoldProcessor) Release() { close(p.release) }

// Wait waits up to timeout until n events arrived and returns the sizes of
// the batches and the bodies, in order. It fails tb when fewer or more
// came.
func (p *HoldProcessor) Wait(tb testing.TB, n int, timeout time.Duration) (sizes []int, bodies []string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		sizes, bodies = slices.Clone(p.sizes), slices.Clone(p.bodies)
		p.mu.Unlock()
		switch {
		case len(bodies) == n:
			return sizes, bodies
		case len(bodies) > n:
			tb.Fatalf("got %d events, want %d (batches %v)", len(bodies), n, sizes)
		case time.Now().After(deadline):
			tb.Fatalf("got %d of %d events in %v (batches %v)", len(bodies), n, timeout, sizes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
