package filechannel

// Transactions: a put transaction stages its events in memory, and Commit
// writes them with a commit record to one data dir's log (group commit)
// before they join the queue; a take transaction takes events off the
// queue, reading back those not kept in memory, and Commit records the take
// in the log of each dir they came from without waiting for that record's
// own fdatasync (takesInFlight). Rollback puts taken events back in front.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/wal"
)

// reserve waits up to keep-alive, or until ctx is done, until n more
// events fit, then reserves them. Lock must be held; it is released while
// waiting.
func (c *Channel) reserve(ctx context.Context, n int) error {
	var timer *time.Timer
	for c.reserved+n > c.capacity {
		if !c.running {
			return fmt.Errorf("file channel %s: commit: %w", c.name, flow.ErrClosed)
		}
		if timer == nil {
			if c.keepAlive <= 0 {
				return c.fullError(n)
			}
			timer = time.NewTimer(c.keepAlive)
			defer timer.Stop()
		}
		expired, ended := c.notFull.Wait(ctx, &c.mu, timer.C)
		if ended && c.reserved+n > c.capacity {
			return flow.FullWaitEnded(ctx, "file channel %s is full: capacity %d reached (%d held or being taken, %d more to commit); "+
				"the put stopped waiting for space", c.name, c.capacity, c.reserved, n)
		}
		if expired && c.reserved+n > c.capacity {
			return c.fullError(n)
		}
	}
	if !c.running {
		return fmt.Errorf("file channel %s: commit: %w", c.name, flow.ErrClosed)
	}
	c.reserved += n
	return nil
}

func (c *Channel) fullError(n int) error {
	return flow.FullErrorf("file channel %s is full: capacity %d reached (%d held or being taken, %d more to commit) "+
		"after waiting keep-alive %s; the sinks are not keeping up: add sinks, raise capacity, or slow the senders",
		c.name, c.capacity, c.reserved, n, c.keepAlive)
}

// tx is a file channel transaction: puts staged in memory until Commit
// writes them, or takes kept for Rollback.
type tx struct {
	c      *Channel
	puts   []event.Event
	takes  []entry
	dead   []entry // taken events whose record was unreadable (pos and dir only)
	done   bool
	isOpen bool // registered in c.open
}

var errDone = errors.New("transaction already committed or rolled back")

func (t *tx) Put(events []event.Event) error {
	c := t.c
	if t.done {
		return fmt.Errorf("file channel %s: put: %w", c.name, errDone)
	}
	if len(t.takes) > 0 || len(t.dead) > 0 {
		return fmt.Errorf("file channel %s: a transaction cannot both take and put; use two transactions", c.name)
	}
	c.counters.EventPutAttempt.Add(int64(len(events)))
	if len(t.puts)+len(events) > c.txCap {
		return flow.FullErrorf("file channel %s: put list of transaction full (transactionCapacity %d); "+
			"commit smaller batches or raise transactionCapacity", c.name, c.txCap)
	}
	t.puts = append(t.puts, events...)
	return nil
}

func (t *tx) Take(ctx context.Context, dst []event.Event, max int) ([]event.Event, error) {
	c := t.c
	if t.done {
		return dst, fmt.Errorf("file channel %s: take: %w", c.name, errDone)
	}
	if len(t.puts) > 0 {
		return dst, fmt.Errorf("file channel %s: a transaction cannot both put and take; use two transactions", c.name)
	}
	room := c.txCap - len(t.takes) - len(t.dead)
	if room <= 0 {
		return dst, flow.FullErrorf("file channel %s: take list of transaction full (transactionCapacity %d); "+
			"take smaller batches or raise transactionCapacity", c.name, c.txCap)
	}
	max = min(max, room)
	if max <= 0 {
		return dst, nil
	}
	for {
		n := len(dst)
		var lostSome bool
		var err error
		dst, lostSome, err = t.take(ctx, dst, max)
		if err != nil || len(dst) > n || !lostSome {
			return dst, err
		}
		// Every event taken was lost to damage: take the next ones rather
		// than report an empty channel.
		max = min(max, c.txCap-len(t.takes)-len(t.dead))
		if max <= 0 {
			return dst, nil
		}
	}
}

