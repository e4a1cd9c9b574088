package flow

import (
	"context"
	"sync"
	"sync/atomic"
)

// ErrStopping is returned (wrapped, test with errors.Is) by a
// ChannelProcessor that was closed: the agent is stopping, or a reload is
// replacing the source. Nothing was put. It also matches ErrChannelFull, so
// a source that handles a full channel correctly (acknowledge nothing, tell
// the sender to retry: Avro FAILED, HTTP 503, stop reading a stream) does
// the right thing at a stop without knowing of it; a source may test for
// ErrStopping first to tell its sender why.
var ErrStopping error = stoppingError{}

type stoppingError struct{}

func (stoppingError) Error() string {
	return "agent is stopping: intake closed, nothing was put; retry elsewhere or once the agent is back"
}

func (stoppingError) Is(target error) bool { return target == ErrChannelFull }

// gateClosed is the flag bit of gate.state set by close; the bits below it
// count the Process calls in progress.
const gateClosed = int64(1) << 62

// gate lets Process calls in until it is closed, and lets close wait for
// the ones already in. It costs one atomic add on the way in and one on the
// way out, so the hot path takes no lock.
type gate struct {
	state    atomic.Int64
	idleOnce sync.Once
	idle     chan struct{} // closed once the gate is closed and no call is in
}

func newGate() *gate { return &gate{idle: make(chan struct{})} }

// enter reports whether a call may go in; if so the caller must leave.
func (g *gate) enter() bool {
	if g.state.Add(1)&gateClosed != 0 {
		g.leave()
		return false
	}
	return true
}

func (g *gate) leave() {
	if g.state.Add(-1) == gateClosed {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// close shuts the gate and waits until no call is in, or ctx ends.
func (g *gate) close(ctx context.Context) error {
	if old := g.state.Or(gateClosed); old&^gateClosed == 0 {
		g.idleOnce.Do(func() { close(g.idle) })
	}
	// Idle already: done, even if ctx is too (select would pick at random).
	select {
	case <-g.idle:
		return nil
	default:
	}
	select {
	case <-g.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) closed() bool { return g.state.Load()&gateClosed != 0 }
