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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	notEmpty  chan struct{}    // closed at the next put commit; nil while no taker waits
	notFull   flow.SpaceSignal // committers waiting for space
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
func (c *Channel) wakeCommitters() { c.notFull.Broadcast() }
