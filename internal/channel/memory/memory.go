// Package memorychannel is Flume's memory channel: a bounded, in-process FIFO of
// events with transactions.
//
// Durability: none. Events held by a memory channel are lost if the process
// dies, and when the agent stops before its sinks drained it (as with
// Flume's memory channel, FLUME-2894; sluice reports the count and exits
// non-zero). A reload that keeps the channel keeps its events, and one that
// changes its settings hands them to the new channel (Adopt). Use the file
// channel when an acknowledged event must survive a crash.
//
// Properties (Flume's names and defaults):
//
//	capacity                      100   events the channel holds, counting events taken by open transactions
//	transactionCapacity           100   events one transaction may put, or take; at most capacity
//	keep-alive                    3     seconds a commit waits for space before failing; sluice also
//	                                    accepts a decimal number of seconds (0.25)
//	byteCapacity                  see below  body bytes the channel holds; 0 or less means unlimited
//	byteCapacityBufferPercentage  20    share of byteCapacity kept free for headers and overhead
//
// Flume's default byteCapacity is 80% of the JVM's maximum heap. Go has no
// fixed heap, so sluice uses 80% of GOMEMLIMIT when it is set, and otherwise
// 80% of a quarter of the machine's memory (or of the cgroup's memory.max when
// that is lower) — a quarter being the JVM's default maximum heap. So by
// default a memory channel may hold body bytes up to 16% of RAM (20% less the
// 20% buffer). Like Flume, each memory channel gets this default on its own.
//
// Only body bytes are counted, as Flume does; byteCapacityBufferPercentage is
// the allowance for headers and per-event overhead (about 100 bytes an event).
package memorychannel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Defaults, as in Flume.
const (
	DefaultCapacity            = 100
	DefaultTransactionCapacity = 100
	DefaultKeepAlive           = 3 * time.Second
	DefaultBufferPercentage    = 20
)

// initialRing is the ring size a channel starts with; the ring doubles as
// events arrive, up to capacity, so a large capacity costs nothing until used.
const initialRing = 1024

// Channel is a memory channel. It is safe for concurrent use; each
// transaction belongs to one goroutine.
type Channel struct {
	name      string
	capacity  int
	txCap     int
	keepAlive time.Duration
	byteCap   int64 // effective limit on body bytes after the buffer; math.MaxInt64 = unlimited
	counters  *metrics.ChannelCounters
	lists     sync.Pool // *[]event.Event with cap txCap, for transactions' put and take lists

	mu       sync.Mutex
	ring     []event.Event // committed events from head, n of them, wrapping
	head     int
	n        int
	reserved int              // n plus events taken by open transactions: what capacity limits
	bytes    int64            // body bytes of the reserved events
	notEmpty chan struct{}    // closed at the next commit of puts; nil while no taker waits
	notFull  flow.SpaceSignal // committers waiting for space
	closed   bool
	// heir is the channel that adopted this one's events (a reload); a take
	// rolled back afterwards goes to it, so no event stays behind.
	heir *Channel
	// cutOff is set by MarkInFlight (the shutdown deadline cuts the sinks
	// off); from then on a take rolled back was a delivery interrupted, and
	// unsure counts such events, which sit at the head of the ring: the
	// downstream may have them. Loss reports them apart from the lost ones.
	cutOff bool
	unsure int
}

var (
	_ flow.Channel    = (*Channel)(nil)
	_ flow.TxCapacity = (*Channel)(nil)
)

