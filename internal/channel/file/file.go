// Package file is Flume's file channel, made durable and fast: a put
// transaction is acknowledged (Commit returns) only after its events are
// written and fdatasync'ed to a write-ahead log (internal/wal), and
// concurrent transactions share one fdatasync (group commit). After a crash
// or power loss, Start replays the log from the last checkpoint and the
// channel holds every committed event that was not taken and committed.
//
// Properties (Flume's names and defaults):
//
//	checkpointDir          ~/.flume/file-channel/checkpoint   where the checkpoint is written
//	dataDirs               ~/.flume/file-channel/data         the log's directory (comma list; see below)
//	useDualCheckpoints     false    also write the checkpoint to backupCheckpointDir
//	backupCheckpointDir    -        required with useDualCheckpoints; used when the main one is damaged
//	capacity               1000000  events the channel holds, counting events taken by open transactions
//	transactionCapacity    10000    events one transaction may put, or take
//	checkpointInterval     30000    ms between checkpoints
//	maxFileSize            2146435071  bytes per log segment
//	minimumRequiredSpace   524288000   bytes that must stay free on the data disk; below it puts
//	                                   fail (takes go on) until space returns
//	keep-alive             3        seconds a commit waits for capacity
//	checkpointOnClose      true     write a checkpoint when the channel stops
//	use-fast-replay, fsyncPerTransaction  accepted for compatibility; sluice always syncs every
//	                                   commit (cheaply, with group commit) and always replays fast
//
// sluice extension:
//
//	cacheBytes             67108864  encoded event bytes kept in memory; events beyond it are
//	                                   read back from the log when taken
//
// Differences from Flume: several dataDirs are accepted but the log is
// written to the first one only (Flume spreads transactions across them).
// A transaction may put or take, not both (as in Flume).
//
// Memory: the channel keeps about 40 bytes per event it holds, plus event
// bodies up to cacheBytes. A segment is deleted at the first checkpoint
// after every event in it was taken and committed.
//
// Recovery never needs a person: a torn or damaged record, a truncated or
// missing segment, a missing or corrupt checkpoint each have a defined
// outcome (docs/format/wal.md) that keeps every intact event; what was lost
// is logged and counted in the channel's RecoveryLostEventCount (events)
// and LogDamagedRegionCount (damaged regions of the log, torn tails
// included).
package file

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/wal"
)

// Defaults, as in Flume.
const (
	DefaultCapacity             = 1000000
	DefaultTransactionCapacity  = 10000
	DefaultCheckpointInterval   = 30 * time.Second
	DefaultMaxFileSize          = 2146435071
	DefaultMinimumRequiredSpace = 524288000
	DefaultKeepAlive            = 3 * time.Second
	DefaultCacheBytes           = 64 << 20
)

// Channel is a file channel. It is safe for concurrent use; each
// transaction belongs to one goroutine.
type Channel struct {
	name         string
	log          *slog.Logger
	ckDir        string
	backupDir    string // "" unless useDualCheckpoints
	dataDir      string
	capacity     int
	txCap        int
	ckInterval   time.Duration
	maxFileSize  int64
	minFree      int64
	keepAlive    time.Duration
	ckOnClose    bool
	cacheBudget  int64
	counters     *metrics.ChannelCounters
	putErrors    *atomic.Int64
	takeErrors   *atomic.Int64
	ckErrors     *atomic.Int64
	ckBackupErrs *atomic.Int64
	lostEvents   *atomic.Int64

	// freeSpace reports the bytes available in dir; tests replace it.
	freeSpace func(dir string) (int64, error)

	// ckMu orders commits against checkpoints: a commit holds it shared
	// from its WAL append until its effect is in memory, a checkpoint holds
	// it exclusively while it snapshots the state and the WAL's end.
	ckMu sync.RWMutex

	mu sync.Mutex
	// Lock mu for everything below.
	wal        *wal.Log
	queue      deque
	reserved   int // queued + taken by open transactions + being committed: what capacity limits
	cached     int64
	live       map[uint64]int // events not yet taken-and-committed, by segment
	open       map[*tx]struct{}
	nextTx     uint64
	notEmpty   chan struct{} // closed at the next put commit; nil while no taker waits
	notFull    chan struct{} // closed when capacity is freed; nil while no committer waits
	running    bool
	lastSpace  time.Time
	spaceErr   error
	ckRequest  chan struct{}
	stop       chan struct{}
	ckLoopDone chan struct{}
}

var (
	_ flow.Channel    = (*Channel)(nil)
	_ flow.TxCapacity = (*Channel)(nil)
)

