package agent_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
)

// stuckSink's Stop ignores its context and returns only when released: a
// component bug that must not hold the agent's stop past its bounds.
type stuckSink struct{ release chan struct{} }

func (s *stuckSink) Start(context.Context) error { return nil }
func (s *stuckSink) Process(ctx context.Context) (flow.Status, error) {
	select { // an empty channel, as far as the runner can tell
	case <-ctx.Done():
	case <-time.After(10 * time.Millisecond):
	}
	return flow.Backoff, nil
}
func (s *stuckSink) Stop(context.Context) error { <-s.release; return nil }

// TestStopBoundedByStuckComponent: a sink whose Stop never returns holds
// neither Stop nor, therefore, the process: the agent gives it its stop
// timeout and a grace, says so at ERROR, and finishes the stop.
func TestStopBoundedByStuckComponent(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	undo := agent.SetSinkTypeForTest("stuck", func(flow.Env, *config.Props) (flow.Sink, error) {
		return &stuckSink{release: release}, nil
	})
	defer undo()
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, `a1.channels = c1
a1.sinks = k1
a1.channels.c1.type = memory
a1.sinks.k1.type = stuck
a1.sinks.k1.channel = c1
`)
	logs := &testutil.LogBuffer{}
	a, err := agent.New(agent.Options{Name: "a1", File: file, StopTimeout: 300 * time.Millisecond, ShutdownTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- a.Stop(context.Background()) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Stop still waiting after 10 s for a sink that ignores its context; logs:\n%s", logs)
	}
	t.Logf("stopped after %v", time.Since(t0).Round(time.Millisecond))
	if n := logs.Lines("did not stop within"); n != 1 {
		t.Errorf("%d lines saying the sink did not stop, want 1:\n%s", n, logs)
	}
}

// TestStopDuringStartStartsNoSource: a stop asked for while the agent
// starts (here before Run begins; in life, during a file channel's long
// replay) means no source starts listening, so nothing is acknowledged
// after the signal.
func TestStopDuringStartStartsNoSource(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, netcatPipeline(testutil.FreePort(t), testutil.FreePort(t), 1000))
	logs := &testutil.LogBuffer{}
	a, err := agent.New(agent.Options{Name: "a1", File: file, ShutdownTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx, nil); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := logs.Lines("listening"); n != 0 {
		t.Errorf("a source started listening after the stop was asked for:\n%s", logs)
	}
}
