package sinktest

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
)

// Start builds a sink named as env names it from its properties (keys
// relative to a1.sinks.NAME.) with newFn, starts it, and stops it when the
// test ends. An error, or a problem in the properties (a key the sink does
// not read included), fails the test.
func Start(t testing.TB, newFn func(flow.Env, *config.Props) (flow.Sink, error), env flow.Env, props map[string]string) flow.Sink {
	t.Helper()
	p := config.FromMap("a1.sinks."+env.Name+".", props)
	s, err := newFn(env, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}