// entry is one event in the channel: where its put record is, and the
// event itself while it fits in the memory budget.
type entry struct {
	pos  wal.Position
	ev   *event.Event // nil: read it back from the log
	size int32        // encoded size, counted against cacheBudget while ev is set
}

// New builds a file channel from its properties; it touches no file.
func New(env flow.Env, p *config.Props) (flow.Channel, error) {
	c := &Channel{name: env.Name, log: env.Log(), freeSpace: diskFree}
	home, _ := os.UserHomeDir()
	c.ckDir = expandHome(p.String("checkpointDir", filepath.Join(home, ".flume/file-channel/checkpoint")), home)
	dirs := p.Split("dataDirs", ",")
	if len(dirs) == 0 {
		dirs = []string{filepath.Join(home, ".flume/file-channel/data")}
	}
	c.dataDir = expandHome(dirs[0], home)
	if len(dirs) > 1 {
		c.log.Warn("file channel writes its log to the first of dataDirs only", "channel", env.Name,
			"used", c.dataDir, "unused", strings.Join(dirs[1:], ","))
	}
	if p.Bool("useDualCheckpoints", false) {
		c.backupDir = expandHome(p.String("backupCheckpointDir", ""), home)
		if c.backupDir == "" {
			p.Errorf("useDualCheckpoints", "is true but backupCheckpointDir is not set; set backupCheckpointDir to a directory on another disk, or turn useDualCheckpoints off")
		} else if filepath.Clean(c.backupDir) == filepath.Clean(c.ckDir) {
			p.Errorf("backupCheckpointDir", "%q is checkpointDir itself; the backup must be a different directory", c.backupDir)
		}
	} else if p.Has("backupCheckpointDir") {
		p.String("backupCheckpointDir", "")
	}
	c.capacity = p.Int("capacity", DefaultCapacity)
	if c.capacity < 1 {
		p.Errorf("capacity", "%d is not a positive number of events; the default is %d", c.capacity, DefaultCapacity)
		c.capacity = DefaultCapacity
	}
	c.txCap = p.Int("transactionCapacity", DefaultTransactionCapacity)
	switch {
	case c.txCap < 1:
		p.Errorf("transactionCapacity", "%d is not a positive number of events; the default is %d", c.txCap, DefaultTransactionCapacity)
		c.txCap = min(DefaultTransactionCapacity, c.capacity)
	case c.txCap > c.capacity:
		p.Errorf("transactionCapacity", "%d is larger than capacity %d; a transaction must fit in the channel: raise capacity or lower transactionCapacity", c.txCap, c.capacity)
		c.txCap = c.capacity
	}
	ms := p.Int64("checkpointInterval", DefaultCheckpointInterval.Milliseconds())
	if ms < 100 {
		p.Errorf("checkpointInterval", "%d ms is too short; use at least 100 (the default is %d)", ms, DefaultCheckpointInterval.Milliseconds())
		ms = DefaultCheckpointInterval.Milliseconds()
	}
	c.ckInterval = time.Duration(ms) * time.Millisecond
	c.maxFileSize = p.Int64("maxFileSize", DefaultMaxFileSize)
	if c.maxFileSize < 1<<20 {
		p.Errorf("maxFileSize", "%d bytes is too small for a log segment; use at least 1048576", c.maxFileSize)
		c.maxFileSize = DefaultMaxFileSize
	}
	c.minFree = p.Int64("minimumRequiredSpace", DefaultMinimumRequiredSpace)
	if c.minFree < 0 {
		p.Errorf("minimumRequiredSpace", "%d is negative; give a number of bytes", c.minFree)
		c.minFree = DefaultMinimumRequiredSpace
	}
	ka := p.Float("keep-alive", DefaultKeepAlive.Seconds())
	if ka < 0 || ka > 24*3600 || math.IsNaN(ka) {
		p.Errorf("keep-alive", "%v is not a number of seconds from 0 to 86400", ka)
		ka = DefaultKeepAlive.Seconds()
	}
	c.keepAlive = time.Duration(ka * float64(time.Second))
	c.ckOnClose = p.Bool("checkpointOnClose", true)
	c.cacheBudget = p.Int64("cacheBytes", DefaultCacheBytes)
	if c.cacheBudget < 0 {
		p.Errorf("cacheBytes", "%d is negative; give a number of bytes (0 keeps no event in memory)", c.cacheBudget)
		c.cacheBudget = DefaultCacheBytes
	}
	p.Bool("use-fast-replay", false)
	p.Bool("fsyncPerTransaction", true)

	c.counters = metrics.NewChannelCounters(env.Name, env.Type)
	c.counters.SetSize(func() int64 { return int64(c.Len()) }, func() int64 { return int64(c.capacity) })
	s := c.counters.Set
	c.putErrors = s.Counter("EventPutErrorCount")
	c.takeErrors = s.Counter("EventTakeErrorCount")
	c.ckErrors = s.Counter("CheckpointWriteErrorCount")
	c.ckBackupErrs = s.Counter("CheckpointBackupWriteErrorCount")
	c.lostEvents = s.Counter("RecoveryLostEventCount")
	s.Gauge("Closed", func() string { return boolDigit(!c.isRunning()) })
	s.Gauge("Unhealthy", func() string { return boolDigit(c.walErr() != nil) })
	// sluice extensions: the log underneath.
	s.Gauge("LogSyncCount", func() string { return strconv.FormatUint(c.walStats().Syncs, 10) })
	s.Gauge("LogBytesWritten", func() string { return strconv.FormatUint(c.walStats().BytesWritten, 10) })
	s.Gauge("LogDamagedRegionCount", func() string { return strconv.FormatUint(c.walStats().LostRegions, 10) })
	env.Registry().Add(s)
	return c, nil
}

