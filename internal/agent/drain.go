package agent

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

// drainPart is the part of a graph whose sinks empty channels that go away:
// at a stop, every runner; at a reload, the runners of the channels it
// removes (or replaces by another type), with their sinks and channels. A
// reload's part drains in the background while the new graph runs, so a
// reload, and the next one, take effect at once; a node of a later graph
// with the name of one of its nodes waits for its end (startNodes), since
// two nodes of one name would share the name's metrics, files and
// downstream.
//
// Its nodes' life is written under Agent.stmu only; the other fields are set
// before its goroutine starts, but for lost, which is read after done.
type drainPart struct {
	g        *graph // the graph its nodes belong to
	why      string // "stop" or "reload"
	deadline time.Time
	started  time.Time
	// runners are the sink runners that drain, each with the channels it
	// empties.
	runners map[string][]flow.Channel
	sinks   map[string]bool // the runners' member sinks
	// fate is what becomes of each channel the runners take from that goes:
	// drained first, or (taken by a runner that also drains another one)
	// handed over or kept in storage once the runner stopped.
	fate map[string]chanFate
	done chan struct{} // closed when every node of the part has stopped
	lost []ChannelLoss // what its channels dropped; read after done
}

// channels lists the part's channels, sorted.
func (p *drainPart) channels() []string {
	var names []string
	for name := range p.fate {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// holds reports whether the part has a node of kind (channel, sink or
// runner) and name.
func (p *drainPart) holds(kind, name string) bool {
	switch kind {
	case "channel":
		_, ok := p.fate[name]
		return ok
	case "sink":
		return p.sinks[name]
	case "runner":
		_, ok := p.runners[name]
		return ok
	}
	return false
}

// left is how many events the channels runner drains still hold: -1 when
// one cannot tell.
func (p *drainPart) left(runner string) int {
	total := 0
	for _, ch := range p.runners[runner] {
		n := held(ch)
		if n < 0 {
			return -1
		}
		total += n
	}
	return total
}

// runDrain drains p's channels until they are empty or p's deadline, then
// stops p's runners, sinks and channels, and logs what each channel still
// held as a stop does. It closes p.done and wakes the retry loop, which
// finishes the part (finishDrain).
func (a *Agent) runDrain(p *drainPart) {
	defer a.wakeRetry()
	defer close(p.done)
	ctx, cancel := context.WithDeadline(context.Background(), p.deadline)
	defer cancel()
	var wg sync.WaitGroup
	for _, name := range sortedKeys(p.runners) {
		r := p.g.runners[name]
		wg.Add(1)
		panics.Go("drain of sink runner "+name, func() {
			defer wg.Done()
			if err := r.runner.Drain(ctx, p.runners[name]...); err != nil {
				a.log.Warn("sinks did not empty their channels before the shutdown deadline", "runner", name,
					"why", p.why, "shutdown_timeout", a.opts.ShutdownTimeout)
			}
			a.setLife(&r.life, stopping)
			if err := a.stopBounded("sink runner", name, r.runner.Stop); err != nil && !errors.Is(err, errLeftRunning) {
				a.log.Warn("sink runner did not stop in time; its batch in flight stays taken", "runner", name, "err", err)
			}
			a.setLife(&r.life, stopped)
		})
	}
	wg.Wait()
	for _, name := range sortedKeys(p.sinks) {
		a.stopSink(&wg, name, p.g.sinks[name])
	}
	wg.Wait()
	for _, name := range p.channels() {
		if l := a.stopChannel(name, p.g.channels[name], p.fate[name], p.why); l != nil {
			p.lost = append(p.lost, *l)
		}
	}
}

// drainOf returns the drain in the background that holds a node of kind
// and name, or nil. Call it with mu held.
func (a *Agent) drainOf(kind, name string) *drainPart {
	for _, p := range a.drains {
		if p.holds(kind, name) {
			return p
		}
	}
	return nil
}

// finishDrains finishes the drains in the background that have ended and
// returns how many it finished. Call it with mu held.
func (a *Agent) finishDrains() int {
	n := 0
	for _, p := range slices.Clone(a.drains) {
		select {
		case <-p.done:
			a.finishDrain(p)
			n++
		default:
		}
	}
	return n
}

// awaitDrains waits for every drain in the background to end and finishes
// it: at a stop, whose deadline is later than theirs (and each of their
// steps is bounded). It returns what channels those drains handed over
// dropped, since nothing adopts their events any more. Call it with mu
// held.
func (a *Agent) awaitDrains() []ChannelLoss {
	var lost []ChannelLoss
	for _, p := range slices.Clone(a.drains) {
		<-p.done
		lost = append(lost, a.finishDrain(p)...)
	}
	return lost
}

// finishDrain ends drain p, whose nodes have all stopped: the channels it
// handed over give their events to the channel of that name that waits in
// the running graph (when there is none, or the agent is stopping, what they
// held is dropped, said and returned), the metrics of its components go
// unless a running one has the name, and one line says what the drain
// delivered or dropped. The nodes that waited for it start at the next
// startNodes. Call it with mu held.
func (a *Agent) finishDrain(p *drainPart) []ChannelLoss {
	cur := a.g
	var lost []ChannelLoss
	for _, name := range p.channels() {
		if p.fate[name] != handOver {
			continue
		}
		old := p.g.channels[name]
		if nn := cur.channels[name]; nn != nil && nn.life.state == notStarted && a.state == "running" {
			if ad, ok := nn.ch.(adopter); ok {
				n, _ := ad.Adopt(old.ch)
				a.log.Info("channel replaced: its events were handed to the new one", "component", name, "events", n)
				continue
			}
		}
		if left := held(old.ch); left > 0 {
			a.log.Error("channel dropped events it still held: nothing took them over", "component", name, "events", left, "why", p.why)
			a.reg.Dropped(name, "stopped_with_events").Add(float64(left))
			lost = append(lost, ChannelLoss{Channel: name, Events: left})
		}
	}
	a.stmu.Lock()
	for i, d := range a.drains {
		if d == p {
			a.drains = append(a.drains[:i], a.drains[i+1:]...)
			break
		}
	}
	a.stmu.Unlock()
	gone := func(kind metrics.Kind, name string, inCur bool) {
		if !inCur && a.drainOf(strings.ToLower(string(kind)), name) == nil {
			a.reg.Remove(kind, name)
		}
	}
	for _, name := range p.channels() {
		gone(metrics.KindChannel, name, cur.channels[name] != nil)
	}
	for _, name := range sortedKeys(p.sinks) {
		gone(metrics.KindSink, name, cur.sinks[name] != nil)
	}
	dropped := 0
	for _, l := range append(lost, p.lost...) {
		dropped += l.Events
	}
	took := time.Since(p.started).Round(time.Millisecond)
	chans := strings.Join(p.channels(), " ")
	if dropped > 0 {
		a.log.Error("channels a reload removed dropped events: their sinks did not deliver them before the shutdown deadline",
			"channels", chans, "dropped", dropped, "took", took)
	} else {
		a.log.Info("channels a reload removed are drained", "channels", chans, "took", took)
	}
	return lost
}

// drainNote says what a draining node does: the events left in the
// channels it empties, and the time left before the deadline.
func drainNote(what string, left int, until, now time.Time) string {
	return fmt.Sprintf("%s: %s; deadline in %s", what, eventsLeft(left), max(until.Sub(now), 0).Round(100*time.Millisecond))
}
