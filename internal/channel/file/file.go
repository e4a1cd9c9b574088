// Package file is Flume's file channel, made durable and fast: a put
// transaction is acknowledged (Commit returns) only after its events are
// written and fdatasync'ed to a write-ahead log (internal/wal), and
// concurrent transactions share one fdatasync (group commit). After a crash
// or power loss, Start replays the log from the last checkpoint and the
// channel holds every committed event that was not taken and committed. A
// take commit waits for the fdatasync of the take commit before it, not
// its own, which follows within about one sync time: a crash in between
// delivers that one batch again (at least once), never loses it.
//
// Properties (Flume's names and defaults):
//
//	checkpointDir          ~/.flume/file-channel/checkpoint   where the checkpoint is written
//	dataDirs               ~/.flume/file-channel/data         comma list of log directories; each holds
//	                                   its own log and transactions are spread across them
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
// Several dataDirs share the load as in Flume: each dir holds its own log,
// put transaction number n goes to dir n mod len(dataDirs) (skipping dirs
// whose disk is below minimumRequiredSpace), and a take transaction writes
// one take record into the log of each dir it took events from, so every
// log is self-contained and a damaged or missing dir costs only the events
// put into it. One queue keeps the order of commits across all dirs; replay
// merges the dirs' transactions by transaction number (docs/format/wal.md,
// "Several data directories"). A transaction may put or take, not both (as
// in Flume).
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
	"os"
	"path/filepath"
	"slices"
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
	dataDirs     []string
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
	// walOpts, when set, adjusts each log's options (tests inject faults).
	walOpts func(dir int, o *wal.Options)

	// ckMu orders commits against checkpoints: a commit holds it shared
	// from its WAL append until its effect is in memory, a checkpoint holds
	// it exclusively while it snapshots the state and the WAL's end.
	ckMu sync.RWMutex

	// takeMu orders take records with lastTake: per dir, the ticket of the
	// newest take record, which the next take commit waits for.
	takeMu   sync.Mutex
	lastTake []wal.Ticket

	mu sync.Mutex
	// Lock mu for everything below.
	logs       []*wal.Log // one per data dir; nil while stopped
	queue      deque
	reserved   int // queued + taken by open transactions + being committed: what capacity limits
	cached     int64
	live       []map[uint64]int // per dir: events not yet taken-and-committed, by segment
	open       map[*tx]struct{}
	nextTx     uint64
	notEmpty   chan struct{} // closed at the next put commit; nil while no taker waits
	notFull    chan struct{} // closed when capacity is freed; nil while no committer waits
	running    bool
	lastSpace  time.Time
	lowSpace   []bool // per dir: below minimumRequiredSpace at the last look
	ckRequest  chan struct{}
	stop       chan struct{}
	ckLoopDone chan struct{}
}

var (
	_ flow.Channel    = (*Channel)(nil)
	_ flow.TxCapacity = (*Channel)(nil)
)

