// Package sourcetest holds the conformance suite every push source runs
// (RunSourceSuite, with a Harness: the source and its own sender), and
// helpers for the sources' tests: a pipeline of a real memory channel
// behind a processor, and a sink-side drain that takes events in
// transactions.
package sourcetest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Pipeline is a started memory channel and the processor a source puts
// into it through.
type Pipeline struct {
	Channel   flow.Channel
	Processor flow.Processor
}

// NewPipeline starts a memory channel of capacity events (transactions of
// at most txCap) whose commits wait keepAlive for space, and returns it with
// the ChannelProcessor that puts into it. The channel is stopped at the end of the test.
func NewPipeline(tb testing.TB, capacity, txCap int, keepAlive time.Duration) *Pipeline {
	tb.Helper()
	p := config.FromMap("a1.channels.c1.", map[string]string{
		"capacity":            strconv.Itoa(capacity),
		"transactionCapacity": strconv.Itoa(txCap),
		"keep-alive":          strconv.FormatFloat(keepAlive.Seconds(), 'f', -1, 64),
		"byteCapacity":        "0",
	})
	env := Env("c1", "memory")
	ch, err := memorychannel.New(env, p)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Err(); err != nil {
		tb.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := ch.Stop(context.Background()); err != nil {
			tb.Errorf("stop the channel: %v", err)
		}
	})
	proc, err := newProcessor(ch)
	if err != nil {
		tb.Fatal(err)
	}
	return &Pipeline{Channel: ch, Processor: proc}
}

// Take takes up to max events in one committed transaction, waiting up to
// wait for the first.
func (pl *Pipeline) Take(tb testing.TB, max int, wait time.Duration) []event.Event {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tx := pl.Channel.Begin()
	got, err := tx.Take(ctx, nil, max)
	if err != nil {
		_ = tx.Rollback() // the take's error is the one to report
		tb.Fatalf("take: %v", err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		tb.Fatalf("commit take: %v", err)
	}
	for i := range got {
		if k, ok := repeatedKey(got[i].Headers); ok {
			tb.Errorf("event %q has header %q more than once: %v", got[i].Body, k, got[i].Headers)
		}
	}
	return got
}

// repeatedKey returns a key h holds more than once: a source's events have
// each header once (event.Headers), as a map had them.
func repeatedKey(h event.Headers) (string, bool) {
	for i := range h {
		for j := range i {
			if h[j].Key == h[i].Key {
				return h[i].Key, true
			}
		}
	}
	return "", false
}

// Drain takes events until it has n of them or timeout passes, and returns
// what it took.
func (pl *Pipeline) Drain(tb testing.TB, n int, timeout time.Duration) []event.Event {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var out []event.Event
	for len(out) < n && time.Now().Before(deadline) {
		out = append(out, pl.Take(tb, min(n-len(out), 100), time.Until(deadline))...)
	}
	return out
}

// Bodies returns the bodies of events as strings.
func Bodies(events []event.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = string(e.Body)
	}
	return out
}

// Seq returns the strings prefix0 ... prefix(n-1).
func Seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// Env returns a component environment with a private metrics registry.
func Env(name, typ string) flow.Env {
	return flow.Env{Agent: "a1", Name: name, Type: typ, Metrics: metrics.NewRegistry("a1"), Logger: slog.New(slog.DiscardHandler)}
}

// Loopback returns props over bind 127.0.0.1 and port 0 (any free port),
// the address a network source listens on in tests.
func Loopback(props map[string]string) map[string]string {
	all := map[string]string{"bind": "127.0.0.1", "port": "0"}
	for k, v := range props {
		all[k] = v
	}
	return all
}

// New builds a source named as env names it from its properties (keys
// relative to a1.sources.NAME.) with newFn. An error, or a problem in the
// properties (a key the source does not read included), fails the test.
func New(tb testing.TB, newFn func(flow.Env, *config.Props) (flow.Source, error), env flow.Env, props map[string]string) flow.Source {
	tb.Helper()
	p := config.FromMap("a1.sources."+env.Name+".", props)
	s, err := newFn(env, p)
	if err != nil {
		tb.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		tb.Fatal(err)
	}
	return s
}

// Start starts s putting into p, and stops it (within 5 s) when the test
// ends.
func Start(tb testing.TB, s flow.Source, p flow.Processor) {
	tb.Helper()
	if err := s.Start(context.Background(), p); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			tb.Errorf("stop: %v", err)
		}
	})
}
