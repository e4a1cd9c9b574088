package filechannel

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/wal"
)

// The disk side of the channel: free space, logs that failed, the watcher
// that brings them back, and what /healthz is told.
//
// A data dir refuses puts while its disk has less than minimumRequiredSpace
// free, or while its log has failed (a write or fdatasync error: no space
// left, a broken disk). Puts go to the other dirs; with every dir refusing,
// a put fails with a refusedError, which wraps flow.ErrChannelFull so the
// source pushes back and keeps the data. Takes go on meanwhile: a take
// commit whose record cannot be written is kept in memory (owed) and
// written once the log is back, so a sink is never made to deliver the same
// batch again because of the disk. The watcher looks at every dir's free
// space each second and probes each failed log (wal.Log.Recover) once there
// is room again, so the channel recovers by itself, without a restart.

const (
	// watchInterval is how often the watcher reads free space and probes
	// failed logs.
	watchInterval = time.Second
	// maxProbeBackoff bounds the wait between probes of a log that fails
	// for another reason than space (a broken disk).
	maxProbeBackoff = 30 * time.Second
	// probeFree is the least free space at which a log that ran out of
	// space is probed (when minimumRequiredSpace is smaller).
	probeFree = 1 << 20
	// freeingInterval is how often, while puts are refused, a checkpoint
	// is asked for to delete the segments whose events were all taken.
	freeingInterval = 5 * time.Second
)

// refusedError is a put refused because no data dir can take it. It wraps
// flow.ErrChannelFull (the source pushes back and retries) and the disk
// error behind it, if any.
type refusedError struct {
	msg   string
	cause error
}

func (e *refusedError) Error() string        { return e.msg }
func (e *refusedError) Unwrap() error        { return e.cause }
func (e *refusedError) Is(target error) bool { return target == flow.ErrChannelFull }

// takeRec is a take record the log has not confirmed durable: its ticket,
// or 0 when it was never appended (the log had failed).
type takeRec struct {
	ticket wal.Ticket
	rec    []byte
}

func outOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// bytesText writes n as exact bytes and in binary units, so both the
// number an operator typed and one they can read are there.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		suffix = s
		if v < unit {
			break
		}
	}
	return fmt.Sprintf("%d bytes (%.1f %s)", n, v, suffix)
}

// dirRefusal says why data dir i takes no puts now, or "" when it does.
// Lock mu.
func (c *Channel) dirRefusal(i int) string {
	dir := c.dataDirs[i]
	if c.logs != nil {
		if err := c.logs[i].Err(); err != nil {
			if outOfSpace(err) {
				return fmt.Sprintf("data dir %s is out of disk space (%v); puts are refused until space returns "+
					"(checked every second; free space on that disk)", dir, err)
			}
			return fmt.Sprintf("data dir %s cannot be written (%v); puts are refused until a write there "+
				"succeeds again (retried by itself)", dir, err)
		}
	}
	if c.lowSpace[i] {
		return fmt.Sprintf("data dir %s has %s free, less than minimumRequiredSpace %s; puts are refused until "+
			"space is freed on that disk (or minimumRequiredSpace is lowered; 0 turns the check off)",
			dir, bytesText(c.free[i]), bytesText(c.minFree))
	}
	return ""
}

// refusal returns why the channel refuses every put now (no data dir takes
// puts), or nil. Lock mu.
func (c *Channel) refusal() error {
	var why []string
	var cause error
	for i := range c.dataDirs {
		r := c.dirRefusal(i)
		if r == "" {
			return nil
		}
		why = append(why, r)
		if cause == nil && c.logs != nil {
			cause = c.logs[i].Err()
		}
	}
	return &refusedError{msg: fmt.Sprintf("file channel %s refuses puts: %s", c.name, strings.Join(why, "; ")), cause: cause}
}

// ckFailsUnhealthy is how many checkpoints in a row must fail before the
// channel reports itself unhealthy: one may fail for a passing reason.
const ckFailsUnhealthy = 3

// Health implements flow.HealthReporter: the reason the channel refuses
// puts for lack of disk space or a failing disk, or, while puts and takes
// work, the reason its checkpoints keep failing (nothing is lost then, but
// the log cannot be trimmed: its disk use grows until puts are refused, and
// a restart replays it all). nil when all is well. It reads state the
// watcher, the puts and the checkpointer keep up to date (free space at
// most a second old), so it never blocks on the disk.
func (c *Channel) Health() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return nil
	}
	if err := c.refusal(); err != nil {
		return err
	}
	if c.ckFails >= ckFailsUnhealthy {
		return fmt.Errorf("file channel %s: %d checkpoints in a row failed since %s (checkpointDir %s): %w; events are kept, but the log cannot be trimmed, so its disk use grows and a restart replays it all",
			c.name, c.ckFails, c.ckFailSince.UTC().Format(time.RFC3339), c.ckDir, c.ckErr)
	}
	return nil
}