// take is one round of Take; lostSome reports events lost to damage.
func (t *tx) take(ctx context.Context, dst []event.Event, max int) (_ []event.Event, lostSome bool, _ error) {
	c := t.c
	c.mu.Lock()
	for c.queue.len() == 0 {
		if !c.running {
			c.mu.Unlock()
			return dst, false, fmt.Errorf("file channel %s: take: %w", c.name, flow.ErrClosed)
		}
		if c.notEmpty == nil {
			c.notEmpty = make(chan struct{})
		}
		wait := c.notEmpty
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			c.counters.EventTakeAttempt.Add(1)
			return dst, false, nil
		case <-wait:
		}
		c.mu.Lock()
	}
	k := min(c.queue.len(), max)
	start := len(t.takes)
	if t.takes == nil {
		t.takes = (*takesPool.Get().(*[]entry))[:0]
	}
	t.takes = slices.Grow(t.takes, k)
	for range k {
		e := c.queue.popFront()
		if e.ev != nil {
			c.cached -= int64(e.size)
		}
		t.takes = append(t.takes, e) // under mu: checkpoints read open takes
	}
	if !t.isOpen {
		c.open[t] = struct{}{}
		t.isOpen = true
	}
	logs := c.logs
	c.mu.Unlock()

	attempts := int64(k)
	if k < max {
		attempts++ // Flume's sink loop counts the take that found nothing
	}
	c.counters.EventTakeAttempt.Add(attempts)

	// Read back the events that were not kept in memory.
	var buf []byte
	var dead []int
	var deadErr error
	for i, e := range t.takes[start:] {
		if e.ev != nil {
			dst = append(dst, *e.ev)
			continue
		}
		var err error
		buf, err = logs[e.dir].ReadAt(e.pos, buf[:0])
		var ev event.Event
		if err == nil {
			_, ev, err = decodePut(buf)
		}
		var ce *wal.CorruptionError
		if errors.As(err, &ce) || errors.Is(err, errBadRecord) || errors.Is(err, os.ErrNotExist) {
			c.lostEvents.Add(1)
			if deadErr == nil {
				deadErr = fmt.Errorf("data dir %s, position %s: %w", c.dataDirs[e.dir], e.pos, err)
			}
			dead = append(dead, start+i)
			continue
		}
		if err != nil {
			// An I/O error; Rollback gives back what was taken.
			c.takeErrors.Add(1)
			return dst, false, fmt.Errorf("file channel %s: take: %w", c.name, err)
		}
		dst = append(dst, ev)
	}
	lostSome = len(dead) > 0
	if len(dead) > 0 {
		// Damage recovery could not see (a record gone bad since it was
		// checkpointed); one line per take, throttled, never one per event.
		c.throttle.Log(c.log, slog.LevelError, "lost at take "+c.name,
			"file channel: acknowledged events lost to log damage, found when taken; counted in RecoveryLostEventCount",
			"channel", c.name, "events", len(dead), "first", deadErr)
		// Unreadable events are recorded as taken at commit, never returned.
		c.mu.Lock()
		kept := t.takes[:start]
		for i, e := range t.takes[start:] {
			if len(dead) > 0 && dead[0] == start+i {
				dead = dead[1:]
				t.dead = append(t.dead, entry{pos: e.pos, dir: e.dir})
				continue
			}
			kept = append(kept, e)
		}
		t.takes = kept
		c.mu.Unlock()
	}
	return dst, lostSome, nil
}

func (t *tx) Commit(ctx context.Context) error {
	c := t.c
	if t.done {
		return fmt.Errorf("file channel %s: commit: %w", c.name, errDone)
	}
	switch {
	case len(t.puts) > 0:
		return t.commitPuts(ctx)
	case len(t.takes) > 0 || len(t.dead) > 0:
		return t.commitTakes()
	}
	t.finish()
	return nil
}

// commitBuf is a put commit's encoding buffer, pooled.
type commitBuf struct {
	batch wal.Batch
	pos   []wal.Position
}

var commitPool = sync.Pool{New: func() any { return new(commitBuf) }}

func (cb *commitBuf) release() {
	if cb.batch.Size() <= 16<<20 {
		commitPool.Put(cb)
	}
}

// unreserve gives back capacity reserved by a commit that failed.
func (c *Channel) unreserve(n int) {
	c.mu.Lock()
	c.reserved -= n
	c.wakeCommitters()
	c.mu.Unlock()
}

