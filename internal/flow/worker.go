package flow

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice/internal/panics"
)

// Worker owns the one goroutine of a source that reads on its own schedule
// (seq, exec, spooldir, taildir): Go starts it once with a context that Stop
// cancels, and Stop waits for it to return. The zero value is ready to use.
type Worker struct {
	mu     sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// Running reports whether the goroutine was started and not yet stopped.
func (w *Worker) Running() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done != nil
}

// Go runs run in a new goroutine and reports true, or reports false and does
// nothing when one is already running. name names the goroutine in the log
// line of a panic, which ends the process (see package panics).
func (w *Worker) Go(name string, run func(ctx context.Context)) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w.cancel, w.done = cancel, done
	go func() {
		defer panics.Guard(name)
		defer close(done)
		run(ctx)
	}()
	return true
}

// Stop cancels the goroutine's context and waits until it returns or ctx
// ends (then it returns ctx's error and the goroutine finishes on its own).
// Stopping a worker that is not running does nothing.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.cancel, w.done = nil, nil
	w.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