func expandHome(p, home string) string {
	if p == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(home, rest)
	}
	return p
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// TransactionCapacity is the most events one transaction may put or take.
func (c *Channel) TransactionCapacity() int { return c.txCap }

// Capacity is the most events the channel holds.
func (c *Channel) Capacity() int { return c.capacity }

func (c *Channel) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

func (c *Channel) walStats() wal.Stats {
	c.mu.Lock()
	w := c.wal
	c.mu.Unlock()
	if w == nil {
		return wal.Stats{}
	}
	return w.Stats()
}

func (c *Channel) walErr() error {
	c.mu.Lock()
	w := c.wal
	c.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.Err()
}

// Start opens the log, replays it from the last checkpoint and starts the
// checkpointer. After a Stop it reopens everything, which also clears a
// sticky write error.
func (c *Channel) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	for _, d := range []string{c.ckDir, c.backupDir} {
		if d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("file channel %s: %w", c.name, err)
			}
		}
	}
	c.counters.Started() // resets the counters, so before replay counts its losses
	w, err := wal.Open(c.dataDir, wal.Options{SegmentSize: c.maxFileSize, Logger: c.log.With("channel", c.name)})
	if err != nil {
		return fmt.Errorf("file channel %s: %w", c.name, err)
	}
	st, err := c.replay(w)
	if err != nil {
		w.Close()
		return fmt.Errorf("file channel %s: replay: %w", c.name, err)
	}
	c.mu.Lock()
	c.wal = w
	c.queue = st.queue
	c.reserved = st.queue.len()
	c.cached = st.cached
	c.live = st.live
	c.open = make(map[*tx]struct{})
	c.nextTx = st.nextTx
	c.running = true
	c.lastSpace = time.Time{}
	c.ckRequest = make(chan struct{}, 1)
	c.stop = make(chan struct{})
	c.ckLoopDone = make(chan struct{})
	c.mu.Unlock()
	c.log.Info("file channel started", "channel", c.name, "events", st.queue.len(),
		"replayed_records", st.records, "from_checkpoint", st.fromCheckpoint, "took", st.took.String())
	// A fresh checkpoint makes the next start fast and records what replay
	// settled (aborted transactions, lost events).
	if err := c.checkpoint(); err != nil {
		c.log.Warn("file channel: checkpoint after replay failed", "channel", c.name, "err", err)
	}
	go c.checkpointLoop()
	return nil
}

// Stop stops the checkpointer, writes a last checkpoint (checkpointOnClose)
// and closes the log. Waiting takes and commits return ErrClosed; the
// events stay on disk for the next Start.
func (c *Channel) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return nil
	}
	c.running = false
	close(c.stop)
	c.wakeTakers()
	c.wakeCommitters()
	done := c.ckLoopDone
	c.mu.Unlock()
	<-done
	var errs []error
	if c.ckOnClose {
		errs = append(errs, c.checkpoint())
	}
	// Commits in flight finish before the log closes.
	c.ckMu.Lock()
	c.mu.Lock()
	w := c.wal
	c.wal = nil
	c.queue = deque{}
	c.mu.Unlock()
	c.ckMu.Unlock()
	errs = append(errs, w.Close())
	c.counters.Stopped()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("file channel %s: stop: %w", c.name, err)
	}
	return nil
}

