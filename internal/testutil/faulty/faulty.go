// Package faulty holds components that panic on purpose, for the tests of
// the agent's panic policy (package panics) through the real binary. They
// are in the agent only when it is built with the build tag sluice_faulty
// (internal/agent/components_faulty.go; testutil.AgentBinaryWithFaults), so
// no user can configure them.
package faulty

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// NewSink is the sink type faulty_panic: it appends each delivered body and
// a newline to the file `file` (synced before the take commits), and
// panics in every delivery while the file `panicWhile` exists.
func NewSink(env flow.Env, p *config.Props) (flow.Sink, error) {
	w := &writer{out: p.Required("file"), marker: p.Required("panicWhile")}
	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, w, p.Int("batchSize", 100), c), nil
}

type writer struct {
	out, marker string
	mu          sync.Mutex
}

func (w *writer) Write(_ context.Context, events []event.Event) error {
	if _, err := os.Stat(w.marker); err == nil {
		var m map[string]int
		m["faulty sink"]++ //nolint:staticcheck // SA5000: a runtime error, as a bug would make
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	f, err := os.OpenFile(w.out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	var b []byte
	for i := range events {
		b = append(append(b, events[i].Body...), '\n')
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// NewSource is the source type faulty_panic: a source whose own goroutine
// panics `panicAfterMillis` (default 0) after it starts, having put nothing.
func NewSource(env flow.Env, p *config.Props) (flow.Source, error) {
	return &source{env: env, after: time.Duration(p.Int64("panicAfterMillis", 0)) * time.Millisecond}, nil
}

type source struct {
	env    flow.Env
	after  time.Duration
	worker flow.Worker
}

func (s *source) Start(context.Context, flow.Processor) error {
	s.worker.Go("faulty_panic source "+s.env.Name, func(ctx context.Context) {
		select {
		case <-ctx.Done():
		case <-time.After(s.after):
			panic(fmt.Sprintf("faulty_panic source %s panics on purpose", s.env.Name))
		}
	})
	return nil
}

func (s *source) Stop(ctx context.Context) error { return s.worker.Stop(ctx) }