// pickDir chooses the data dir of put transaction txid: dir txid mod n,
// or the next one that takes puts (its log works and its disk has at least
// minimumRequiredSpace free). With no dir taking puts it fails with a
// refusedError while takes go on. Free space is read with statfs at most
// every 100 ms here, and every second by the watcher. Lock must be held.
func (c *Channel) pickDir(txid uint64) (int, error) {
	n := len(c.dataDirs)
	if c.minFree > 0 {
		if now := time.Now(); now.Sub(c.lastSpace) >= 100*time.Millisecond {
			c.lastSpace, c.spaceAt = now, now
			for i, d := range c.dataDirs {
				free, err := c.freeSpace(d)
				c.lookAtSpace(i, free, err)
			}
		}
	}
	for k := range n {
		i := int((txid + uint64(k)) % uint64(n))
		if c.dirRefusal(i) == "" {
			return i, nil
		}
	}
	c.nudgeWatcher()
	return 0, c.refusal()
}

// lookAtSpace records a statfs result for data dir i and says once when
// the dir crosses minimumRequiredSpace. Lock must be held.
func (c *Channel) lookAtSpace(i int, free int64, err error) {
	dir := c.dataDirs[i]
	if err != nil {
		c.lowSpace[i] = false // cannot tell: do not block puts on it
		c.statfsStreak[i].Fail(err, "channel", c.name, "dir", dir)
		return
	}
	c.statfsStreak[i].Ok("channel", c.name, "dir", dir)
	c.free[i] = free
	if c.minFree > 0 && free < c.minFree {
		c.lowSpace[i] = true
		c.lowStreak[i].Fail(nil, "channel", c.name, "dir", dir, "free", bytesText(free), "minimumRequiredSpace", bytesText(c.minFree))
		return
	}
	c.lowSpace[i] = false
	c.lowStreak[i].Ok("channel", c.name, "dir", dir, "free", bytesText(free))
}

// lowSpaceHold is how long a data dir must stay above minimumRequiredSpace
// before the log says its space is back (puts go to it at once): a disk
// that hovers at the limit, filled by puts and freed by checkpoints, is one
// streak in the log rather than two lines every few seconds.
const lowSpaceHold = 10 * time.Second

// newStreaks makes the streaks that tell the channel's failures, for n
// data dirs. Lock must be held.
func (c *Channel) newStreaks(n int) {
	streak := func(failed, recovered string, hold time.Duration) *logthrottle.Streak {
		return &logthrottle.Streak{Log: c.log, Level: slog.LevelWarn, Every: time.Minute, Hold: hold, Failed: failed, Recovered: recovered}
	}
	c.ckStreak = streak("file channel: checkpoint failed; the next one retries", "file channel: checkpoints succeed again", 0)
	c.bkStreak = streak("file channel: backup checkpoint failed", "file channel: backup checkpoints succeed again", 0)
	c.lowStreak = make([]*logthrottle.Streak, n)
	c.statfsStreak = make([]*logthrottle.Streak, n)
	for i := range n {
		c.lowStreak[i] = streak("file channel: the data dir's disk has less free space than minimumRequiredSpace; "+
			"puts to it are refused until space is freed there, or minimumRequiredSpace is lowered (0 turns the check off)",
			"file channel: disk space back, accepting puts to this data dir", lowSpaceHold)
		c.statfsStreak[i] = streak("file channel: cannot read free disk space", "file channel: free disk space readable again", 0)
	}
}

// stopStreaks writes the summaries the streaks still hold back.
func (c *Channel) stopStreaks() {
	c.mu.Lock()
	all := append([]*logthrottle.Streak{c.ckStreak, c.bkStreak}, c.lowStreak...)
	all = append(all, c.statfsStreak...)
	c.mu.Unlock()
	for _, s := range all {
		if s != nil {
			s.Stop()
		}
	}
}

// warnLowSpace reads every data dir's free space at Start, so a dir
// already below minimumRequiredSpace is said at once: with Flume's default
// (500 MB) on a small disk every put would otherwise be refused from the
// first one with no word. Lock must be held.
func (c *Channel) warnLowSpace() {
	c.lastSpace, c.spaceAt = time.Now(), time.Now()
	for i, d := range c.dataDirs {
		free, err := c.freeSpace(d)
		c.lookAtSpace(i, free, err)
	}
}

