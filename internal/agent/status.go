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
// work, the reason. A channel or sink that drains (at a stop, or after a
// reload removed it) says so with the events left. It is what /healthz
// serves. It never waits for a stop or a reload in progress, and says
// nothing that is no longer true: every reason is computed from the
// components' state at the call.
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
	for _, name := range sortedKeys(g.sources) {
		n := g.sources[name]
		c := component("source", name, n.spec.Type)
		handled := lifeStatus(&c, &n.life, now)
		w := waitingFor(g, n)
		switch {
		case w != "" && (n.life.state == running || n.life.state == notStarted):
			c.State, c.Reason = "starting", "not running: waiting for channel "+w+", which is not running"
		case !handled:
			c.Reason = health(n.src, nil)
		}
		st.Components = append(st.Components, c)
	}
	for _, name := range sortedKeys(g.channels) {
		n := g.channels[name]
		c := component("channel", name, n.spec.Type)
		if p := a.drainOf("channel", name); p != nil && n.life.state == notStarted {
			left := held(p.g.channels[name].ch)
			c.State, c.Left = "starting", count(left)
			c.Reason = fmt.Sprintf("not running: waiting for the channel %s of the previous configuration to drain (%s)", name, eventsLeft(left))
		} else if !a.channelStatus(&c, n, now, "") {
			c.Reason = health(n.ch, nil)
		}
		st.Components = append(st.Components, c)
	}
	for _, name := range sortedKeys(g.sinks) {
		n := g.sinks[name]
		c := component("sink", name, n.spec.Type)
		if p := a.drainOf("sink", name); p != nil && n.life.state == notStarted {
			old := p.g.sinks[name]
			left := p.left(old.runner)
			c.State, c.Left = "starting", count(left)
			c.Reason = fmt.Sprintf("not running: waiting for the sink %s of the previous configuration to drain channel %s (%s)",
				name, old.spec.Channel, eventsLeft(left))
		} else {
			sinkStatus(&c, g, n, now, "")
		}
		st.Components = append(st.Components, c)
	}
	// What reloads removed and still drains, unless the running graph has
	// a component of that name (which then says it waits for the drain).
	for _, p := range a.drains {
		for _, name := range p.channels() {
			if g.channels[name] == nil {
				c := component("channel", name, p.g.channels[name].spec.Type)
				a.channelStatus(&c, p.g.channels[name], now, "removed by a reload; ")
				st.Components = append(st.Components, c)
			}
		}
		for _, name := range sortedKeys(p.sinks) {
			if g.sinks[name] == nil {
				n := p.g.sinks[name]
				c := component("sink", name, n.spec.Type)
				sinkStatus(&c, p.g, n, now, "removed by a reload; ")
				st.Components = append(st.Components, c)
			}
		}
	}
	return st
}

func component(kind, name, typ string) metrics.ComponentStatus {
	return metrics.ComponentStatus{Kind: kind, Name: name, Type: canonicalType(typ), State: "running"}
}

// lifeStatus sets c's state, and reason, from l when the node does not
// run (or drains), and reports whether it did.
func lifeStatus(c *metrics.ComponentStatus, l *life, now time.Time) bool {
	switch l.state {
	case running:
		return false
	case failed:
		c.State = "failed"
		c.Reason = fmt.Sprintf("not running: failed to start (attempt %d): %v; retrying in %s",
			l.tries, l.err, max(l.next.Sub(now), 0).Round(100*time.Millisecond))
	case notStarted:
		c.State, c.Reason = "starting", "not started yet"
	case stopping, stopped:
		c.State, c.Reason = "stopping", "stopping"
	case draining:
		c.State = "draining"
	}
	return true
}

// health is comp's own report, else the runner's, as a reason.
func health(comp any, runner *flow.SinkRunner) string {
	var err error
	if p, ok := comp.(flow.PanicReporter); ok && p.Panicked() != nil {
		// A panic the sink caught in its delivery comes first: it is a bug
		// to report, whatever the downstream's state.
		err = p.Panicked()
	} else if h, ok := comp.(flow.HealthReporter); ok {
		err = h.Health()
	} else if runner != nil {
		err = runner.Health()
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// channelStatus sets c from channel n's life, a draining one with the
// events it holds, and reports whether n does not simply run.
func (a *Agent) channelStatus(c *metrics.ComponentStatus, n *channelNode, now time.Time, prefix string) bool {
	if !lifeStatus(c, &n.life, now) {
		return false
	}
	if n.life.state == draining {
		left := held(n.ch)
		c.Left = count(left)
		c.Note = drainNote(prefix+"draining", left, n.life.until, now)
		c.Reason = health(n.ch, nil)
	}
	return true
}

// sinkStatus sets c from sink n of g and its runner: a sink whose runner
// drains says so with what its channel holds; one whose runner does not run
// yet says what it waits for (the other sinks of its group only when it has
// a group).
func sinkStatus(c *metrics.ComponentStatus, g *graph, n *sinkNode, now time.Time, prefix string) {
	if cn := g.channels[n.spec.Channel]; n.life.state == notStarted && (cn == nil || cn.life.state != running) {
		// Said the same way whether the sink itself or only its runner
		// waits, as for a source.
		c.State, c.Reason = "starting", "not running: waiting for channel "+n.spec.Channel+", which is not running"
		return
	}
	if lifeStatus(c, &n.life, now) {
		return
	}
	r := g.runners[n.runner]
	if r == nil {
		c.Reason = health(n.sink, nil)
		return
	}
	switch r.life.state {
	case running:
		c.Reason = health(n.sink, r.runner)
	case draining:
		c.State = "draining"
		left := -1
		if cn := g.channels[n.spec.Channel]; cn != nil {
			left = held(cn.ch)
		}
		c.Left = count(left)
		c.Note = drainNote(prefix+"draining channel "+n.spec.Channel, left, r.life.until, now)
		c.Reason = health(n.sink, r.runner)
	case stopping, stopped:
		c.State, c.Reason = "stopping", "stopping"
	default:
		c.State = "starting"
		switch cn := g.channels[n.spec.Channel]; {
		case cn == nil || cn.life.state != running:
			c.Reason = "not running: waiting for channel " + n.spec.Channel + ", which is not running"
		case r.group != nil:
			c.Reason = "not running: waiting for the other sinks of group " + n.runner
		default:
			c.Reason = "not started yet"
		}
	}
}

// count is n as Left reports it: nil when unknown.
func count(n int) *int64 {
	if n < 0 {
		return nil
	}
	v := int64(n)
	return &v
}

func eventsLeft(n int) string {
	if n < 0 {
		return "the number of events left is unknown"
	}
	return fmt.Sprintf("%d events left", n)
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