// entry is one event in the channel: where its put record is (data dir
// and position in that dir's log), and the event itself while it fits in
// the memory budget.
type entry struct {
	pos  wal.Position
	ev   *event.Event // nil: read it back from the log
	size int32        // encoded size, counted against cacheBudget while ev is set
	dir  int32        // index in dataDirs
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
	seen := map[string]bool{}
	for _, d := range dirs {
		d = expandHome(d, home)
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		if seen[d] {
			p.Errorf("dataDirs", "lists %q twice; each data directory may appear once", d)
			continue
		}
		seen[d] = true
		c.dataDirs = append(c.dataDirs, d)
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
	lim := flow.ReadChannelLimits(p, flow.ChannelLimits{
		Capacity: DefaultCapacity, TransactionCapacity: DefaultTransactionCapacity, KeepAlive: DefaultKeepAlive})
	c.capacity, c.txCap, c.keepAlive = lim.Capacity, lim.TransactionCapacity, lim.KeepAlive
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
	s.Gauge("Unhealthy", func() string { return boolDigit(c.unhealthy() != nil) })
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

// walStats sums the logs' counters.
func (c *Channel) walStats() wal.Stats {
	c.mu.Lock()
	logs := c.logs
	c.mu.Unlock()
	var sum wal.Stats
	for _, w := range logs {
		st := w.Stats()
		sum.Appends += st.Appends
		sum.Records += st.Records
		sum.BytesWritten += st.BytesWritten
		sum.Syncs += st.Syncs
		sum.SegmentsCreated += st.SegmentsCreated
		sum.SegmentsDeleted += st.SegmentsDeleted
		sum.LostRegions += st.LostRegions
		sum.LostBytes += st.LostBytes
	}
	return sum
}

// unhealthy returns the sticky write error of a log, if one has failed:
// then every commit fails fast with it until the channel is restarted.
func (c *Channel) unhealthy() error {
	c.mu.Lock()
	logs := c.logs
	c.mu.Unlock()
	for _, w := range logs {
		if err := w.Err(); err != nil {
			return err
		}
	}
	return nil
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
	logs := make([]*wal.Log, 0, len(c.dataDirs))
	closeAll := func() {
		for _, w := range logs {
			w.Close()
		}
	}
	for i, d := range c.dataDirs {
		o := wal.Options{SegmentSize: c.maxFileSize, Logger: c.log.With("channel", c.name)}
		if c.walOpts != nil {
			c.walOpts(i, &o)
		}
		w, err := wal.Open(d, o)
		if err != nil {
			closeAll()
			return fmt.Errorf("file channel %s: %w", c.name, err)
		}
		logs = append(logs, w)
	}
	st, err := c.replay(logs)
	if err != nil {
		closeAll()
		return fmt.Errorf("file channel %s: replay: %w", c.name, err)
	}
	c.takeMu.Lock()
	c.lastTake = make([]wal.Ticket, len(logs))
	c.takeMu.Unlock()
	c.mu.Lock()
	c.logs = logs
	c.lowSpace = make([]bool, len(logs))
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
	logs := c.logs
	c.logs = nil
	c.queue = deque{}
	c.mu.Unlock()
	c.ckMu.Unlock()
	for _, w := range logs {
		errs = append(errs, w.Close())
	}
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

// Durable implements flow.Durable: its events are on disk: a stop or a crash keeps them for the next start.
func (c *Channel) Durable() bool { return true }

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
	c.mu.Unlock()
	c.ckMu.Unlock()

	// The log-level position is the first dir's; the payload has them all.
	ck := wal.Checkpoint{Position: dirs[0].from, Payload: encodeCheckpoint(nextTx, dirs, held)}
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

// pickDir chooses the data dir of put transaction txid: dir txid mod n,
// or the next one whose disk has at least minimumRequiredSpace free. With
// every dir below it, puts fail with a "channel full" error (the source
// pushes back) while takes go on. Free space is read with statfs at most
// every 100 ms. Lock must be held.
func (c *Channel) pickDir(txid uint64) (int, error) {
	n := len(c.dataDirs)
	if c.minFree > 0 {
		if now := time.Now(); now.Sub(c.lastSpace) >= 100*time.Millisecond {
			c.lastSpace = now
			for i, d := range c.dataDirs {
				c.lookAtSpace(i, d)
			}
		}
	}
	for k := range n {
		i := int((txid + uint64(k)) % uint64(n))
		if !c.lowSpace[i] {
			return i, nil
		}
	}
	c.requestCheckpoint() // deletes fully taken segments
	return 0, flow.FullErrorf("file channel %s: every data dir (%s) has less than minimumRequiredSpace %d bytes free; "+
		"puts are refused until space is freed (takes go on)", c.name, strings.Join(c.dataDirs, ", "), c.minFree)
}

// lookAtSpace updates lowSpace[i]. Lock must be held.
func (c *Channel) lookAtSpace(i int, dir string) {
	free, err := c.freeSpace(dir)
	switch {
	case err != nil:
		c.lowSpace[i] = false // cannot tell: do not block puts on it
		c.log.Warn("file channel: cannot read free disk space", "channel", c.name, "dir", dir, "err", err)
	case free < c.minFree:
		if !c.lowSpace[i] {
			c.log.Warn("file channel: disk almost full, refusing puts to this data dir", "channel", c.name, "dir", dir,
				"free", free, "minimumRequiredSpace", c.minFree)
		}
		c.lowSpace[i] = true
		c.requestCheckpoint()
	default:
		if c.lowSpace[i] {
			c.log.Info("file channel: disk space back, accepting puts to this data dir", "channel", c.name, "dir", dir, "free", free)
		}
		c.lowSpace[i] = false
	}
}

// reserve waits up to keep-alive until n more events fit, then reserves
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
			c.log.Error("file channel: event lost to log damage", "channel", c.name, "position", e.pos.String(), "err", err)
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

func (t *tx) commitPuts() error {
	c := t.c
	n := len(t.puts)
	if err := c.unhealthy(); err != nil {
		c.putErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: the log failed earlier and refuses writes until the channel restarts: %w", c.name, err)
	}
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return fmt.Errorf("file channel %s: commit: %w", c.name, flow.ErrClosed)
	}
	dir, err := c.pickDir(c.nextTx + 1)
	if err != nil {
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

	// Encode straight into the log's frames (one copy of each body), in a
	// pooled buffer.
	now := event.Now()
	cb := commitPool.Get().(*commitBuf)
	defer cb.release()
	b := &cb.batch
	b.Reset()
	for i := range t.puts {
		t.puts[i].CommittedAt = now
		buf := b.Begin()
		if err := b.End(appendPut(buf, txid, now, &t.puts[i])); err != nil {
			c.unreserve(n)
			c.putErrors.Add(1)
			return fmt.Errorf("file channel %s: commit: event %d: %w", c.name, i, err)
		}
	}
	b.End(appendCommit(b.Begin(), txid, n))
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
		c.putErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: %w", c.name, err)
	}
	var kept []event.Event // one allocation for the events kept in memory
	c.mu.Lock()
	live := c.live[dir]
	for i := range t.puts {
		e := entry{pos: pos[i], size: int32(b.PayloadLen(i)), dir: int32(dir)}
		if c.cached+int64(e.size) <= c.cacheBudget {
			if kept == nil {
				kept = make([]event.Event, 0, n-i)
			}
			kept = append(kept, t.puts[i])
			e.ev = &kept[len(kept)-1]
			c.cached += int64(e.size)
		}
		c.queue.pushBack(e)
		live[pos[i].Segment]++
	}
	c.wakeTakers()
	c.mu.Unlock()
	c.ckMu.RUnlock()
	c.counters.EventPutSuccess.Add(int64(n))
	t.finish()
	return nil
}

// commitTakes records the take in the log of each data dir the events came
// from (one take record per dir), so each dir's log stays self-contained.
func (t *tx) commitTakes() error {
	c := t.c
	if err := c.unhealthy(); err != nil {
		c.takeErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: the log failed earlier and refuses writes until the channel restarts: %w", c.name, err)
	}
	all := append(t.takes, t.dead...)
	var byDir map[int32][]wal.Position
	first := all[0].dir
	single := true
	for _, e := range all {
		if e.dir != first {
			single = false
			break
		}
	}
	if !single {
		byDir = make(map[int32][]wal.Position)
		for _, e := range all {
			byDir[e.dir] = append(byDir[e.dir], e.pos)
		}
	} else {
		pos := make([]wal.Position, len(all))
		for i, e := range all {
			pos[i] = e.pos
		}
		byDir = map[int32][]wal.Position{first: pos}
	}

	c.ckMu.RLock()
	c.mu.Lock()
	logs := c.logs
	c.mu.Unlock()
	var err error
	// A take commit waits for the previous take record of each log, not
	// for its own: a sink's next batch then overlaps this record's
	// fdatasync, instead of every sink commit costing a disk round trip.
	// A record lost in a crash only makes its events be delivered again
	// (the sink had them acknowledged before committing), and at most the
	// newest take commit of each log is acknowledged but not yet durable.
	if logs == nil {
		err = flow.ErrClosed
	} else {
		var list []error
		prev := make(map[int32]wal.Ticket, len(byDir))
		c.takeMu.Lock()
		for d, pos := range byDir {
			tk, err := logs[d].AppendAsync(appendTake(nil, pos))
			if err != nil {
				list = append(list, err)
				continue
			}
			prev[d], c.lastTake[d] = c.lastTake[d], tk
		}
		c.takeMu.Unlock()
		for d, tk := range prev {
			list = append(list, logs[d].WaitDurable(tk))
		}
		err = errors.Join(list...)
	}
	if err != nil {
		c.ckMu.RUnlock()
		c.takeErrors.Add(1)
		return fmt.Errorf("file channel %s: commit: %w", c.name, err)
	}
	c.mu.Lock()
	for _, e := range all {
		c.live[e.dir][e.pos.Segment]--
	}
	c.reserved -= len(all)
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
	t.puts, t.takes, t.dead = nil, nil, nil
	t.done = true
}