// New builds a memory channel from its properties.
func New(env flow.Env, p *config.Props) (flow.Channel, error) {
	c := &Channel{name: env.Name}
	lim := flow.ReadChannelLimits(p, flow.ChannelLimits{
		Capacity: DefaultCapacity, TransactionCapacity: DefaultTransactionCapacity, KeepAlive: DefaultKeepAlive})
	c.capacity, c.txCap, c.keepAlive = lim.Capacity, lim.TransactionCapacity, lim.KeepAlive
	byteCap := p.Int64("byteCapacity", DefaultByteCapacity())
	pct := p.Int("byteCapacityBufferPercentage", DefaultBufferPercentage)
	if pct < 0 || pct > 99 {
		p.Errorf("byteCapacityBufferPercentage", "%d is out of range; use a percentage from 0 to 99", pct)
		pct = DefaultBufferPercentage
	}
	if byteCap <= 0 {
		c.byteCap = math.MaxInt64
	} else {
		c.byteCap = max(1, int64(float64(byteCap)*float64(100-pct)/100))
	}

	c.ring = make([]event.Event, min(c.capacity, initialRing))
	txCap := c.txCap
	c.lists.New = func() any {
		s := make([]event.Event, 0, min(txCap, 1024))
		return &s
	}
	c.counters = metrics.NewChannelCounters(env.Name, env.Type)
	c.counters.SetSize(func() int64 { return int64(c.Len()) }, func() int64 { return int64(c.capacity) })
	env.Registry().Add(c.counters.Set)
	return c, nil
}

// DefaultByteCapacity is the byteCapacity used when none is configured: 80%
// of GOMEMLIMIT when set, else 80% of a quarter of the memory available to
// the process (the JVM's default heap), or 0 (unlimited) when unknown.
func DefaultByteCapacity() int64 {
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 {
		return lim / 10 * 8
	}
	if m := availableMemory(); m > 0 {
		return int64(m / 4 / 10 * 8)
	}
	return 0
}

// TransactionCapacity is the most events one transaction may put or take.
func (c *Channel) TransactionCapacity() int { return c.txCap }

// Capacity is the most events the channel holds.
func (c *Channel) Capacity() int { return c.capacity }

// ByteCapacity is the effective limit on held body bytes (byteCapacity less
// the buffer percentage), or 0 when unlimited.
func (c *Channel) ByteCapacity() int64 {
	if c.byteCap == math.MaxInt64 {
		return 0
	}
	return c.byteCap
}

// Bytes reports the body bytes the channel holds, counting events taken by
// open transactions: what byteCapacity limits (the status page shows it).
func (c *Channel) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// KeepAlive is how long a commit waits for space.
func (c *Channel) KeepAlive() time.Duration { return c.keepAlive }

// Start opens the channel (again, after a Stop) and resets its counters.
func (c *Channel) Start(context.Context) error {
	c.mu.Lock()
	c.closed, c.cutOff, c.unsure = false, false, 0
	c.mu.Unlock()
	c.counters.Started()
	return nil
}

// Stop closes the channel: waiting takes and commits return ErrClosed. The
// events it holds stay in memory until the channel is dropped; they are lost
// then, as with Flume's memory channel.
func (c *Channel) Stop(context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.wakeTakers()
	c.wakeCommitters()
	c.mu.Unlock()
	c.counters.Stopped()
	return nil
}

// Len reports the committed events the channel holds.
func (c *Channel) Len() int {
	c.mu.Lock()
	n := c.n
	c.mu.Unlock()
	return n
}

// Held reports the events the channel holds, counting those taken by
// transactions still open: what a stop would lose, or may lose (Loss).
func (c *Channel) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reserved
}

// MarkInFlight says the sinks are being cut off (the shutdown deadline):
// from now on, a take that is rolled back was a delivery interrupted, whose
// events may have reached the downstream. Loss counts them apart.
func (c *Channel) MarkInFlight() {
	c.mu.Lock()
	c.cutOff = true
	c.mu.Unlock()
}

// Loss splits what a stop now would drop (Held) in two: lost, the events no
// delivery had, which the downstream does not have; and inFlight, those of
// deliveries the shutdown deadline interrupted (rolled back after
// MarkInFlight) or that are still open, which the downstream may or may not
// have: outcome unknown. lost + inFlight = Held.
func (c *Channel) Loss() (lost, inFlight int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n - c.unsure, c.unsure + c.reserved - c.n
}