// Len reports the committed events the channel holds and that no open
// transaction has taken.
func (c *Channel) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queue.len()
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
func (c *Channel) wakeCommitters() {
	if c.notFull != nil {
		close(c.notFull)
		c.notFull = nil
	}
}

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
		if err := c.checkpoint(); err != nil {
			c.log.Warn("file channel: checkpoint failed", "channel", c.name, "err", err)
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
	w := c.wal
	if w == nil {
		c.mu.Unlock()
		c.ckMu.Unlock()
		return nil
	}
	end := w.End()
	pos := make([]wal.Position, 0, c.reserved)
	for t := range c.open {
		for _, e := range t.takes {
			pos = append(pos, e.pos)
		}
	}
	c.queue.each(func(e *entry) { pos = append(pos, e.pos) })
	keep := end.Segment
	for s, n := range c.live {
		if n > 0 && s < keep {
			keep = s
		}
	}
	nextTx := c.nextTx
	c.mu.Unlock()
	c.ckMu.Unlock()

	ck := wal.Checkpoint{Position: end, Payload: encodeCheckpoint(nextTx, pos)}
	if err := wal.WriteCheckpoint(c.ckDir, ck); err != nil {
		c.ckErrors.Add(1)
		return err
	}
	if c.backupDir != "" {
		if err := wal.WriteCheckpoint(c.backupDir, ck); err != nil {
			c.ckBackupErrs.Add(1)
			c.log.Warn("file channel: backup checkpoint failed", "channel", c.name, "err", err)
		}
	}
	if err := w.TruncateBefore(keep); err != nil {
		return err
	}
	c.mu.Lock()
	for s := range c.live {
		if s < keep {
			delete(c.live, s)
		}
	}
	c.mu.Unlock()
	return nil
}

// checkSpace fails puts while the data disk has less than
// minimumRequiredSpace free. It asks statfs at most every 100 ms. Lock must
// be held.
func (c *Channel) checkSpace() error {
	if c.minFree == 0 {
		return nil
	}
	now := time.Now()
	if now.Sub(c.lastSpace) < 100*time.Millisecond {
		return c.spaceErr
	}
	c.lastSpace = now
	free, err := c.freeSpace(c.dataDir)
	switch {
	case err != nil:
		c.spaceErr = nil // cannot tell: do not block puts on it
		c.log.Warn("file channel: cannot read free disk space", "channel", c.name, "dir", c.dataDir, "err", err)
	case free < c.minFree:
		if c.spaceErr == nil {
			c.log.Warn("file channel: disk almost full, refusing puts", "channel", c.name, "dir", c.dataDir,
				"free", free, "minimumRequiredSpace", c.minFree)
		}
		c.spaceErr = flow.FullErrorf("file channel %s: %s has %d bytes free, below minimumRequiredSpace %d; "+
			"puts are refused until space is freed (takes go on)", c.name, c.dataDir, free, c.minFree)
		c.requestCheckpoint() // deletes fully taken segments
	default:
		if c.spaceErr != nil {
			c.log.Info("file channel: disk space back, accepting puts", "channel", c.name, "free", free)
		}
		c.spaceErr = nil
	}
	return c.spaceErr
}

