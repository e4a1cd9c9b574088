package agent

// Stopping: what a stop or a reload does with each part of a graph that goes
// away (intake closed at once, then the channels drained, handed over or
// kept, then sinks and channels stopped), what a channel that does not keep its events loses at the deadline
// (ChannelLoss, DroppedError), and Abort for a second signal. Starting and
// retrying are in lifecycle.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
)

// chanFate is what a stop or a reload does with a channel that goes away.
type chanFate int

const (
	drainFirst chanFate = iota // its sinks empty it until the deadline; what is left is reported
	handOver                   // the replacement memory channel adopts its events
	keepStored                 // durable and replaced: its storage keeps the events for the replacement
)

// adopter is a channel that can take over the events of the channel it
// replaces (the memory channel).
type adopter interface {
	Adopt(old flow.Channel) (int, bool)
}

// heldCounter is a channel that can tell how many events it holds
// including those taken by open transactions, or as a Kafka channel does,
// its lag.
type heldCounter interface {
	Held() int
}

// held is how many events ch holds now, or -1 when it cannot tell.
func held(ch flow.Channel) int {
	if h, ok := ch.(heldCounter); ok {
		return h.Held()
	}
	return ch.Len()
}

func durable(ch flow.Channel) bool {
	d, ok := ch.(flow.Durable)
	return ok && d.Durable()
}

// ChannelLoss is what a channel that does not keep its events (memory) held
// when it was stopped: events acknowledged to their senders and lost
// (Events: no delivery had them), and those of deliveries the shutdown
// deadline cut off (InFlight: the downstream may or may not have them).
type ChannelLoss struct {
	Channel  string
	Events   int
	InFlight int
}

// lossSplitter is a channel that tells its lost events from those in
// flight at the deadline (the memory channel).
type lossSplitter interface {
	Loss() (lost, inFlight int)
}

// loss splits left, what ch held, into lost and in flight.
func loss(ch flow.Channel, left int) (lost, inFlight int) {
	if l, ok := ch.(lossSplitter); ok {
		return l.Loss()
	}
	return left, 0
}

// DroppedError is returned by Stop when channels that do not keep their
// events (memory channels) still held some when they were stopped: the
// sinks could not deliver them within the shutdown timeout. Each was logged
// as an ERROR with its count.
type DroppedError struct {
	Channels []ChannelLoss
}

// Events is the total dropped: lost for sure.
func (e *DroppedError) Events() int {
	n := 0
	for _, c := range e.Channels {
		n += c.Events
	}
	return n
}

// InFlight is the total of events in flight at the deadline, whose
// delivery is unknown.
func (e *DroppedError) InFlight() int {
	n := 0
	for _, c := range e.Channels {
		n += c.InFlight
	}
	return n
}

func (e *DroppedError) Error() string {
	parts := make([]string, len(e.Channels))
	for i, c := range e.Channels {
		parts[i] = fmt.Sprintf("%s: %d lost, %d in flight", c.Channel, c.Events, c.InFlight)
	}
	return fmt.Sprintf("%d events dropped from memory channels at stop, and %d in flight whose delivery is unknown (%s)",
		e.Events(), e.InFlight(), strings.Join(parts, ", "))
}

