package flow

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWorker(t *testing.T) {
	var w Worker
	if err := w.Stop(context.Background()); err != nil || w.Running() {
		t.Fatalf("stop of an idle worker: %v, running %v", err, w.Running())
	}
	exited := make(chan struct{})
	if !w.Go("test", func(ctx context.Context) { <-ctx.Done(); close(exited) }) {
		t.Fatal("first Go refused")
	}
	if w.Go("test", func(context.Context) {}) {
		t.Fatal("second Go accepted while running")
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	default:
		t.Fatal("Stop returned before the goroutine exited")
	}
	// A goroutine that ignores its context: Stop gives up when its ctx ends.
	release := make(chan struct{})
	w.Go("test", func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline", err)
	}
	close(release)
}