func (t *tx) commitPuts(ctx context.Context) error {
	c := t.c
	n := len(t.puts)
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return fmt.Errorf("file channel %s: commit: %w", c.name, flow.ErrClosed)
	}
	dir, err := c.pickDir(c.nextTx + 1)
	if err != nil {
		c.mu.Unlock()
		c.putErrors.Add(1)
		return err
	}
	if err := c.reserve(ctx, n); err != nil {
		c.mu.Unlock()
		return err
	}
	c.nextTx++
	txid := c.nextTx
	c.mu.Unlock()

	// Encode straight into the log's frames (one copy of each body), in a
	// pooled buffer.
	now := event.Now()
	cb := commitPool.Get().(*commitBuf)
	defer cb.release()
	b := &cb.batch
	b.Reset()
	size := wal.FrameSize(commitSize)
	for i := range t.puts {
		size += wal.FrameSize(putSize(&t.puts[i]))
	}
	b.Grow(int(size))
	for i := range t.puts {
		t.puts[i].CommittedAt = now
		buf := b.Begin()
		if err := b.End(appendPut(buf, txid, now, &t.puts[i])); err != nil {
			c.unreserve(n)
			c.putErrors.Add(1)
			return fmt.Errorf("file channel %s: commit: event %d: %w", c.name, i, err)
		}
	}
	if err := b.End(appendCommit(b.Begin(), txid, n)); err != nil {
		c.unreserve(n)
		c.putErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: %w", c.name, err)
	}
	pos := slices.Grow(cb.pos[:0], n+1)[:n+1]
	cb.pos = pos

	c.ckMu.RLock()
	c.mu.Lock()
	logs := c.logs
	c.mu.Unlock()
	if logs == nil {
		err = flow.ErrClosed
	} else {
		err = logs[dir].AppendBatch(b, pos)
	}
	if err != nil {
		c.ckMu.RUnlock()
		c.unreserve(n)
		if errors.Is(err, flow.ErrClosed) || errors.Is(err, wal.ErrClosed) {
			return fmt.Errorf("file channel %s: commit: %w", c.name, flow.ErrClosed)
		}
		// The log failed (no space, a broken disk): nothing of this
		// transaction was acknowledged; the source keeps the events and
		// retries, and the watcher brings the log back.
		c.putErrors.Add(1)
		c.mu.Lock()
		c.nudgeWatcher()
		c.mu.Unlock()
		return &refusedError{msg: fmt.Sprintf("file channel %s: commit to data dir %s failed, nothing of it was kept; "+
			"puts are refused until the disk can be written again: %v", c.name, c.dataDirs[dir], err), cause: err}
	}
	// The events kept in memory stay in the transaction's own copy
	// (t.puts, which Put made): no second copy. One that does not fit the
	// budget is cleared there, so its body is not kept alive by its
	// neighbours.
	c.mu.Lock()
	live := c.live[dir]
	seg, run := pos[0].Segment, 0
	for i := range t.puts {
		e := entry{pos: pos[i], size: int32(b.PayloadLen(i)), dir: int32(dir)}
		if c.cached+int64(e.size) <= c.cacheBudget {
			e.ev = &t.puts[i]
			c.cached += int64(e.size)
		} else {
			t.puts[i] = event.Event{}
		}
		c.queue.pushBack(e)
		if pos[i].Segment != seg {
			live[seg] += run
			seg, run = pos[i].Segment, 0
		}
		run++
	}
	live[seg] += run
	c.wakeTakers()
	c.mu.Unlock()
	c.ckMu.RUnlock()
	c.counters.EventPutSuccess.Add(int64(n))
	t.finish()
	return nil
}