// Adopt moves every event old holds, in order, ahead of anything in c:
// a reload that changes a memory channel's settings hands its events to the
// replacement rather than dropping them. It returns how many moved, and false
// (moving nothing) when old is not a memory channel. Call it after old's
// sources and sinks stopped and old was stopped (so no put can commit into
// it any more), before c's sinks start. A take of old still open (a sink that
// did not stop in time) that rolls back later goes to c too.
//
// Adopted events count against c's capacity and byteCapacity even beyond
// them (a reload may lower capacity below what old held): until the sinks
// bring the channel under its limits, puts wait and fail as for a full
// channel; nothing adopted is refused.
func (c *Channel) Adopt(old flow.Channel) (int, bool) {
	o, ok := old.(*Channel)
	if !ok || o == c {
		return 0, false
	}
	o.mu.Lock()
	moved := make([]event.Event, o.n)
	o.copyOut(moved, o.head)
	o.clearRange(o.head, o.n)
	var movedBytes int64
	for i := range moved {
		movedBytes += int64(len(moved[i].Body))
	}
	o.head, o.n = 0, 0
	o.reserved -= len(moved)
	o.bytes -= movedBytes
	o.heir = c
	o.wakeCommitters()
	o.mu.Unlock()

	c.mu.Lock()
	c.pushFront(moved)
	c.reserved += len(moved)
	c.bytes += movedBytes
	c.mu.Unlock()
	return len(moved), true
}

// pushFront puts events back at the head of the ring, in order, and wakes
// takers. Lock must be held.
func (c *Channel) pushFront(events []event.Event) {
	if len(events) == 0 {
		return
	}
	c.ensureRoom(len(events))
	c.head -= len(events)
	if c.head < 0 {
		c.head += len(c.ring)
	}
	c.copyIn(c.head, events)
	c.n += len(events)
	c.wakeTakers()
}

// Begin opens a transaction.
func (c *Channel) Begin() flow.Transaction { return &tx{c: c} }

// Lock must be held.
func (c *Channel) wakeTakers() {
	if c.notEmpty != nil {
		close(c.notEmpty)
		c.notEmpty = nil
	}
}

// Lock must be held.
func (c *Channel) wakeCommitters() { c.notFull.Broadcast() }

// ensureRoom grows the ring so it holds k more events. Callers have
// reserved them, so n+k never exceeds capacity. Lock must be held.
func (c *Channel) ensureRoom(k int) {
	need := c.n + k
	if need <= len(c.ring) {
		return
	}
	size := max(need, min(c.capacity, 2*len(c.ring)))
	ring := make([]event.Event, size)
	c.copyOut(ring[:c.n], c.head)
	c.ring, c.head = ring, 0
}

// copyOut copies len(dst) events of the ring starting at index i into dst.
// Lock must be held.
func (c *Channel) copyOut(dst []event.Event, i int) {
	k := copy(dst, c.ring[i:])
	copy(dst[k:], c.ring)
}

// copyIn copies src into the ring starting at index i. Lock must be held.
func (c *Channel) copyIn(i int, src []event.Event) {
	k := copy(c.ring[i:], src)
	copy(c.ring, src[k:])
}

// clearRange zeroes k slots from index i, so taken events are not kept
// alive by the ring. Lock must be held.
func (c *Channel) clearRange(i, k int) {
	end := i + k
	if end <= len(c.ring) {
		clear(c.ring[i:end])
		return
	}
	clear(c.ring[i:])
	clear(c.ring[:end-len(c.ring)])
}

func (c *Channel) wrap(i int) int {
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	return i
}

func (c *Channel) getList() *[]event.Event { return c.lists.Get().(*[]event.Event) }

func (c *Channel) putList(l *[]event.Event) {
	if l == nil {
		return
	}
	clear(*l)
	*l = (*l)[:0]
	c.lists.Put(l)
}

// tx is a memory channel transaction: a put list staged until commit and a
// take list kept for rollback.
type tx struct {
	c                   *Channel
	puts, takes         *[]event.Event
	putBytes, takeBytes int64
	done                bool
}

var errDone = errors.New("transaction already committed or rolled back")

