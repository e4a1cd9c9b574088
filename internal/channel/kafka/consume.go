package kafkachannel

// The consumer side: the poller fetches records into the buffer that Take
// hands out, partitions come and go with the group (a revoked one's open
// transactions finish first and its offsets are committed), and a
// partition's offset advances only over records whose take committed
// (commitOffsets). A topic deleted under the channel is subscribed to again
// (forgetConsumed).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/kafkaconf"
)

type tp struct {
	topic     string
	partition int32
}

// partState tracks one owned partition: the records fetched and not yet
// durably taken, in offset order.
type partState struct {
	tp      tp
	open    []*rec
	next    int64 // offset after the last record fetched
	done    int64 // offset after the last record whose take committed (-1: none)
	taken   int   // records out in open transactions
	revoked bool
	dirty   bool // done advanced since the last successful offset commit
}

type rec struct {
	r     *kgo.Record
	ps    *partState
	taken bool
	done  bool
}

// wake tells waiting takers that records arrived (or the channel stopped).
// Caller holds mu.
func (c *Channel) wake() {
	if c.notEmpty != nil {
		close(c.notEmpty)
		c.notEmpty = nil
	}
}

// maxBuffered bounds the records fetched ahead of the takers.
func (c *Channel) maxBuffered() int { return max(2*min(c.txCap, 10000), 1000) }

// poll fetches records into buf while it has room.
func (c *Channel) poll(ctx context.Context) {
	defer close(c.pollDone)
	stale := kafkaconf.FetchStale(c.health.Grace())
	retry := kafkaconf.FetchBackoff(c.health.Grace())
	failedPolls := 0
	for ctx.Err() == nil {
		c.mu.Lock()
		room := c.maxBuffered() - len(c.buf)
		if room <= 0 {
			if c.space == nil {
				c.space = make(chan struct{})
			}
			wait := c.space
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-wait:
			}
			continue
		}
		c.mu.Unlock()

		c.pollMu.Lock()
		t0 := time.Now()
		pctx, cancel := context.WithTimeout(ctx, c.pollTimeout)
		fs := c.cons.PollRecords(pctx, room)
		cancel()
		c.getTimer.Add(time.Since(t0).Milliseconds())
		if fs.IsClientClosed() {
			c.pollMu.Unlock()
			return
		}
		failed, gone := false, false
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			failed = true
			if kafkaconf.TopicGone(err) && t == c.topic {
				// Not a failure to tell: forgetConsumed, below, subscribes
				// again at once and says so.
				gone = true
				return
			}
			c.health.Fail("fetch", kafkaconf.FetchError(t, p, err), stale)
		})
		c.lag.Observe(fs)
		c.mu.Lock()
		added := 0
		fs.EachRecord(func(r *kgo.Record) {
			ps := c.parts[tp{r.Topic, r.Partition}]
			if ps == nil || ps.revoked || r.Offset < ps.next {
				return
			}
			ps.next = r.Offset + 1
			x := &rec{r: r, ps: ps}
			ps.open = append(ps.open, x)
			c.buf = append(c.buf, x)
			added++
		})
		if added > 0 {
			c.wake()
		}
		c.mu.Unlock()
		c.pollMu.Unlock()
		if fs.NumRecords() > 0 {
			c.health.OK("fetch")
		}
		if gone {
			c.forgetConsumed()
		}
		if !failed || added > 0 {
			failedPolls = 0
			continue
		}
		failedPolls++
		if !kafkaconf.Sleep(ctx, retry(failedPolls)) {
			return
		}
	}
}

// forgetConsumed drops the consumer's state of the topic, which was deleted
// (and perhaps created again under a new topic ID), and subscribes to it
// again. The records the channel holds from the old topic stay takeable;
// their partitions become orphans, whose offsets are never committed (a
// commit would go to the new topic, or fail).
func (c *Channel) forgetConsumed() {
	c.throttle.Log(c.log, slog.LevelWarn, "topic gone",
		"kafka channel: the channel's topic was deleted or re-created (its topic ID changed); subscribing again and reading it from its start. The events the channel had fetched stay in it; events of the old topic it had not fetched are gone with the topic",
		"topic", c.topic)
	c.pollMu.Lock()
	c.mu.Lock()
	for k, ps := range c.parts {
		if k.topic != c.topic {
			continue
		}
		delete(c.parts, k)
		ps.commitOffset() // drop what is done
		if len(ps.open) > 0 {
			c.orphans = append(c.orphans, ps)
		}
	}
	c.mu.Unlock()
	c.pollMu.Unlock()
	c.lag.ForgetTopic(c.topic)
	c.recreated.Mark(c.topic)
	c.cons.PurgeTopicsFromClient(c.topic)
	c.cons.AddConsumeTopics(c.topic)
}

func (c *Channel) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			k := tp{t, p}
			c.parts[k] = &partState{tp: k, next: -1, done: -1}
		}
	}
}