// commitTakes records the take in the log of each data dir the events came
// from (one take record per dir), so each dir's log stays self-contained.
// It does not fail because a log has failed: the sink has delivered the
// events, and failing would make it deliver them again, in a loop for as
// long as the disk is broken. The record is then kept (owed) and written
// when the log works again; until then the take is in memory only, so a
// crash delivers those events again (at least once), never loses them.
func (t *tx) commitTakes() error {
	c := t.c
	all := append(t.takes, t.dead...)
	// One take record per data dir the events came from; usually one.
	var one [1]dirRec
	recs := one[:0]
	first := all[0].dir
	single := true
	for _, e := range all {
		if e.dir != first {
			single = false
			break
		}
	}
	if single {
		recs = append(recs, dirRec{dir: first, rec: appendTakeEntries(all)})
	} else {
		byDir := make(map[int32][]wal.Position)
		for _, e := range all {
			byDir[e.dir] = append(byDir[e.dir], e.pos)
		}
		for d, pos := range byDir {
			recs = append(recs, dirRec{dir: d, rec: appendTake(nil, pos)})
		}
	}

	c.ckMu.RLock()
	c.mu.Lock()
	logs := c.logs
	c.mu.Unlock()
	if logs == nil {
		c.ckMu.RUnlock()
		c.takeErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: %w", c.name, flow.ErrClosed)
	}
	// A take commit waits for the take record takesInFlight commits before
	// it in each log, not for its own: a sink's next batches then overlap
	// this record's fdatasync, instead of every sink commit costing a disk
	// round trip. A record lost in a crash only makes its events be
	// delivered again (the sink had them acknowledged before committing),
	// and at most the newest takesInFlight take commits of each log are
	// acknowledged but not yet durable (while a log is failed, every take
	// since the failure is).
	c.takeMu.Lock()
	for i := range recs {
		d, rec := recs[i].dir, recs[i].rec
		tk, err := logs[d].AppendAsync(rec)
		if err != nil {
			c.owed[d] = append(c.owed[d], rec)
			continue
		}
		c.unsure[d] = append(c.unsure[d], takeRec{ticket: tk, rec: rec})
		last := &c.lastTake[d]
		recs[i].prev = last[0]
		copy(last[:], last[1:])
		last[takesInFlight-1] = tk
	}
	c.takeMu.Unlock()
	for _, r := range recs {
		d, tk := r.dir, r.prev
		if tk == 0 {
			continue
		}
		// An error means a failure cut that record off; it stays in
		// unsure and is written again when the log is back.
		if logs[d].WaitDurable(tk) == nil {
			c.takeMu.Lock()
			c.pruneTakes(int(d), logs[d], tk)
			c.takeMu.Unlock()
		}
	}
	c.mu.Lock()
	d, seg, run := all[0].dir, all[0].pos.Segment, 0
	for _, e := range all {
		if e.dir != d || e.pos.Segment != seg {
			c.live[d][seg] -= run
			d, seg, run = e.dir, e.pos.Segment, 0
		}
		run++
	}
	c.live[d][seg] -= run
	c.reserved -= len(all)
	c.takenSinceCk = true
	delete(c.open, t)
	t.isOpen = false
	c.wakeCommitters()
	c.mu.Unlock()
	c.ckMu.RUnlock()
	c.counters.EventTakeSuccess.Add(int64(len(t.takes)))
	t.finish()
	return nil
}

// dirRec is a take commit's record for one data dir, and the ticket of
// that dir's take record before it, which the commit waits for.
type dirRec struct {
	dir  int32
	rec  []byte
	prev wal.Ticket
}

func (t *tx) Rollback() error {
	c := t.c
	if t.done {
		return fmt.Errorf("file channel %s: rollback: %w", c.name, errDone)
	}
	if len(t.takes) > 0 || t.isOpen {
		c.mu.Lock()
		for i := len(t.takes) - 1; i >= 0; i-- {
			e := t.takes[i]
			if e.ev != nil {
				c.cached += int64(e.size)
			}
			c.queue.pushFront(e)
		}
		// Unreadable events stay out of the queue; they count as taken.
		c.reserved -= len(t.dead)
		for _, e := range t.dead {
			c.live[e.dir][e.pos.Segment]--
		}
		delete(c.open, t)
		t.isOpen = false
		if len(t.takes) > 0 {
			c.wakeTakers()
		}
		c.mu.Unlock()
	}
	t.finish()
	return nil
}

func (t *tx) finish() {
	if c := cap(t.takes); c > 0 && c <= maxPooledTakes {
		full := t.takes[:c]
		clear(full) // commitTakes may have appended the dead ones in place
		takesPool.Put(&full)
	}
	t.puts, t.takes, t.dead = nil, nil, nil
	t.done = true
}

// takesPool holds the take lists of finished transactions (cleared), so a
// sink's transaction of a thousand events does not allocate one.
var takesPool = sync.Pool{New: func() any { return new([]entry) }}

const maxPooledTakes = 1 << 16

// takesInFlight is how many take commits of one log may be acknowledged
// while their record is not yet durable: a take commit waits for the
// record of the take commit takesInFlight before it. With 1 a sink took
// one batch per fdatasync: while its channel is full the puts wait for the
// room its take commits free, so that was the pipeline's pace whenever a
// sync took longer than a batch's delivery (1000 events per sync in the
// peers harness, 1500 with 2; issue 27). A crash then delivers up to this
// many committed batches per log again, besides the one in flight.
const takesInFlight = 2
