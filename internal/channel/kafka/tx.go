package kafkachannel

// Transactions: Put stages events and Commit produces them (produce.go);
// Take hands out fetched records (consume.go) and Commit marks them done and
// commits the offsets they free; Rollback drops the puts and puts the takes
// back at the head of the buffer.

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

type tx struct {
	c     *Channel
	puts  []event.Event
	takes []*rec
	ended bool
}

func (t *tx) Put(events []event.Event) error {
	t.c.counters.EventPutAttempt.Add(int64(len(events)))
	if len(t.puts)+len(events) > t.c.txCap {
		return flow.FullErrorf("channel %s: a transaction of more than %d events (transactionCapacity)", t.c.env.Name, t.c.txCap)
	}
	if h := t.c.partHeader; h != "" {
		for i := range events {
			if v, ok := events[i].Headers.Get(h); ok {
				if _, err := parsePartition(v); err != nil {
					// As Flume's KafkaChannel, which refuses the put ("Non
					// integer partition id specified"): the sender hears of it.
					return fmt.Errorf("channel %s: event header %s (partitionIdHeader) = %q: %w", t.c.env.Name, h, v, err)
				}
			}
		}
	}
	t.puts = append(t.puts, events...)
	return nil
}

func (t *tx) Take(ctx context.Context, dst []event.Event, max int) ([]event.Event, error) {
	c := t.c
	max = min(max, c.txCap-len(t.takes))
	if max <= 0 {
		return dst, nil
	}
	c.mu.Lock()
	for len(c.buf) == 0 {
		if c.stopped {
			c.mu.Unlock()
			return dst, flow.ErrClosed
		}
		if ctx.Err() != nil {
			c.mu.Unlock()
			c.counters.EventTakeAttempt.Add(1)
			return dst, nil
		}
		if c.notEmpty == nil {
			c.notEmpty = make(chan struct{})
		}
		wait := c.notEmpty
		c.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-wait:
		}
		c.mu.Lock()
	}
	k := min(max, len(c.buf))
	got := c.buf[:k]
	for _, x := range got {
		x.taken = true
		x.ps.taken++
	}
	t.takes = append(t.takes, got...)
	clear(c.buf[:k])
	c.buf = c.buf[k:]
	if len(c.buf) == 0 {
		c.buf = nil
	}
	if c.space != nil && len(c.buf) < c.maxBuffered()/2 {
		close(c.space)
		c.space = nil
	}
	c.mu.Unlock()

	attempts := int64(k)
	if k < max {
		attempts++
	}
	c.counters.EventTakeAttempt.Add(attempts)
	for _, x := range t.takes[len(t.takes)-k:] {
		dst = append(dst, c.toEvent(x.r))
	}
	return dst, nil
}

func (t *tx) Commit(ctx context.Context) error {
	if t.ended {
		return errors.New("kafka channel: transaction already ended")
	}
	c := t.c
	if len(t.puts) > 0 {
		if err := t.produce(ctx); err != nil {
			return err
		}
		c.counters.EventPutSuccess.Add(int64(len(t.puts)))
		clear(t.puts)
		t.puts = nil
	}
	if len(t.takes) > 0 {
		c.mu.Lock()
		for _, x := range t.takes {
			x.done = true
			x.ps.taken--
		}
		c.pruneOrphans()
		c.mu.Unlock()
		c.counters.EventTakeSuccess.Add(int64(len(t.takes)))
		t.takes = nil
		c.commitOffsets(nil)
	}
	t.ended = true
	return nil
}

func (t *tx) Rollback() error {
	if t.ended {
		return nil
	}
	t.ended = true
	c := t.c
	clear(t.puts)
	t.puts = nil
	if len(t.takes) == 0 {
		return nil
	}
	c.rollbacks.Add(1)
	c.mu.Lock()
	back := make([]*rec, 0, len(t.takes)+len(c.buf))
	for _, x := range t.takes {
		x.taken = false
		x.ps.taken--
		if !x.ps.revoked {
			back = append(back, x)
		}
	}
	c.buf = append(back, c.buf...)
	if len(back) > 0 {
		c.wake()
	}
	c.mu.Unlock()
	t.takes = nil
	return nil
}
