package filechannel

// Checkpoints: every checkpointInterval, after replay, at Stop
// (checkpointOnClose) and when the disk watcher asks for one to free space,
// the channel's events and each log's end are written to checkpointDir (and
// backupCheckpointDir), then the segments no event needs any more are
// deleted. Start replays from the last one (replay.go); the payload's
// layout is in records.go.

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/wal"
)

func (c *Channel) checkpointLoop() {
	defer close(c.ckLoopDone)
	t := time.NewTicker(c.ckInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.ckRequest:
		}
		err := c.checkpoint()
		c.mu.Lock()
		if err == nil {
			c.ckFails, c.ckErr = 0, nil
		} else {
			if c.ckFails == 0 {
				c.ckFailSince = time.Now()
			}
			c.ckFails++
			c.ckErr = err
		}
		c.mu.Unlock()
		if err != nil {
			c.ckStreak.Fail(err, "channel", c.name)
		} else {
			c.ckStreak.Ok("channel", c.name)
		}
	}
}

// requestCheckpoint asks the checkpointer for a checkpoint soon (to free
// segments when space runs low). Lock must be held.
func (c *Channel) requestCheckpoint() {
	if c.ckRequest != nil {
		select {
		case c.ckRequest <- struct{}{}:
		default:
		}
	}
}

// checkpoint snapshots the channel's events and the log's end, writes them
// atomically, then deletes the segments no event needs any more.
func (c *Channel) checkpoint() error {
	c.ckMu.Lock() // no commit is between its append and its effect
	c.mu.Lock()
	logs := c.logs
	if logs == nil {
		c.mu.Unlock()
		c.ckMu.Unlock()
		return nil
	}
	dirs := make([]ckDir, len(logs))
	keep := make([]uint64, len(logs))
	for i, w := range logs {
		dirs[i] = ckDir{path: c.dataDirs[i], from: w.End()}
		keep[i] = dirs[i].from.Segment
		for s, n := range c.live[i] {
			if n > 0 && s < keep[i] {
				keep[i] = s
			}
		}
	}
	held := make([]ckEntry, 0, c.reserved)
	for t := range c.open {
		for _, e := range t.takes {
			held = append(held, ckEntry{dir: int(e.dir), pos: e.pos})
		}
	}
	c.queue.each(func(e *entry) { held = append(held, ckEntry{dir: int(e.dir), pos: e.pos}) })
	nextTx := c.nextTx
	taken := c.takenSinceCk
	c.takenSinceCk = false
	c.mu.Unlock()
	c.ckMu.Unlock()

	// The log-level position is the first dir's; the payload has them all.
	ck := wal.Checkpoint{Position: dirs[0].from, Payload: encodeCheckpoint(nextTx, dirs, held)}
	if err := wal.WriteCheckpoint(c.ckDir, ck); err != nil {
		c.ckErrors.Add(1)
		if taken {
			c.mu.Lock()
			c.takenSinceCk = true // still to be freed
			c.mu.Unlock()
		}
		return err
	}
	if c.backupDir != "" {
		if err := wal.WriteCheckpoint(c.backupDir, ck); err != nil {
			c.ckBackupErrs.Add(1)
			c.bkStreak.Fail(err, "channel", c.name)
		} else {
			c.bkStreak.Ok("channel", c.name)
		}
	}
	var errs []error
	for i, w := range logs {
		errs = append(errs, w.TruncateBefore(keep[i]))
	}
	c.mu.Lock()
	if c.live != nil {
		for i := range logs {
			for s := range c.live[i] {
				if s < keep[i] {
					delete(c.live[i], s)
				}
			}
		}
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}