func (t *tx) Put(events []event.Event) error {
	c := t.c
	if t.done {
		return fmt.Errorf("memory channel %s: put: %w", c.name, errDone)
	}
	c.counters.EventPutAttempt.Add(int64(len(events)))
	if t.puts == nil {
		t.puts = c.getList()
	}
	if len(*t.puts)+len(events) > c.txCap {
		return flow.FullErrorf("channel %s: put list of transaction full (transactionCapacity %d); "+
			"commit smaller batches or raise transactionCapacity", c.name, c.txCap)
	}
	*t.puts = append(*t.puts, events...)
	for i := range events {
		t.putBytes += int64(len(events[i].Body))
	}
	return nil
}

func (t *tx) Take(ctx context.Context, dst []event.Event, max int) ([]event.Event, error) {
	c := t.c
	if t.done {
		return dst, fmt.Errorf("memory channel %s: take: %w", c.name, errDone)
	}
	if t.takes == nil {
		t.takes = c.getList()
	}
	room := c.txCap - len(*t.takes)
	if room <= 0 {
		return dst, flow.FullErrorf("channel %s: take list of transaction full (transactionCapacity %d); "+
			"take smaller batches or raise transactionCapacity", c.name, c.txCap)
	}
	max = min(max, room)
	if max <= 0 {
		return dst, nil
	}
	c.mu.Lock()
	for c.n == 0 {
		if c.closed {
			c.mu.Unlock()
			return dst, fmt.Errorf("memory channel %s: take: %w", c.name, flow.ErrClosed)
		}
		if c.notEmpty == nil {
			c.notEmpty = make(chan struct{})
		}
		wait := c.notEmpty
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			c.counters.EventTakeAttempt.Add(1)
			return dst, nil
		case <-wait:
		}
		c.mu.Lock()
	}
	k := min(c.n, max)
	start := len(dst)
	dst = growLen(dst, k)
	c.copyOut(dst[start:], c.head)
	c.clearRange(c.head, k)
	c.head = c.wrap(c.head + k)
	c.n -= k
	c.unsure -= min(c.unsure, k) // taken again: in this take's hands now
	c.mu.Unlock()

	taken := dst[start:]
	*t.takes = append(*t.takes, taken...)
	for i := range taken {
		t.takeBytes += int64(len(taken[i].Body))
	}
	attempts := int64(k)
	if k < max {
		attempts++ // Flume's sink loop counts the take that found nothing
	}
	c.counters.EventTakeAttempt.Add(attempts)
	return dst, nil
}

// growLen extends s by k elements, reallocating only when its capacity is short.
func growLen(s []event.Event, k int) []event.Event {
	n := len(s) + k
	if n <= cap(s) {
		return s[:n]
	}
	return append(s, make([]event.Event, k)...)
}

func (t *tx) Commit(ctx context.Context) error {
	c := t.c
	if t.done {
		return fmt.Errorf("memory channel %s: commit: %w", c.name, errDone)
	}
	var puts, takes []event.Event
	if t.puts != nil {
		puts = *t.puts
	}
	if t.takes != nil {
		takes = *t.takes
	}
	if len(puts) == 0 && len(takes) == 0 {
		t.finish()
		return nil
	}
	net := len(puts) - len(takes)
	netBytes := t.putBytes - t.takeBytes
	if netBytes > c.byteCap {
		return flow.FullErrorf("channel %s is full: a transaction of %d body bytes can never fit in byteCapacity %d "+
			"(after byteCapacityBufferPercentage); raise byteCapacity or send smaller batches", c.name, t.putBytes, c.byteCap)
	}
	var now int64
	if len(puts) > 0 {
		now = event.Now() // one clock read per commit, outside the lock
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("memory channel %s: commit: %w", c.name, flow.ErrClosed)
	}
	if !c.fits(net, netBytes) {
		if err := c.waitSpace(ctx, net, netBytes); err != nil {
			c.mu.Unlock()
			return err
		}
		if len(puts) > 0 {
			now = event.Now() // the wait may have been long
		}
	}
	if len(puts) > 0 {
		for i := range puts {
			puts[i].CommittedAt = now
		}
		c.ensureRoom(len(puts))
		c.copyIn(c.wrap(c.head+c.n), puts)
		c.n += len(puts)
		c.wakeTakers()
	}
	c.reserved += net
	c.bytes += netBytes
	if net < 0 || netBytes < 0 {
		c.wakeCommitters()
	}
	c.mu.Unlock()
	c.counters.EventPutSuccess.Add(int64(len(puts)))
	c.counters.EventTakeSuccess.Add(int64(len(takes)))
	t.finish()
	return nil
}

