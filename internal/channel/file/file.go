// Package filechannel is Flume's file channel, made durable and fast: a put
// transaction is acknowledged (Commit returns) only after its events are
// written and fdatasync'ed to a write-ahead log (internal/wal), and
// concurrent transactions share one fdatasync (group commit). After a crash
// or power loss, Start replays the log from the last checkpoint and the
// channel holds every committed event that was not taken and committed. A
// take commit waits for the fdatasync of the take commit two before it in
// its log (takesInFlight), not its own, which goes out with the next put's
// write and fdatasync (or when a later take commit waits for it, or within
// 200 ms): a crash in between delivers those batches again (at least
// once), never loses them.
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
//	                                   fail (takes go on) until space returns; Start warns when
//	                                   a dir is already below it
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
// A full or failing disk needs no person either (disk.go): puts are
// refused (as a full channel) while no data dir can take them, takes and
// their commits go on, and a watcher brings each failed log back as soon
// as it can be written, with no restart. Health says why puts are refused.
//
// Recovery never needs a person: a torn or damaged record, a truncated or
// missing segment, a missing or corrupt checkpoint each have a defined
// outcome (docs/format/wal.md) that keeps every intact event; what was lost
// is said in one line per start and counted in the channel's
// RecoveryLostEventCount (events) and LogDamagedRegionCount (damaged
// regions of the log, torn tails included).
package filechannel

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
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
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

	// takeMu orders take records with lastTake: per dir, the tickets of the
	// newest takesInFlight take records, oldest first; the next take
	// commit waits for the oldest. unsure
	// holds, per dir, the take records appended but not yet known durable,
	// and owed the records a failed log could not take (disk.go); both are
	// written when the log is back.
	takeMu   sync.Mutex
	lastTake [][takesInFlight]wal.Ticket
	unsure   [][]takeRec
	owed     [][][]byte

	// throttle keeps repeated reports of events lost to damage when taken
	// from flooding the log; failure streaks (a dir short of space, statfs
	// failing, checkpoints failing) are told by streaks, each ending with
	// its recovery.
	throttle           *logthrottle.Throttle
	ckStreak, bkStreak *logthrottle.Streak   // checkpoints, backup checkpoints
	lowStreak          []*logthrottle.Streak // per dir: below minimumRequiredSpace
	statfsStreak       []*logthrottle.Streak // per dir: free space unreadable

	mu sync.Mutex
	// Lock mu for everything below.
	logs      []*wal.Log // one per data dir; nil while stopped
	queue     deque
	reserved  int // queued + taken by open transactions + being committed: what capacity limits
	cached    int64
	live      []map[uint64]int // per dir: events not yet taken-and-committed, by segment
	open      map[*tx]struct{}
	nextTx    uint64
	notEmpty  chan struct{} // closed at the next put commit; nil while no taker waits
	notFull   chan struct{} // closed when capacity is freed; nil while no committer waits
	running   bool
	lastSpace time.Time
	spaceAt   time.Time // when the free space figures in use were read
	lowSpace  []bool    // per dir: below minimumRequiredSpace at the last look
	free      []int64   // per dir: free bytes at the last look
	// takenSinceCk is set by take commits and cleared by a checkpoint;
	// lastFreeing is when the watcher last asked for a checkpoint to free
	// space.
	takenSinceCk bool
	lastFreeing  time.Time
	// ckFails counts checkpoints failed in a row since ckFailSince (the
	// last one's error in ckErr); a success resets it.
	ckFails     int
	ckFailSince time.Time
	ckErr       error
	ckRequest   chan struct{}
	stop        chan struct{}
	ckLoopDone  chan struct{}
	watchNudge  chan struct{}
	watchDone   chan struct{}
}

