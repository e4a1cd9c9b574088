// Package agenttest runs whole agents inside the test's own process
// (agent.New, then Start), for tests that wire components by a
// configuration file but need no binary: several agents in tiers, a
// pipeline measured end to end. Tests of the process itself (signals,
// exit codes) run the binary with testutil.StartAgent instead.
//
// It is apart from package testutil because it imports package agent,
// and with it every component, whose own tests import testutil.
package agenttest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Start creates and starts an agent with opts (agent name a1 and a log
// that goes nowhere, unless opts says otherwise), and stops it at the end
// of the test unless the test did.
func Start(t testing.TB, opts agent.Options) *agent.Agent {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "a1"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatalf("agent.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Stop(ctx) // the test has checked what it wanted; events the stop drops are not its subject
	})
	return a
}

// StartConf is Start with the configuration conf, written to a file in a
// temporary directory.
func StartConf(t testing.TB, conf string) *agent.Agent {
	t.Helper()
	file := filepath.Join(t.TempDir(), "agent.properties")
	testutil.WriteFile(t, file, conf)
	return Start(t, agent.Options{File: file})
}
