// Package panics holds what the agent does when its code panics.
//
// A panic is a bug in sluice, never an expected outcome, so there is one
// policy, applied to every goroutine the agent starts:
//
//   - In a sink's delivery (flow.BatchSink calling its Writer) the panic is
//     caught with Catch: the batch is rolled back into the channel like any
//     failed delivery, the sink reports the panic on /healthz until a
//     delivery succeeds, and its runner retries with its backoff; the rest of
//     the agent runs on. That is safe because the transaction belongs to the
//     channel, which the panic did not touch.
//   - Anywhere else the state the panic left cannot be trusted (a lock held,
//     a transaction half done, a loop gone), so every other goroutine starts
//     with defer Guard(name), or is started by Go: the panic is logged once
//     at ERROR with the goroutine's name, the panic value and the stack, and
//     the process exits with ExitStatus (70), which no other outcome uses.
//     It is a crash: durable channels (file, Kafka) keep every acknowledged
//     event, memory channels lose theirs, and a supervisor restarts the agent.
//
// Without this a panic would print Go's trace on stderr and exit with
// status 2, which sluice documents as a bad command line.
package panics

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// ExitStatus is the process's exit status after a panic outside a sink's
// delivery: EX_SOFTWARE of sysexits.h, "an internal software error".
const ExitStatus = 70

var (
	logger atomic.Pointer[slog.Logger]
	// exiting serialises Guard: the first panic logs and exits; a panic
	// of another goroutine meanwhile waits for that exit.
	exiting sync.Mutex
)

// SetLogger sets where Guard logs: the agent's logger, which redacts the
// secrets of its configuration. Until it is called, slog.Default().
func SetLogger(l *slog.Logger) { logger.Store(l) }

func log() *slog.Logger {
	if l := logger.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// Go runs fn in a new goroutine guarded by Guard(name).
func Go(name string, fn func()) {
	go func() {
		defer Guard(name)
		fn()
	}()
}

// AfterFunc is context.AfterFunc with f guarded by Guard(name): f runs in
// a goroutine of its own when ctx is done.
func AfterFunc(ctx context.Context, name string, f func()) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		defer Guard(name)
		f()
	})
}

// Guard turns, when deferred first in a goroutine (defer
// panics.Guard("what it is")), a panic of that goroutine into one ERROR
// line and the exit status ExitStatus. It does nothing when the goroutine returns normally. name says
// which goroutine it was, with the component's name where there is one
// ("sink k1: roll timer").
func Guard(name string) {
	v := recover()
	if v == nil {
		return
	}
	stack := debug.Stack()
	exiting.Lock() // never unlocked: the process ends
	log().Error("a goroutine of the agent panicked; the agent exits with status 70 (a bug in sluice: please report this line)",
		"goroutine", name, "panic", fmt.Sprint(v), "stack", string(stack), "exit_status", ExitStatus)
	os.Exit(ExitStatus)
}

// Error is a panic caught by Catch.
type Error struct {
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *Error) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error (a runtime error).
func (e *Error) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Catch calls fn and returns its error, or an *Error when fn panics. Use it
// only where the caller can undo what fn was doing (a sink's delivery,
// whose batch the caller rolls back); everywhere else use Guard.
func Catch(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &Error{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}