// stopNodes stops the nodes of g that next does not keep (all of them when
// next is nil: the agent stops), two-phase:
//
//  1. intake stops at once: every such source's ChannelProcessor is closed
//     (nothing is acknowledged after this), then the sources are stopped;
//  2. meanwhile their sink runners drain the channels that go away, until
//     deadline; then runners and sinks stop (a batch in flight rolls back),
//     and the channels stop.
//
// A memory channel that next replaces with another memory channel is not
// drained: the caller hands its events over (handed lists them). A durable
// channel that next replaces keeps its events in its storage. Any other
// channel that goes away is drained first; what a durable one still holds
// then is logged at INFO (kept for the next start), what another one holds
// at ERROR (dropped), and returned.
//
// At a stop (next nil) stopNodes returns when everything has stopped. At a
// reload it returns once the sources and the parts that need no drain have
// stopped; the part that drains (its runners, their sinks and channels) goes
// on in the background and is returned (nil when nothing drains): its
// losses are logged when it ends, and its channels' hand-overs are the
// caller's then (see finishDrain).
func (a *Agent) stopNodes(g, next *graph, deadline time.Time, why string) (lost []ChannelLoss, handed []string, bg *drainPart) {
	keptSource := func(name string) bool { return next != nil && next.sources[name] == g.sources[name] }
	keptRunner := func(name string) bool { return next != nil && next.runners[name] == g.runners[name] }
	keptSink := func(name string) bool { return next != nil && next.sinks[name] == g.sinks[name] }
	keptChannel := func(name string) bool { return next != nil && next.channels[name] == g.channels[name] }

	fate := map[string]chanFate{}
	for name, n := range g.channels {
		if keptChannel(name) {
			continue
		}
		f := drainFirst
		if next != nil {
			if nn := next.channels[name]; nn != nil {
				_, canAdopt := nn.ch.(adopter)
				switch {
				case canAdopt && canonicalType(nn.spec.Type) == canonicalType(n.spec.Type):
					f = handOver
				case durable(n.ch):
					f = keepStored
				}
			}
		}
		fate[name] = f
	}

	// The part that drains: every runner that goes and takes from a channel
	// that is drained first, its sinks, and every channel they take from
	// that goes too (a channel handed over or kept in storage by a runner
	// that also drains another one waits for that drain).
	p := &drainPart{g: g, why: why, deadline: deadline, started: time.Now(), fate: map[string]chanFate{},
		runners: map[string][]flow.Channel{}, sinks: map[string]bool{}, done: make(chan struct{})}
	for _, name := range sortedKeys(g.runners) {
		r := g.runners[name]
		if keptRunner(name) || r.runner == nil {
			continue
		}
		var chans []flow.Channel
		for _, m := range r.members {
			if sn := g.sinks[m]; sn != nil {
				if f, gone := fate[sn.spec.Channel]; gone && f == drainFirst && !slices.Contains(chans, g.channels[sn.spec.Channel].ch) {
					chans = append(chans, g.channels[sn.spec.Channel].ch)
				}
			}
		}
		if len(chans) == 0 {
			continue
		}
		p.runners[name] = chans
		for _, m := range r.members {
			if sn := g.sinks[m]; sn != nil {
				p.sinks[m] = true
				if f, gone := fate[sn.spec.Channel]; gone {
					p.fate[sn.spec.Channel] = f
				}
			}
		}
	}
	for name, f := range fate {
		if _, inPart := p.fate[name]; !inPart && f == handOver {
			handed = append(handed, name)
		}
	}
	sort.Strings(handed)

	drainCtx, cancelDrain := context.WithDeadline(context.Background(), deadline)
	defer cancelDrain()

	// Phase 1: no source puts anything from now on.
	var sources []*sourceNode
	var names []string
	for _, name := range sortedKeys(g.sources) {
		if !keptSource(name) {
			sources = append(sources, g.sources[name])
			names = append(names, name)
		}
	}
	var wg sync.WaitGroup
	for i, n := range sources {
		a.setLife(&n.life, stopping)
		wg.Add(1)
		panics.Go("intake close of source "+names[i], func() {
			defer wg.Done()
			if c, ok := n.proc.(interface{ Close(context.Context) error }); ok {
				if err := c.Close(drainCtx); err != nil {
					a.log.Warn("a put in progress did not finish before the shutdown deadline", "component", names[i], "err", err)
				}
			}
		})
	}
	wg.Wait()
	if len(sources) > 0 {
		a.log.Info("intake closed: sources refuse new events from now on", "why", why, "sources", strings.Join(names, " "),
			"shutdown_timeout", a.opts.ShutdownTimeout)
	}
	var stops sync.WaitGroup
	for i, n := range sources {
		stops.Add(1)
		panics.Go("stop of source "+names[i], func() {
			defer stops.Done()
			if err := a.stopBounded("source", names[i], n.src.Stop); err != nil && !errors.Is(err, errLeftRunning) {
				a.log.Warn("source did not stop cleanly", "component", names[i], "err", err)
			}
			a.setLife(&n.life, stopped)
		})
	}

	// Phase 2, while the sources close: the drain, and the runners that
	// have nothing to drain stop.
	if len(p.runners) > 0 {
		for name := range p.runners {
			a.setDraining(&g.runners[name].life, deadline)
		}
		for name, f := range p.fate {
			if f == drainFirst {
				a.setDraining(&g.channels[name].life, deadline)
			}
		}
		panics.Go("background drain", func() { a.runDrain(p) })
	} else {
		close(p.done)
	}
	for _, name := range sortedKeys(g.runners) {
		r := g.runners[name]
		if _, inPart := p.runners[name]; keptRunner(name) || inPart {
			continue
		}
		a.setLife(&r.life, stopping)
		if r.runner == nil {
			continue
		}
		stops.Add(1)
		panics.Go("drain of sink runner "+name, func() {
			defer stops.Done()
			if err := a.stopBounded("sink runner", name, r.runner.Stop); err != nil && !errors.Is(err, errLeftRunning) {
				a.log.Warn("sink runner did not stop in time; its batch in flight stays taken", "runner", name, "err", err)
			}
			a.setLife(&r.life, stopped)
		})
	}
	stops.Wait()

	for _, name := range sortedKeys(g.sinks) {
		if keptSink(name) || p.sinks[name] {
			continue
		}
		a.stopSink(&stops, name, g.sinks[name])
	}
	stops.Wait()

	for _, name := range sortedKeys(g.channels) {
		f, gone := fate[name]
		if _, inPart := p.fate[name]; !gone || inPart {
			continue
		}
		if l := a.stopChannel(name, g.channels[name], f, why); l != nil {
			lost = append(lost, *l)
		}
	}
	if len(p.runners) == 0 {
		return lost, handed, nil
	}
	if next == nil {
		<-p.done
		return append(lost, p.lost...), handed, nil
	}
	return lost, handed, p
}

