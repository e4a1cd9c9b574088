package listener

import (
	"context"
	"fmt"
	"sync"
)

// Budget bounds the bytes a source holds for input it has read (or is about
// to read) but not yet handed to its channels: read buffers, request bodies,
// messages being decoded. A source takes bytes from it before it allocates
// them and gives them back when the input is committed or refused, so what
// all its clients together can make it hold is the budget's limit, whatever
// they send.
//
// Waiters are served in arrival order, so a large request is not starved by
// a stream of small ones. A Budget is safe for concurrent use.
type Budget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	waiters []*waiter // FIFO
}

type waiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are granted
}

// ErrOverBudget is returned by Acquire for a request larger than the whole
// budget: it can never be granted.
type ErrOverBudget struct {
	Want, Limit int64
}

func (e *ErrOverBudget) Error() string {
	return fmt.Sprintf("%d bytes wanted, more than the whole budget of %d bytes", e.Want, e.Limit)
}

// NewBudget returns a budget of limit bytes; limit <= 0 means unlimited.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Limit is the budget's size in bytes (0: unlimited).
func (b *Budget) Limit() int64 { return b.limit }

// InUse is how many bytes are taken now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Fits reports whether n bytes could ever be granted.
func (b *Budget) Fits(n int64) bool { return b.limit <= 0 || n <= b.limit }

// TryAcquire takes n bytes if they are free now and nobody waits before it.
func (b *Budget) TryAcquire(n int64) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && (b.used+n > b.limit || len(b.waiters) > 0) {
		return false
	}
	b.used += n
	return true
}

// Acquire takes n bytes, waiting until they are free or ctx is done. A
// request larger than the whole budget fails at once with *ErrOverBudget.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	if !b.Fits(n) {
		return &ErrOverBudget{Want: n, Limit: b.limit}
	}
	b.mu.Lock()
	if b.limit <= 0 || (b.used+n <= b.limit && len(b.waiters) == 0) {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	select {
	case <-w.ready:
		// Granted while giving up: give the bytes back.
		b.used -= n
		b.grantLocked()
	default:
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
		// The head may have been blocking smaller requests behind it.
		b.grantLocked()
	}
	b.mu.Unlock()
	return ctx.Err()
}

// Release gives n bytes back.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.used < 0 {
		b.mu.Unlock()
		panic("listener: BUG: budget released more than was acquired")
	}
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked wakes waiters in order while their bytes fit. Caller holds b.mu.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		if b.used+w.n > b.limit {
			return
		}
		b.used += w.n
		b.waiters = b.waiters[1:]
		close(w.ready)
	}
}

// Hold is a running tally of bytes one piece of work took from a budget,
// so they can all be given back at once. The zero value with a nil budget
// takes nothing and always succeeds.
type Hold struct {
	b *Budget
	n int64
}

// NewHold returns an empty tally against b (nil: unlimited).
func NewHold(b *Budget) Hold { return Hold{b: b} }

// Bytes is what the hold has taken.
func (h *Hold) Bytes() int64 { return h.n }

// Try takes n more bytes if they are free now.
func (h *Hold) Try(n int64) bool {
	if h.b == nil || n <= 0 {
		return true
	}
	if !h.b.TryAcquire(n) {
		return false
	}
	h.n += n
	return true
}

// Wait takes n more bytes, waiting for them as Budget.Acquire does.
func (h *Hold) Wait(ctx context.Context, n int64) error {
	if h.b == nil || n <= 0 {
		return nil
	}
	if err := h.b.Acquire(ctx, n); err != nil {
		return err
	}
	h.n += n
	return nil
}

// Fits reports whether the hold could ever grow by n more bytes.
func (h *Hold) Fits(n int64) bool { return h.b == nil || h.b.Fits(h.n+n) }

// Release gives back everything the hold took.
func (h *Hold) Release() {
	if h.b != nil && h.n > 0 {
		h.b.Release(h.n)
	}
	h.n = 0
}

// Shrink gives back n of the bytes the hold took.
func (h *Hold) Shrink(n int64) {
	n = min(n, h.n)
	if h.b != nil && n > 0 {
		h.b.Release(n)
	}
	h.n -= n
}
