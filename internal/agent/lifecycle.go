package agent

// Starting: each node's life (not started, running, failed, draining,
// stopping), a graph started in order (channels, sinks, sources) with the
// failed ones retried in the background, and the bounded stop of one
// component. Stopping a graph is in stop.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/panics"
)

// Defaults of Options' timeouts.
const (
	// DefaultShutdownTimeout bounds a stop (and the drain of a channel a
	// reload removes): long enough for one sink to empty a full default file
	// channel (1,000,000 events) at 50,000 events a second, and a full
	// default memory channel (100 events) a thousand times over; short enough
	// that the agent reports and exits before a supervisor's own kill
	// (Kubernetes waits 30 s by default, systemd 90 s).
	DefaultShutdownTimeout = 20 * time.Second
	// DefaultStopTimeout bounds how long one component may take to start or
	// stop once asked (a sink rolling back its batch, a source closing).
	DefaultStopTimeout = 5 * time.Second
)

// Retries of a component that failed to start (a port in use): the first
// after RetryMin, doubling up to RetryMax, until it starts or a reload
// replaces it.
const (
	RetryMin = time.Second
	RetryMax = 30 * time.Second
)

// nodeState is where one node of the graph is in its life.
type nodeState int

const (
	notStarted nodeState = iota // built; not started yet, or waiting for a channel it needs
	running
	failed // its start failed; it is retried at life.next
	stopping
	stopped
	// draining: a sink runner (and the channel it empties) whose sinks
	// deliver what a channel that goes away still holds, until life.until;
	// at a stop, or in the background after a reload that removed it.
	draining
)

// life is the run state of one node. It is written under Agent.stmu (and
// under Agent.mu, but for the nodes of a drain that runs in the
// background), so Status can read it under stmu alone while a stop or a
// reload holds mu.
type life struct {
	state nodeState
	err   error     // why the last start failed
	tries int       // failed starts in a row
	next  time.Time // when the next start is due, after a failure
	until time.Time // draining: the deadline of the drain
	// streak tells the failed starts (logthrottle.Streak): the first at
	// once, a summary every 5 minutes while they go on, and when the node
	// starts, the summary then "component started after failing to".
	streak *logthrottle.Streak
}

func retryWait(tries int) time.Duration {
	d := RetryMin
	for i := 1; i < tries && d < RetryMax; i++ {
		d *= 2
	}
	return min(d, RetryMax)
}

func (a *Agent) setLife(l *life, st nodeState) {
	a.stmu.Lock()
	l.state = st
	a.stmu.Unlock()
}

// setDraining marks a node draining until deadline.
func (a *Agent) setDraining(l *life, deadline time.Time) {
	a.stmu.Lock()
	l.state, l.until = draining, deadline
	a.stmu.Unlock()
}

// started records the result of starting one node, and logs a failure
// as a streak (a port held for an hour is not logged 120 times, and a
// node that started says so, once, with nothing about its failures after).
func (a *Agent) started(l *life, kind, name string, err error) error {
	a.stmu.Lock()
	defer a.stmu.Unlock()
	if err == nil {
		if l.streak != nil {
			l.streak.Ok("kind", kind, "component", name)
		}
		l.state, l.err, l.tries = running, nil, 0
		return nil
	}
	l.state, l.err = failed, err
	l.tries++
	wait := retryWait(l.tries)
	l.next = time.Now().Add(wait)
	err = fmt.Errorf("%s %s failed to start: %w", kind, name, err)
	if a.state == "starting" {
		// The agent's own start fails as a whole: no retry.
		a.log.Error("component failed to start", "kind", kind, "component", name, "err", err)
		return err
	}
	if l.streak == nil {
		l.streak = &logthrottle.Streak{Log: a.log, Level: slog.LevelError, Every: 5 * time.Minute,
			Failed: "component failed to start; retrying", Recovered: "component started after failing to"}
	}
	l.streak.Fail(err, "kind", kind, "component", name, "attempt", l.tries, "retry_in", wait.String())
	return err
}

// stopStartStreaks writes, at the agent's stop, the summary of failed
// starts held back for the nodes of g still failing to start; a node that
// started has ended its streak, so nothing stale is said of it.
func stopStartStreaks(g *graph) {
	if g == nil {
		return
	}
	var lives []*life
	for _, n := range g.channels {
		lives = append(lives, &n.life)
	}
	for _, n := range g.sinks {
		lives = append(lives, &n.life)
	}
	for _, n := range g.sources {
		lives = append(lives, &n.life)
	}
	for _, l := range lives {
		if l.streak != nil {
			l.streak.Stop()
		}
	}
}

func (a *Agent) componentCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), a.opts.StopTimeout)
}

// stopGrace is how long past its stop timeout the agent still waits for a
// component's Stop before it goes on without it.
const stopGrace = time.Second

// errLeftRunning is what stopBounded returns for a Stop it stopped waiting
// for; it has logged it already.
var errLeftRunning = errors.New("left running")

// stopBounded calls stop with a context that ends after StopTimeout and
// waits for it at most stopGrace longer. Every Stop must honour its context;
// one that does not (a sink blocked on a downstream that stopped reading
// did) would hold the agent's stop or reload for ever. It is left running,
// said once at ERROR, and the process's exit ends it.
func (a *Agent) stopBounded(kind, name string, stop func(context.Context) error) error {
	ctx, cancel := a.componentCtx()
	defer cancel()
	done := make(chan error, 1)
	panics.Go("stop of "+kind+" "+name, func() { done <- stop(ctx) })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		a.log.Error(kind+" did not stop within its stop timeout; going on without it", "component", name,
			"waited", a.opts.StopTimeout+stopGrace)
		return errLeftRunning
	}
}