// stopSink stops sink n in a goroutine of wg.
func (a *Agent) stopSink(wg *sync.WaitGroup, name string, n *sinkNode) {
	a.setLife(&n.life, stopping)
	wg.Add(1)
	panics.Go("stop of sink "+name, func() {
		defer wg.Done()
		if err := a.stopBounded("sink", name, n.sink.Stop); err != nil && !errors.Is(err, errLeftRunning) {
			a.log.Warn("sink did not stop cleanly", "component", name, "err", err)
		}
		a.setLife(&n.life, stopped)
	})
}

// stopChannel stops channel n, whose sinks have stopped, and says what it
// still holds: nothing for a channel handed over (the caller hands its
// events over), INFO for a durable one (kept), ERROR for another (dropped,
// and returned).
func (a *Agent) stopChannel(name string, n *channelNode, f chanFate, why string) *ChannelLoss {
	a.setLife(&n.life, stopping)
	var cl *ChannelLoss
	left := held(n.ch)
	switch {
	case f == handOver || left == 0:
	case durable(n.ch):
		count := any(left)
		if left < 0 {
			count = "unknown"
		}
		msg := "channel keeps its events for the next start"
		if f == keepStored {
			msg = "channel keeps its events in its storage for its replacement"
		}
		a.log.Info(msg, "component", name, "events", count, "why", why)
	case left > 0:
		gone, inFlight := loss(n.ch, left)
		if gone > 0 {
			a.log.Error("channel dropped events it still held: its sinks did not deliver them before the shutdown deadline",
				"component", name, "events", gone, "why", why, "shutdown_timeout", a.opts.ShutdownTimeout)
			a.reg.Dropped(name, "stopped_with_events").Add(float64(gone))
		}
		if inFlight > 0 {
			a.log.Error("channel dropped events its sinks were delivering when the shutdown deadline cut them off: the downstream may or may not have them (in flight, outcome unknown)",
				"component", name, "events", inFlight, "why", why, "shutdown_timeout", a.opts.ShutdownTimeout)
			a.reg.Dropped(name, "stopped_in_flight").Add(float64(inFlight))
		}
		cl = &ChannelLoss{Channel: name, Events: gone, InFlight: inFlight}
	}
	if err := a.stopBounded("channel", name, n.ch.Stop); err != nil && !errors.Is(err, errLeftRunning) {
		a.log.Warn("channel did not stop cleanly", "component", name, "err", err)
	}
	a.setLife(&n.life, stopped)
	return cl
}

// removeMetrics drops the counter sets of g's components that next does
// not have (all when next is nil), but for those a drain in the background
// still runs (finishDrain drops them). A replaced component's set was
// already replaced when next was built.
func (a *Agent) removeMetrics(g, next *graph) {
	for name := range g.sources {
		if next == nil || next.sources[name] == nil {
			a.reg.Remove(metrics.KindSource, name)
		}
	}
	for name := range g.sinks {
		if (next == nil || next.sinks[name] == nil) && a.drainOf("sink", name) == nil {
			a.reg.Remove(metrics.KindSink, name)
		}
	}
	for name := range g.channels {
		if (next == nil || next.channels[name] == nil) && a.drainOf("channel", name) == nil {
			a.reg.Remove(metrics.KindChannel, name)
		}
	}
}

// Abort is for a second SIGTERM or SIGINT, while a Stop is under way: it
// logs what every channel still holds (memory channels: ERROR, the events
// are dropped; durable ones: INFO, kept) and returns how many events memory
// channels drop. The caller then exits at once. It does not wait for the
// stop in progress.
func (a *Agent) Abort() int {
	a.stmu.Lock()
	chans := map[string]flow.Channel{}
	for name, n := range a.g.channels {
		chans[name] = n.ch
	}
	// The channels a reload removed that still drain (a name the running
	// graph has too is reported once, the running channel's).
	for _, p := range a.drains {
		for _, name := range p.channels() {
			if _, ok := chans[name]; !ok {
				chans[name] = p.g.channels[name].ch
			}
		}
	}
	a.stmu.Unlock()
	total, unknown := 0, 0
	for _, name := range sortedKeys(chans) {
		ch := chans[name]
		left := held(ch)
		switch {
		case left == 0:
		case durable(ch):
			count := any(left)
			if left < 0 {
				count = "unknown"
			}
			a.log.Info("stopping at once: channel keeps its events for the next start", "component", name, "events", count)
		default:
			gone, inFlight := loss(ch, left)
			a.log.Error("stopping at once: channel drops the events it holds", "component", name, "events", gone,
				"in_flight_unknown", inFlight)
			total += gone
			unknown += inFlight
		}
	}
	a.log.Error("agent stopped at once by a second signal, without finishing the drain", "agent", a.opts.Name, "dropped", total,
		"in_flight_unknown", unknown)
	return total
}