// revoked lets open transactions on the partitions finish (up to
// revokeWait), commits their offsets (unless lost: the group no longer
// accepts them) and forgets the partitions.
func (c *Channel) revoked(ctx context.Context, _ *kgo.Client, m map[string][]int32, commit bool) {
	c.pollMu.Lock() // an in-flight poll buffers first; its records are dropped below
	defer c.pollMu.Unlock()
	c.mu.Lock()
	var states []*partState
	for t, ps := range m {
		for _, p := range ps {
			if s := c.parts[tp{t, p}]; s != nil {
				states = append(states, s)
			}
		}
	}
	// Buffered records of these partitions go: the next owner reads them.
	kept := c.buf[:0]
	for _, x := range c.buf {
		if !contains(states, x.ps) {
			kept = append(kept, x)
		}
	}
	clear(c.buf[len(kept):])
	c.buf = kept
	deadline := time.Now().Add(revokeWait)
	// On Stop, open transactions are abandoned: their events come again.
	for busy(states) && !c.stopped && time.Now().Before(deadline) && ctx.Err() == nil {
		c.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		c.mu.Lock()
	}
	if busy(states) && !c.stopped {
		c.log.Warn("kafka channel: partitions revoked while transactions still hold their events; the next owner will deliver those again")
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, s := range states {
		if commit {
			if o, ok := s.commitOffset(); ok {
				if offsets[s.tp.topic] == nil {
					offsets[s.tp.topic] = map[int32]kgo.EpochOffset{}
				}
				offsets[s.tp.topic][s.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: o}
			}
		}
		s.revoked = true
		delete(c.parts, s.tp)
	}
	c.mu.Unlock()
	c.lag.Forget(m)
	if len(offsets) > 0 {
		c.commitOffsets(offsets)
	}
}

func contains(states []*partState, ps *partState) bool {
	for _, s := range states {
		if s == ps {
			return true
		}
	}
	return false
}

func busy(states []*partState) bool {
	for _, s := range states {
		if s.taken > 0 {
			return true
		}
	}
	return false
}

// commitOffset drops the leading done records and returns the offset to
// commit when it advanced. Caller holds mu.
func (s *partState) commitOffset() (int64, bool) {
	i := 0
	for i < len(s.open) && s.open[i].done {
		s.done = s.open[i].r.Offset + 1
		i++
	}
	if i > 0 {
		clear(s.open[:i])
		s.open = s.open[i:]
		s.dirty = true
	}
	if !s.dirty || s.done < 0 {
		return 0, false
	}
	return s.done, true
}

// pruneOrphans forgets partitions of a deleted topic once every record the
// channel held from them was taken for good. Caller holds mu.
func (c *Channel) pruneOrphans() {
	kept := c.orphans[:0]
	for _, ps := range c.orphans {
		ps.commitOffset()
		if len(ps.open) > 0 {
			kept = append(kept, ps)
		}
	}
	clear(c.orphans[len(kept):])
	c.orphans = kept
}

// commitOffsets commits offsets, or (nil) every owned partition's
// committable offset. Commits are serialised so an older offset never
// overwrites a newer one.
func (c *Channel) commitOffsets(offsets map[string]map[int32]kgo.EpochOffset) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	var states []*partState
	if offsets == nil {
		offsets = map[string]map[int32]kgo.EpochOffset{}
		c.mu.Lock()
		for _, s := range c.parts {
			if o, ok := s.commitOffset(); ok {
				if offsets[s.tp.topic] == nil {
					offsets[s.tp.topic] = map[int32]kgo.EpochOffset{}
				}
				offsets[s.tp.topic][s.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: o}
				states = append(states, s)
			}
		}
		c.mu.Unlock()
	}
	if len(offsets) == 0 {
		return
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	var cerr error
	c.cons.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cerr = commitError(resp, err)
	})
	c.commitTimer.Add(time.Since(t0).Milliseconds())
	if cerr != nil {
		c.commits.Fail(cerr)
		return
	}
	c.commits.Ok()
	c.mu.Lock()
	for _, s := range states {
		if o := offsets[s.tp.topic][s.tp.partition].Offset; o == s.done {
			s.dirty = false
		}
	}
	c.mu.Unlock()
}

func commitError(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}

// toEvent turns a record into the event it holds.
func (c *Channel) toEvent(r *kgo.Record) event.Event {
	var e event.Event
	if c.parse {
		fe, err := kafkaconf.DecodeFlumeEvent(r.Value)
		if err == nil {
			e = fe
		} else {
			c.throttle.Log(c.log, slog.LevelWarn, "not flume", "kafka channel: record is not a Flume event (parseAsFlumeEvent = true); taking its value as the body",
				"partition", r.Partition, "offset", r.Offset, "err", err)
			e.Body = r.Value
		}
	} else {
		e.Body = r.Value
	}
	for _, h := range r.Headers {
		if h.Key == receivedHeader {
			e.ReceivedAt, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	e.CommittedAt = max(r.Timestamp.UnixNano(), e.ReceivedAt)
	return e
}
