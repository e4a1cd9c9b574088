package agent

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Status describes the agent as it is now: its state, and every source,
// channel and sink with its state and, when it is not running or cannot
// work, the reason. It is what /healthz serves. It never waits for a stop
// or a reload in progress, and says nothing that is no longer true: every
// reason is computed from the components' state at the call.
//
// Reasons quote the components' errors, which may hold secrets: what serves
// or prints the status masks them (the monitoring handlers, through the
// registry's and the status page's Redact; Health).
func (a *Agent) Status() metrics.Status {
	a.stmu.Lock()
	defer a.stmu.Unlock()
	st := metrics.Status{Agent: a.opts.Name, State: a.state}
	g := a.g
	if g == nil {
		return st
	}
	now := time.Now()
	add := func(kind, name, typ string, l *life, comp any, waiting string, runner *flow.SinkRunner) {
		c := metrics.ComponentStatus{Kind: kind, Name: name, Type: canonicalType(typ)}
		switch l.state {
		case running:
			c.State = "running"
			if waiting != "" {
				c.State, c.Reason = "starting", waiting
			} else if h, ok := comp.(flow.HealthReporter); ok {
				if err := h.Health(); err != nil {
					c.Reason = err.Error()
				}
			} else if runner != nil {
				if err := runner.Health(); err != nil {
					c.Reason = err.Error()
				}
			}
		case failed:
			c.State = "failed"
			c.Reason = fmt.Sprintf("not running: failed to start (attempt %d): %v; retrying in %s",
				l.tries, l.err, max(l.next.Sub(now), 0).Round(100*time.Millisecond))
		case notStarted:
			c.State, c.Reason = "starting", "not started yet"
			if waiting != "" {
				c.Reason = waiting
			}
		case stopping, stopped:
			c.State, c.Reason = "stopping", "stopping"
		}
		st.Components = append(st.Components, c)
	}
	for _, name := range sortedKeys(g.sources) {
		n := g.sources[name]
		waiting := ""
		if w := waitingFor(g, n); w != "" {
			waiting = "not running: waiting for channel " + w + ", which is not running"
		}
		add("source", name, n.spec.Type, &n.life, n.src, waiting, nil)
	}
	for _, name := range sortedKeys(g.channels) {
		n := g.channels[name]
		add("channel", name, n.spec.Type, &n.life, n.ch, "", nil)
	}
	for _, name := range sortedKeys(g.sinks) {
		n := g.sinks[name]
		waiting := ""
		var runner *flow.SinkRunner
		if r := g.runners[n.runner]; r != nil && r.life.state == running {
			runner = r.runner
		}
		if r := g.runners[n.runner]; r != nil && r.life.state != running && n.life.state == running {
			if cn := g.channels[n.spec.Channel]; cn == nil || cn.life.state != running {
				waiting = "not running: waiting for channel " + n.spec.Channel + ", which is not running"
			} else {
				waiting = "not running: waiting for the other sinks of group " + n.runner
			}
		}
		add("sink", name, n.spec.Type, &n.life, n.sink, waiting, runner)
	}
	return st
}

// Health returns nil when the agent runs and every component can work, or
// one line per problem (see Status), secrets masked.
func (a *Agent) Health() error {
	st := a.Status()
	if st.Healthy() {
		return nil
	}
	return errors.New(a.secrets.String(strings.Join(st.Problems(), "\n")))
}