// fits reports whether net more events and netBytes more bytes fit. A
// commit that adds nothing always fits, even in a channel over its limits
// (one that adopted more than its capacity). Lock must be held.
func (c *Channel) fits(net int, netBytes int64) bool {
	if net <= 0 && netBytes <= 0 {
		return true
	}
	return c.reserved+net <= c.capacity && c.bytes+netBytes <= c.byteCap
}

// waitSpace waits up to keep-alive, or until ctx is done, until net events
// and netBytes fit, or returns why not. Lock must be held; it is released
// while waiting.
func (c *Channel) waitSpace(ctx context.Context, net int, netBytes int64) error {
	var timer *time.Timer
	if c.keepAlive > 0 {
		timer = time.NewTimer(c.keepAlive)
		defer timer.Stop()
	}
	for !c.fits(net, netBytes) {
		if timer == nil {
			return c.fullError(net)
		}
		expired, ended := c.notFull.Wait(ctx, &c.mu, timer.C)
		if c.closed {
			return fmt.Errorf("memory channel %s: commit: %w", c.name, flow.ErrClosed)
		}
		if ended && !c.fits(net, netBytes) {
			msg, _ := c.fullText(net)
			return flow.FullWaitEnded(ctx, "%s; the put stopped waiting for space", msg)
		}
		if expired && !c.fits(net, netBytes) {
			return c.fullError(net)
		}
	}
	return nil
}

// fullError says which limit stopped a commit after keep-alive. Lock must
// be held.
func (c *Channel) fullError(net int) error {
	msg, limit := c.fullText(net)
	return flow.FullErrorf("%s after waiting keep-alive %s; the sinks are not keeping up: add sinks, raise %s, or slow the senders",
		msg, c.keepAlive, limit)
}

// fullText says which limit keeps a commit of net more events out, and
// names the setting. Lock must be held.
func (c *Channel) fullText(net int) (msg, limit string) {
	if c.reserved+net > c.capacity {
		return fmt.Sprintf("channel %s is full: capacity %d reached (%d held or being taken, %d more to commit)",
			c.name, c.capacity, c.reserved, net), "capacity"
	}
	return fmt.Sprintf("channel %s is full: byteCapacity %s reached", c.name, formatBytes(c.byteCap)), "byteCapacity"
}

func formatBytes(n int64) string {
	return strconv.FormatInt(n, 10) + " bytes (after byteCapacityBufferPercentage)"
}

func (t *tx) Rollback() error {
	c := t.c
	if t.done {
		return fmt.Errorf("memory channel %s: rollback: %w", c.name, errDone)
	}
	if t.takes != nil && len(*t.takes) > 0 {
		takes := *t.takes
		c.mu.Lock()
		heir := c.heir
		if heir == nil {
			c.pushFront(takes)
			if c.cutOff {
				c.unsure += len(takes) // at the head, ahead of the events no delivery had
			}
			c.mu.Unlock()
		} else {
			// The channel's events were adopted since this take: the
			// rolled-back events follow them, as the head of the heir.
			c.reserved -= len(takes)
			c.bytes -= t.takeBytes
			c.mu.Unlock()
			heir.mu.Lock()
			heir.pushFront(takes)
			heir.reserved += len(takes)
			heir.bytes += t.takeBytes
			heir.mu.Unlock()
		}
	}
	t.finish()
	return nil
}

func (t *tx) finish() {
	t.c.putList(t.puts)
	t.c.putList(t.takes)
	t.puts, t.takes = nil, nil
	t.done = true
}