// waitSpace waits up to keep-alive until n more events fit, then reserves
// them. Lock must be held; it is released while waiting.
func (c *Channel) reserve(n int) error {
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
		if c.notFull == nil {
			c.notFull = make(chan struct{})
		}
		wait := c.notFull
		c.mu.Unlock()
		expired := false
		select {
		case <-wait:
		case <-timer.C:
			expired = true
		}
		c.mu.Lock()
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
	dead   []wal.Position // taken events whose record was unreadable
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
	c.mu.Lock()
	for c.queue.len() == 0 {
		if !c.running {
			c.mu.Unlock()
			return dst, fmt.Errorf("file channel %s: take: %w", c.name, flow.ErrClosed)
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
	k := min(c.queue.len(), max)
	start := len(t.takes)
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
	w := c.wal
	c.mu.Unlock()

	attempts := int64(k)
	if k < max {
		attempts++ // Flume's sink loop counts the take that found nothing
	}
	c.counters.EventTakeAttempt.Add(attempts)

	// Read back the events that were not kept in memory.
	var buf []byte
	var dead []int
	for i, e := range t.takes[start:] {
		if e.ev != nil {
			dst = append(dst, *e.ev)
			continue
		}
		var err error
		buf, err = w.ReadAt(e.pos, buf[:0])
		var ev event.Event
		if err == nil {
			_, ev, err = decodePut(buf)
		}
		var ce *wal.CorruptionError
		if errors.As(err, &ce) || errors.Is(err, errBadRecord) || errors.Is(err, os.ErrNotExist) {
			c.lostEvents.Add(1)
			c.log.Error("file channel: event lost to log damage", "channel", c.name, "position", e.pos.String(), "err", err)
			dead = append(dead, start+i)
			continue
		}
		if err != nil {
			// An I/O error; Rollback gives back what was taken.
			c.takeErrors.Add(1)
			return dst, fmt.Errorf("file channel %s: take: %w", c.name, err)
		}
		dst = append(dst, ev)
	}
	if len(dead) > 0 {
		// Unreadable events are recorded as taken at commit, never returned.
		c.mu.Lock()
		kept := t.takes[:start]
		for i, e := range t.takes[start:] {
			if len(dead) > 0 && dead[0] == start+i {
				dead = dead[1:]
				t.dead = append(t.dead, e.pos)
				continue
			}
			kept = append(kept, e)
		}
		t.takes = kept
		c.mu.Unlock()
	}
	return dst, nil
}

func (t *tx) Commit() error {
	c := t.c
	if t.done {
		return fmt.Errorf("file channel %s: commit: %w", c.name, errDone)
	}
	switch {
	case len(t.puts) > 0:
		return t.commitPuts()
	case len(t.takes) > 0 || len(t.dead) > 0:
		return t.commitTakes()
	}
	t.finish()
	return nil
}

func (t *tx) commitPuts() error {
	c := t.c
	n := len(t.puts)
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return fmt.Errorf("file channel %s: commit: %w", c.name, flow.ErrClosed)
	}
	if err := c.checkSpace(); err != nil {
		c.mu.Unlock()
		return err
	}
	if err := c.reserve(n); err != nil {
		c.mu.Unlock()
		return err
	}
	c.nextTx++
	txid := c.nextTx
	c.mu.Unlock()

	now := event.Now()
	size := 13
	for i := range t.puts {
		size += putSize(&t.puts[i])
	}
	buf := make([]byte, 0, size)
	recs := make([][]byte, n+1)
	for i := range t.puts {
		t.puts[i].CommittedAt = now
		s := len(buf)
		buf = appendPut(buf, txid, now, &t.puts[i])
		recs[i] = buf[s:]
	}
	s := len(buf)
	buf = appendCommit(buf, txid, n)
	recs[n] = buf[s:]
	pos := make([]wal.Position, n+1)

	c.ckMu.RLock()
	c.mu.Lock()
	w := c.wal
	c.mu.Unlock()
	var err error
	if w == nil {
		err = flow.ErrClosed
	} else {
		err = w.AppendPositions(pos, recs...)
	}
	c.mu.Lock()
	if err != nil {
		c.reserved -= n
		c.wakeCommitters()
		c.mu.Unlock()
		c.ckMu.RUnlock()
		c.putErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: %w", c.name, err)
	}
	for i := range t.puts {
		e := entry{pos: pos[i], size: int32(len(recs[i]))}
		if c.cached+int64(e.size) <= c.cacheBudget {
			ev := t.puts[i]
			e.ev = &ev
			c.cached += int64(e.size)
		}
		c.queue.pushBack(e)
		c.live[pos[i].Segment]++
	}
	c.wakeTakers()
	c.mu.Unlock()
	c.ckMu.RUnlock()
	c.counters.EventPutSuccess.Add(int64(n))
	t.finish()
	return nil
}

func (t *tx) commitTakes() error {
	c := t.c
	pos := make([]wal.Position, 0, len(t.takes)+len(t.dead))
	for _, e := range t.takes {
		pos = append(pos, e.pos)
	}
	pos = append(pos, t.dead...)
	rec := appendTake(nil, pos)

	c.ckMu.RLock()
	c.mu.Lock()
	w := c.wal
	c.mu.Unlock()
	var err error
	if w == nil {
		err = flow.ErrClosed
	} else {
		_, err = w.Append(rec)
	}
	if err != nil {
		c.ckMu.RUnlock()
		c.takeErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: %w", c.name, err)
	}
	c.mu.Lock()
	for _, p := range pos {
		c.live[p.Segment]--
	}
	c.reserved -= len(pos)
	delete(c.open, t)
	t.isOpen = false
	c.wakeCommitters()
	c.mu.Unlock()
	c.ckMu.RUnlock()
	c.counters.EventTakeSuccess.Add(int64(len(t.takes)))
	t.finish()
	return nil
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
		for _, p := range t.dead {
			c.live[p.Segment]--
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
	t.puts, t.takes, t.dead = nil, nil, nil
	t.done = true
}
