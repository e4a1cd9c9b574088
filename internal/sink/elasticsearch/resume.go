package elasticsearchsink

// Resuming a rolled-back batch: what a failed Write indexed is remembered,
// and not sent again when the batch comes back.

import (
	"hash/maphash"

	"github.com/sluicehq/sluice/internal/event"
)

// pending is what a failed Write leaves for its retry: the hash of every
// event's body, in order, and which of them are done.
type pending struct {
	sums  []uint64
	state []uint8
}

func (w *Writer) sum(e *event.Event) uint64 { return maphash.Bytes(w.seed, e.Body) }

// resume marks the events a previous failed Write finished, when events
// start with that Write's batch (a rollback puts it back at the head of
// the channel).
func (w *Writer) resume(events []event.Event) {
	p := w.pending
	w.pending = nil
	if p == nil || len(events) < len(p.sums) {
		return
	}
	for i, s := range p.sums {
		if w.sum(&events[i]) != s {
			return
		}
	}
	copy(w.state, p.state)
}

// keep remembers which events are done, for the retry of this batch.
func (w *Writer) keep(events []event.Event) {
	p := &pending{sums: make([]uint64, len(events)), state: append([]uint8(nil), w.state...)}
	for i := range events {
		p.sums[i] = w.sum(&events[i])
		if p.state[i] == stDead {
			p.state[i] = stTodo // not written to the dead-letter file yet
		}
	}
	w.pending = p
}