var (
	_ flow.Channel        = (*Channel)(nil)
	_ flow.TxCapacity     = (*Channel)(nil)
	_ flow.HealthReporter = (*Channel)(nil)
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
	c := &Channel{name: env.Name, log: env.Log(), freeSpace: diskFree, throttle: logthrottle.New(time.Minute, 1)}
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
	if c.maxFileSize > DefaultMaxFileSize {
		// Flume caps it the same way, without a word; sluice says so.
		c.log.Warn("file channel: maxFileSize is above its maximum; using the maximum, as Flume does",
			"channel", env.Name, "maxFileSize", c.maxFileSize, "maximum", int64(DefaultMaxFileSize))
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
	// Unhealthy is what /healthz says: 1 while puts are refused for lack
	// of disk space or a failing disk.
	s.Gauge("Unhealthy", func() string { return boolDigit(c.Health() != nil) })
	s.Gauge("LogFailureCount", func() string { return strconv.FormatUint(c.walStats().Failures, 10) })
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
		sum.Failures += st.Failures
		sum.Recoveries += st.Recoveries
	}
	return sum
}

// Start opens the log, replays it from the last checkpoint and starts the
// checkpointer and the disk watcher. A disk too full to start a new
// segment does not stop it: the channel starts refusing puts, hands out
// what it holds, and takes puts once space returns.
func (c *Channel) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	fd, err := findFlumeData(c.ckDir, c.dataDirs)
	if err != nil {
		return fmt.Errorf("file channel %s: %w", c.name, err)
	}
	if len(fd.files) > 0 {
		if fd.events != 0 {
			return fd.err(c.name)
		}
		c.log.Warn("file channel directories hold a drained Flume file channel (0 events at its last checkpoint): sluice starts beside it, "+
			"leaves its log files in place and writes its own checkpoint file over Flume's; remove Flume's files when Flume no longer needs them",
			"channel", c.name, "flume_files", shortList(fd.files))
	}
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
			_ = w.Close() // the start already failed; that error is returned
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
	c.lastTake = make([][takesInFlight]wal.Ticket, len(logs))
	c.unsure = make([][]takeRec, len(logs))
	c.owed = st.owed
	c.takeMu.Unlock()
	c.mu.Lock()
	c.logs = logs
	c.lowSpace = make([]bool, len(logs))
	c.free = make([]int64, len(logs))
	c.newStreaks(len(logs))
	c.warnLowSpace()
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
	c.watchNudge = make(chan struct{}, 1)
	c.watchDone = make(chan struct{})
	c.mu.Unlock()
	c.log.Info("file channel started", "channel", c.name, "events", st.queue.len(),
		"replayed_records", st.records, "from_checkpoint", st.fromCheckpoint, "took", st.took.String())
	// A fresh checkpoint makes the next start fast and records what replay
	// settled (aborted transactions, lost events).
	if err := c.checkpoint(); err != nil {
		c.log.Warn("file channel: checkpoint after replay failed", "channel", c.name, "err", err)
	}
	panics.Go("file channel "+c.name+": checkpointer", c.checkpointLoop)
	stop, nudge, done := c.stop, c.watchNudge, c.watchDone
	panics.Go("file channel "+c.name+": disk watch", func() { c.watch(stop, nudge, done) })
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
	done, watchDone, logs := c.ckLoopDone, c.watchDone, c.logs
	c.mu.Unlock()
	<-done
	<-watchDone
	// One last chance for a log that failed to take the records it owes,
	// so the next start need not deliver those takes again.
	for i, w := range logs {
		if w.Recover() == nil {
			c.flushOwed(i, w)
		}
	}
	var errs []error
	if c.ckOnClose {
		errs = append(errs, c.checkpoint())
	}
	// Commits in flight finish before the log closes.
	c.ckMu.Lock()
	c.mu.Lock()
	c.logs = nil
	c.queue = deque{}
	c.mu.Unlock()
	c.ckMu.Unlock()
	for _, w := range logs {
		errs = append(errs, w.Close())
	}
	c.throttle.Flush()
	c.stopStreaks()
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
		if c.notFull == nil {
			c.notFull = make(chan struct{})
		}
		wait := c.notFull
		c.mu.Unlock()
		expired, ended := false, false
		select {
		case <-wait:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
			ended = true
		}
		c.mu.Lock()
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
