package taildirsource

import (
	"context"
	"errors"
	"strconv"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// put sends the chunks of slab as one batch, retrying while the channel is
// full, and reports whether they were committed (false only when the source
// is stopping). Each attempt builds its events afresh from the slab, so a
// retry does not see what interceptors made of the failed one.
func (t *tailer) put(ctx context.Context, tf *tailFile, slab []byte, chunks []chunk) bool {
	return t.putBatch(ctx, tf, len(chunks), func(now int64) []event.Event { return t.build(tf, slab, chunks, now) })
}

// putBatch sends the n events build makes as one batch, as put does.
func (t *tailer) putBatch(ctx context.Context, tf *tailFile, n int, build func(now int64) []event.Event) bool {
	c := t.s.counters
	c.EventReceived.Add(int64(n))
	c.AppendBatchReceived.Add(1)
	now := event.Now()
	r := flow.Retry{RetryAll: true, Counters: c, Streak: t.puts,
		Backoff: flow.PutBackoff{Min: t.s.backoffIncrement, Max: t.s.maxBackoff, Linear: true}}
	err := r.Put(ctx, t.p, func() []event.Event { return build(now) }, func() []any { return []any{"file", tf.path} })
	if errors.Is(err, flow.ErrStopping) {
		// The agent is stopping or replacing the source: nothing more
		// will be put. run waits for Stop; the position stays, so the
		// next start reads on from here.
		t.stopping = true
	}
	if err != nil {
		return false
	}
	c.EventAccepted.Add(int64(n))
	c.AppendBatchAccepted.Add(1)
	return true
}

// build makes the events of one batch: the bodies are slices of slab, and
// headers are made only when some are configured or the event is a piece
// of a split line.
func (t *tailer) build(tf *tailFile, slab []byte, chunks []chunk, now int64) []event.Event {
	var common event.Headers
	if g := tf.group; g != nil {
		common = g.headers
	}
	if t.s.fileHeader {
		common = append(common[:len(common):len(common)], event.Header{Key: t.s.fileHeaderKey, Value: tf.path})
		common.Dedupe()
	}
	headers := t.s.byteOffsetHeader || len(common) > 0
	t.events = t.events[:0]
	for _, c := range chunks {
		e := event.Event{Body: slab[c.lo:c.hi:c.hi], ReceivedAt: now}
		if headers || c.piece > 0 {
			e.Headers = append(t.arena.Make(len(common)+3), common...)
			if t.s.byteOffsetHeader {
				e.Headers.Set("byteoffset", strconv.FormatInt(tf.base+tf.pos+int64(c.lo), 10))
			}
			if c.piece > 0 {
				e.Headers.Set(pieceHeader, strconv.Itoa(c.piece))
				e.Headers.Set(lastPieceHeader, strconv.FormatBool(c.last))
			}
		}
		t.events = append(t.events, e)
	}
	return t.events
}
