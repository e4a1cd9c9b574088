package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
)

// ProcessorConfig is what a ChannelProcessor is built from.
type ProcessorConfig struct {
	Source       string        // the source's name, for metrics and logs
	Interceptors []Interceptor // run in order before the selector
	Selector     Selector      // required
	Metrics      *metrics.Registry
	Logger       *slog.Logger
	// Tap, when set, is shown the events every required channel committed
	// (the source's output, after the interceptors), for `sluice tap`.
	Tap *Tap
}

// ChannelProcessor is Flume's ChannelProcessor: it runs a source's events
// through its interceptors, lets the selector pick channels, and puts them
// into each required channel in a transaction of its own, in turn, then into
// the optional channels. It is safe for concurrent use by the source's
// goroutines (one per connection, say).
//
// Like Flume's, it is not atomic across channels: when the second required
// channel fails, the first has already committed, and the sender's retry
// puts those events there again (at-least-once).
//
// A batch larger than a channel's transactionCapacity is put in several
// transactions of at most that size (Flume fails such a batch, forever);
// a failure part-way leaves the earlier parts committed, as above.
//
// Close is the gate that stops intake: the agent closes a source's
// processor before it stops the source (at a stop, or when a reload
// replaces the source). Close waits for the Process calls already in
// progress, and every later Process returns ErrStopping without putting
// anything, so no sender is acknowledged after the gate closed, whatever
// the source does with its open connections.
type ChannelProcessor struct {
	gate         *gate
	source       string
	interceptors []Interceptor
	sel          Selector
	chans        []SelectedChannel
	txCaps       []int
	log          *slog.Logger
	latency      metrics.Histogram
	optFailed    prometheus.Counter
	noChannel    prometheus.Counter
	optThrottle  *logthrottle.Throttle
	groups       sync.Pool // *groupScratch
	tap          *Tap
}

var _ Processor = (*ChannelProcessor)(nil)

// groupScratch holds the per-channel event lists of one Process call that
// has to group events (multiplexing).
type groupScratch struct {
	required, optional [][]event.Event
}