// startNodes starts every node of g that is not running and whose channels
// run, in order: channels, sinks, sink runners, sources. A node whose start
// failed before is tried again only once its retry is due, unless now is
// set (a start or a reload tries every one at once). A node whose name a
// drain in the background still holds (the channel a reload removed, and
// its sinks) waits for the end of that drain. Sources start only when
// intake is set. It returns the failures of this pass.
func (a *Agent) startNodes(g *graph, now, intake bool) error {
	t := time.Now()
	due := func(l *life) bool {
		switch l.state {
		case notStarted:
			return true
		case failed:
			return now || !t.Before(l.next)
		}
		return false
	}
	var errs []error
	for _, c := range g.cfg.Channels {
		n, ok := g.channels[c.Name]
		if !ok || !due(&n.life) || a.drainOf("channel", c.Name) != nil {
			continue
		}
		ctx, cancel := a.componentCtx()
		err := n.ch.Start(ctx)
		cancel()
		if err := a.started(&n.life, "channel", c.Name, err); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range g.cfg.Sinks {
		n, ok := g.sinks[c.Name]
		if !ok || !due(&n.life) || a.drainOf("sink", c.Name) != nil {
			continue
		}
		ctx, cancel := a.componentCtx()
		err := n.sink.Start(ctx)
		cancel()
		if err := a.started(&n.life, "sink", c.Name, err); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range sortedKeys(g.runners) {
		r := g.runners[name]
		if r.life.state == running || !runnerReady(g, r) || a.drainOf("runner", name) != nil {
			continue
		}
		r.runner = flow.NewSinkRunner(name, r.sink, a.log.With("runner", name))
		for _, m := range r.members {
			if sn := g.sinks[m]; sn != nil {
				r.runner.HealthGrace = max(r.runner.HealthGrace, sn.healthGrace)
			}
		}
		r.runner.Start()
		a.setLife(&r.life, running)
	}
	for _, c := range g.cfg.Sources {
		n, ok := g.sources[c.Name]
		// intakeClosed: a stop was asked for while channels started (a
		// long replay); no source may start acknowledging after it.
		if !ok || !intake || a.intakeClosed.Load() || !due(&n.life) || waitingFor(g, n) != "" {
			continue
		}
		ctx, cancel := a.componentCtx()
		err := n.src.Start(ctx, n.proc)
		cancel()
		if err != nil {
			// Undo what a source started before it failed (one of several
			// ports bound), so the retry starts from nothing.
			_ = a.stopBounded("source", c.Name, n.src.Stop)
		}
		if err := a.started(&n.life, "source", c.Name, err); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runnerReady reports whether every member sink of r and its channel run.
func runnerReady(g *graph, r *runnerNode) bool {
	for _, m := range r.members {
		sn := g.sinks[m]
		if sn == nil || sn.life.state != running {
			return false
		}
		if cn := g.channels[sn.spec.Channel]; cn == nil || cn.life.state != running {
			return false
		}
	}
	return true
}

// waitingFor names the channels of source n that do not run, or "".
func waitingFor(g *graph, n *sourceNode) string {
	var names []string
	for _, c := range n.spec.Channels {
		if cn := g.channels[c]; cn == nil || cn.life.state != running {
			names = append(names, c)
		}
	}
	return strings.Join(names, ", ")
}

// closeIntake makes every source of the current graph refuse puts from
// now on (without waiting for puts in progress: the stop does that) and
// keeps sources from starting. It is the first thing a stop does, and it
// does not wait for a reload in progress.
func (a *Agent) closeIntake() {
	a.intakeClosed.Store(true)
	a.stmu.Lock()
	g := a.g
	a.stmu.Unlock()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, n := range g.sources {
		if c, ok := n.proc.(interface{ Close(context.Context) error }); ok {
			_ = c.Close(done)
		}
	}
}

// nextRetry is when the earliest failed node of g is due, or zero.
func (g *graph) nextRetry() time.Time {
	var next time.Time
	see := func(l *life) {
		if l.state == failed && (next.IsZero() || l.next.Before(next)) {
			next = l.next
		}
	}
	for _, n := range g.channels {
		see(&n.life)
	}
	for _, n := range g.sinks {
		see(&n.life)
	}
	for _, n := range g.sources {
		see(&n.life)
	}
	return next
}

// retryLoop starts failed nodes of the current graph when their retry is
// due, until ctx ends. A reload wakes it (the new graph may have other
// failed nodes), and so does the end of a drain in the background (nodes
// wait for it).
func (a *Agent) retryLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		a.mu.Lock()
		if a.state == "running" && a.finishDrains() > 0 {
			// The nodes that waited for the drains that ended start.
			_ = a.startNodes(a.g, false, !a.intakeClosed.Load())
		}
		next := a.g.nextRetry()
		a.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-a.retryWake:
			continue
		case <-timer.C:
		}
		a.mu.Lock()
		if a.state == "running" {
			_ = a.startNodes(a.g, false, !a.intakeClosed.Load())
		}
		a.mu.Unlock()
	}
}

func (a *Agent) wakeRetry() {
	select {
	case a.retryWake <- struct{}{}:
	default:
	}
}