// nudgeWatcher asks the watcher to look now rather than at its next tick.
func (c *Channel) nudgeWatcher() {
	if c.watchNudge != nil {
		select {
		case c.watchNudge <- struct{}{}:
		default:
		}
	}
}

// watch is the disk watcher goroutine, started by Start and stopped by
// Stop: each second (or when nudged) it reads every data dir's free space,
// so puts and /healthz see space come and go without waiting for a put,
// and probes every failed log, writing the records it owes once the log is
// back.
func (c *Channel) watch(stop <-chan struct{}, nudge <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	n := len(c.dataDirs)
	next := make([]time.Time, n)
	backoff := make([]time.Duration, n)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-nudge:
		}
		c.watchOnce(next, backoff)
	}
}

func (c *Channel) watchOnce(next []time.Time, backoff []time.Duration) {
	readAt := time.Now()
	free := make([]int64, len(c.dataDirs))
	errs := make([]error, len(c.dataDirs))
	for i, d := range c.dataDirs {
		free[i], errs[i] = c.freeSpace(d)
	}
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return
	}
	logs := c.logs
	if !readAt.Before(c.spaceAt) { // a put may have read newer figures meanwhile
		c.lastSpace, c.spaceAt = readAt, readAt
		for i := range c.dataDirs {
			c.lookAtSpace(i, free[i], errs[i])
		}
	}
	// While a dir refuses puts, a checkpoint deletes the segments whose
	// events were all taken since, which may be what gives the space back.
	for i := range c.dataDirs {
		if c.dirRefusal(i) != "" && c.takenSinceCk && time.Since(c.lastFreeing) >= freeingInterval {
			c.lastFreeing = time.Now()
			c.requestCheckpoint()
			break
		}
	}
	c.mu.Unlock()

	now := time.Now()
	for i, w := range logs {
		err := w.Err()
		if err == nil {
			if c.owes(i) {
				c.flushOwed(i, w) // a flush that failed earlier, on a log that is back
			}
			continue
		}
		if outOfSpace(err) {
			// Probing a disk that is still full would only fail again.
			if errs[i] == nil && free[i] < max(c.minFree, probeFree) {
				continue
			}
		} else if now.Before(next[i].Add(-watchInterval / 10)) { // a tick may come a little early
			continue
		}
		if rerr := w.Recover(); rerr != nil {
			backoff[i] = min(max(2*backoff[i], watchInterval), maxProbeBackoff)
			next[i] = now.Add(backoff[i])
			c.log.Debug("file channel: data dir still cannot be written", "channel", c.name,
				"dir", c.dataDirs[i], "err", rerr, "next_probe_in", backoff[i].String())
			continue
		}
		backoff[i], next[i] = 0, time.Time{}
		c.flushOwed(i, w)
	}
}

// owes reports whether dir i has take or abort records waiting to be
// written.
func (c *Channel) owes(i int) bool {
	c.takeMu.Lock()
	defer c.takeMu.Unlock()
	return len(c.owed[i]) > 0
}

// flushOwed writes the records dir i's log owes, once it works again: take
// records appended before a failure cut them off, and records that could
// not be appended at all while it was failed. Until then those takes are
// in memory only (a crash would deliver their events again, never lose
// them).
func (c *Channel) flushOwed(i int, w *wal.Log) {
	c.takeMu.Lock()
	defer c.takeMu.Unlock()
	var recs [][]byte
	for _, u := range c.unsure[i] {
		if w.WaitDurable(u.ticket) != nil {
			recs = append(recs, u.rec)
		}
	}
	recs = append(recs, c.owed[i]...)
	c.unsure[i], c.lastTake[i] = nil, [takesInFlight]wal.Ticket{}
	if len(recs) == 0 {
		c.owed[i] = nil
		return
	}
	if _, err := w.Append(recs...); err != nil {
		c.owed[i] = recs // the log failed again; the next recovery writes them
		return
	}
	c.owed[i] = nil
	c.log.Debug("file channel: wrote the records owed since the disk failed", "channel", c.name,
		"dir", c.dataDirs[i], "records", len(recs))
}

// pruneTakes forgets dir d's take records that are durable up to ticket
// upTo. Lock takeMu.
func (c *Channel) pruneTakes(d int, w *wal.Log, upTo wal.Ticket) {
	kept := c.unsure[d][:0]
	for _, u := range c.unsure[d] {
		if u.ticket > upTo || w.WaitDurable(u.ticket) != nil {
			kept = append(kept, u)
		}
	}
	clear(c.unsure[d][len(kept):])
	c.unsure[d] = kept
}

func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