// NewChannelProcessor returns the processor of one source.
func NewChannelProcessor(cfg ProcessorConfig) *ChannelProcessor {
	reg := cfg.Metrics
	if reg == nil {
		reg = metrics.NewRegistry("")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &ChannelProcessor{
		gate:         newGate(),
		source:       cfg.Source,
		interceptors: cfg.Interceptors,
		sel:          cfg.Selector,
		chans:        cfg.Selector.Channels(),
		log:          log,
		latency:      reg.Latency(metrics.StageSource, cfg.Source),
		optFailed:    reg.Dropped(cfg.Source, "optional_channel_failed"),
		noChannel:    reg.Dropped(cfg.Source, "no_channel"),
		optThrottle:  logthrottle.New(10*time.Second, 1),
		tap:          cfg.Tap,
	}
	p.txCaps = make([]int, len(p.chans))
	for i, c := range p.chans {
		if tc, ok := c.Channel.(TxCapacity); ok {
			p.txCaps[i] = tc.TransactionCapacity()
		}
	}
	n := len(p.chans)
	p.groups.New = func() any {
		return &groupScratch{required: make([][]event.Event, n), optional: make([][]event.Event, n)}
	}
	return p
}

// TxLimit implements TxLimiter: the smallest transactionCapacity of the
// channels the source puts into (required and optional), 0 when none has
// one. A batch of at most this many events is one transaction in each.
func (p *ChannelProcessor) TxLimit() int {
	n := 0
	for _, c := range p.txCaps {
		if c > 0 && (n == 0 || c < n) {
			n = c
		}
	}
	return n
}

// Process implements Processor. After Close it returns ErrStopping.
func (p *ChannelProcessor) Process(ctx context.Context, events []event.Event) error {
	if !p.gate.enter() {
		return fmt.Errorf("source %s: %w", p.source, ErrStopping)
	}
	defer p.gate.leave()
	return p.process(ctx, events)
}

// Close closes the gate: every Process from now on returns ErrStopping.
// It waits until the calls already in progress have returned (a put waits
// at most its channel's keep-alive for space), or until ctx ends and then
// returns ctx's error. Calling it again waits again; it never reopens.
func (p *ChannelProcessor) Close(ctx context.Context) error {
	if err := p.gate.close(ctx); err != nil {
		return err
	}
	p.optThrottle.Flush()
	return nil
}

// Closed reports whether Close was called.
func (p *ChannelProcessor) Closed() bool { return p.gate.closed() }

// process routes each event once: events that all go the same way (the
// replicating selector, or a multiplexing one on a batch of one header
// value) are put as the batch they are; the first event that goes another
// way hands the batch, and the routes found so far, to processGrouped.
func (p *ChannelProcessor) process(ctx context.Context, events []event.Event) error {
	for _, ic := range p.interceptors {
		if len(events) == 0 {
			break
		}
		events = ic.Intercept(events)
	}
	if len(events) == 0 {
		return nil
	}
	if s, ok := p.sel.(*selector); ok && s.spreads() {
		return p.processGrouped(ctx, events, 0, route{}, route{})
	}
	req, opt := p.sel.Route(&events[0])
	for i := 1; i < len(events); i++ {
		r, o := p.sel.Route(&events[i])
		if !sameSlice(r, req) || !sameSlice(o, opt) {
			return p.processGrouped(ctx, events, i, route{req, opt}, route{r, o})
		}
	}
	if len(req) == 0 && len(opt) == 0 {
		p.noChannel.Add(float64(len(events)))
		return nil
	}
	for _, i := range req {
		if _, err := p.put(ctx, i, events); err != nil {
			return err
		}
	}
	p.observe(events)
	for _, i := range opt {
		p.putOptional(ctx, i, events)
	}
	return nil
}

// processGrouped puts each channel its own events, for selectors that route
// events of one batch differently. process has routed the first k events
// (to head) and, when k > 0, events[k] (to kth); they are not routed again,
// so each event is routed once (an expression evaluated once, a
// load_balancing turn taken once).
func (p *ChannelProcessor) processGrouped(ctx context.Context, events []event.Event, k int, head, kth route) error {
	g := p.groups.Get().(*groupScratch)
	defer func() {
		for i := range g.required {
			clear(g.required[i])
			g.required[i] = g.required[i][:0]
			clear(g.optional[i])
			g.optional[i] = g.optional[i][:0]
		}
		p.groups.Put(g)
	}()
	dropped := 0
	if k > 0 {
		for _, c := range head.required {
			g.required[c] = append(g.required[c], events[:k]...)
		}
		for _, c := range head.optional {
			g.optional[c] = append(g.optional[c], events[:k]...)
		}
		if len(head.required) == 0 && len(head.optional) == 0 {
			dropped += k
		}
	}
	for i := k; i < len(events); i++ {
		r, o := kth.required, kth.optional
		if i > k || k == 0 {
			r, o = p.sel.Route(&events[i])
		}
		for _, c := range r {
			g.required[c] = append(g.required[c], events[i])
		}
		for _, c := range o {
			g.optional[c] = append(g.optional[c], events[i])
		}
		if len(r) == 0 && len(o) == 0 {
			dropped++
		}
	}
	if dropped > 0 {
		p.noChannel.Add(float64(dropped))
	}
	for c, evs := range g.required {
		if len(evs) > 0 {
			if _, err := p.put(ctx, c, evs); err != nil {
				return err
			}
		}
	}
	p.observe(events)
	for c, evs := range g.optional {
		if len(evs) > 0 {
			p.putOptional(ctx, c, evs)
		}
	}
	return nil
}

func sameSlice(a, b []int) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// observe records the source stage latency of events, now that every
// required channel holds them, and shows them to the tap.
func (p *ChannelProcessor) observe(events []event.Event) {
	now := event.Now()
	for i := range events {
		p.latency.Since(events[i].ReceivedAt, now)
	}
	p.tap.Offer(events)
}

// put puts events into channel c in transactions of at most its
// transactionCapacity, and returns how many it committed.
func (p *ChannelProcessor) put(ctx context.Context, c int, events []event.Event) (int, error) {
	step := p.txCaps[c]
	if step <= 0 {
		step = len(events)
	}
	done := 0
	for done < len(events) {
		n := min(step, len(events)-done)
		if err := putTx(ctx, p.chans[c].Channel, events[done:done+n]); err != nil {
			return done, fmt.Errorf("source %s: put %d events into channel %s: %w", p.source, n, p.chans[c].Name, err)
		}
		done += n
	}
	return done, nil
}

func (p *ChannelProcessor) putOptional(ctx context.Context, c int, events []event.Event) {
	if done, err := p.put(ctx, c, events); err != nil {
		p.optFailed.Add(float64(len(events) - done))
		p.optThrottle.Log(p.log, slog.LevelWarn, "put into optional channel failed; events dropped from it", "put into optional channel failed; events dropped from it",
			"source", p.source, "channel", p.chans[c].Name, "events", len(events), "err", err)
	}
}

// putTx puts events into ch in one transaction, rolling back on failure.
// ctx bounds the commit's wait for space.
func putTx(ctx context.Context, ch Channel, events []event.Event) error {
	tx := ch.Begin()
	if err := tx.Put(events); err != nil {
		return errors.Join(err, rollbackErr(tx))
	}
	if err := tx.Commit(ctx); err != nil {
		return errors.Join(err, rollbackErr(tx))
	}
	return nil
}

func rollbackErr(tx Transaction) error {
	if err := tx.Rollback(); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}
