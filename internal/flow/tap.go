package flow

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

// Tap is a point where events can be watched as they pass: a source's
// output (what its ChannelProcessor committed into the required channels,
// after the interceptors) or a channel's take (what a sink took from it). It
// exists for `sluice tap`.
//
// Watching never changes delivery: Offer copies the sampled events and hands
// the copies to each reader without waiting; a reader that is too slow loses
// samples, which are counted. When nobody watches, Offer costs one atomic
// load. A nil *Tap is valid and never watched.
type Tap struct {
	mu      sync.Mutex // serialises Watch and Close
	readers atomic.Pointer[[]*TapReader]
}

// Offer shows events to the readers of t, if any. The caller keeps
// ownership of events: readers get copies of the few they sample.
func (t *Tap) Offer(events []event.Event) {
	if t == nil {
		return
	}
	rs := t.readers.Load()
	if rs == nil {
		return
	}
	now := time.Now()
	for _, r := range *rs {
		r.offer(events, now)
	}
}

// Watching reports whether anybody reads from t.
func (t *Tap) Watching() bool { return t != nil && t.readers.Load() != nil }

// Watch adds a reader that receives at most rate events a second (rate > 0),
// buffering at most buffer of them (at least 1) for a reader that is slower;
// beyond that, samples are dropped and counted. The caller must Close it.
func (t *Tap) Watch(rate float64, buffer int) *TapReader {
	r := &TapReader{
		tap:    t,
		events: make(chan event.Event, max(buffer, 1)),
		done:   make(chan struct{}),
		rate:   rate,
		tokens: min(rate, float64(max(buffer, 1))),
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var next []*TapReader
	if old := t.readers.Load(); old != nil {
		next = append(next, *old...)
	}
	next = append(next, r)
	t.readers.Store(&next)
	return r
}

func (t *Tap) remove(r *TapReader) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.readers.Load()
	if old == nil {
		return
	}
	var next []*TapReader
	for _, x := range *old {
		if x != r {
			next = append(next, x)
		}
	}
	if len(next) == 0 {
		t.readers.Store(nil)
		return
	}
	t.readers.Store(&next)
}

// TapReader receives the events sampled at one Tap.
type TapReader struct {
	tap     *Tap
	events  chan event.Event
	done    chan struct{}
	once    sync.Once
	dropped atomic.Int64

	mu     sync.Mutex // guards the token bucket
	rate   float64    // events a second
	tokens float64
	last   time.Time
}

// Events delivers the sampled copies. It is never closed; stop reading
// after Close.
func (r *TapReader) Events() <-chan event.Event { return r.events }

// Dropped returns how many sampled events were dropped because the reader
// did not keep up, and resets the count.
func (r *TapReader) Dropped() int64 { return r.dropped.Swap(0) }

// Close detaches the reader from its tap.
func (r *TapReader) Close() {
	r.once.Do(func() {
		close(r.done)
		r.tap.remove(r)
	})
}

// take returns how many of n events the token bucket lets through now.
func (r *TapReader) take(n int, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() {
		// A second's worth of tokens at most: a burst after a quiet spell
		// stays small.
		r.tokens = min(r.tokens+now.Sub(r.last).Seconds()*r.rate, max(r.rate, 1))
	}
	r.last = now
	k := min(int(r.tokens), n)
	r.tokens -= float64(k)
	return k
}

// offer samples k events spread evenly over the batch, copies them and
// sends the copies without waiting.
func (r *TapReader) offer(events []event.Event, now time.Time) {
	k := r.take(len(events), now)
	if k == 0 {
		return
	}
	step := len(events) / k
	for i := 0; i < k; i++ {
		e := &events[i*step]
		c := event.Event{Headers: e.Headers.Clone(), Body: append([]byte(nil), e.Body...),
			ReceivedAt: e.ReceivedAt, CommittedAt: e.CommittedAt}
		select {
		case r.events <- c:
		default:
			r.dropped.Add(1)
		}
	}
}

// Taps holds the tap points of one agent by component: one per source
// (its output) and one per channel (its take). Points outlive reloads, so a
// tap keeps watching a component that a reload replaced with one of the
// same name.
type Taps struct {
	mu     sync.Mutex
	points map[string]*Tap
}

// NewTaps returns an empty set of tap points.
func NewTaps() *Taps { return &Taps{points: map[string]*Tap{}} }

// Point returns the tap point of the component kind ("source" or "channel")
// named name, creating it. A nil Taps returns a nil Tap, which is never
// watched.
func (ts *Taps) Point(kind, name string) *Tap {
	if ts == nil {
		return nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	key := kind + "/" + name
	t, ok := ts.points[key]
	if !ok {
		t = &Tap{}
		ts.points[key] = t
	}
	return t
}
