package listener

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
)

// Reason is one kind of refused input or closed connection.
type Reason struct {
	// Counter is the source metric counting it, such as "LineTooLongCount"
	// (Prometheus: sluice_source_line_too_long_total); "" counts nothing.
	// Reasons may share a counter.
	Counter string
	// Msg is the log message, saying what was refused and what was done.
	Msg   string
	Level slog.Level
	// Recovered, when set, makes the reason a failure of the source's own
	// (accepting connections, putting into its channels) rather than a
	// client's: its Adds are one failure streak (logthrottle.Streak), which
	// Rejects.Ok ends with this message, after the summary of the streak.
	Recovered string
}

// Counters are where Rejects count: a component's metrics.Set.
type Counters interface {
	Counter(name string) *atomic.Int64
}

// Throttling of reject logs: the first of each reason goes out at once,
// then at most one per interval carrying the count held back.
const (
	RejectLogInterval = 10 * time.Second
	rejectLogBurst    = 1
)

// Rejects logs and counts what a source refuses: each Add logs at the
// reason's level with the peer's address, throttled per reason (see
// internal/logthrottle), and adds to the reason's counter in the source's
// metrics. A reason with Recovered is a failure streak instead, ended by
// Ok. It is safe for concurrent use.
type Rejects struct {
	source string
	log    *slog.Logger
	set    Counters
	thr    *logthrottle.Throttle

	mu       sync.Mutex
	counters map[string]*atomic.Int64
	streaks  map[string]*logthrottle.Streak // by Msg, for reasons with Recovered
}

// streakHold is how long a source's own failure (such as its channel
// refusing puts) must have stopped before the streak ends: puts on a
// channel at its capacity fail and succeed in turn, which is one streak,
// not two lines per put.
const streakHold = 5 * time.Second

// NewRejects returns the rejects of source, counting into set (nil: no
// counters) and registering the counters of reasons there now, so they show
// as 0 before anything is refused.
func NewRejects(source string, log *slog.Logger, set Counters, reasons ...Reason) *Rejects {
	if log == nil {
		log = slog.Default()
	}
	r := &Rejects{source: source, log: log, set: set, thr: logthrottle.New(RejectLogInterval, rejectLogBurst),
		counters: map[string]*atomic.Int64{}, streaks: map[string]*logthrottle.Streak{}}
	for _, rs := range reasons {
		r.counter(rs)
	}
	return r
}

func (r *Rejects) counter(rs Reason) *atomic.Int64 {
	if r.set == nil || rs.Counter == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counters[rs.Counter]
	if c == nil {
		c = r.set.Counter(rs.Counter)
		r.counters[rs.Counter] = c
	}
	return c
}

// streak returns the failure streak of reason rs.
func (r *Rejects) streak(rs Reason) *logthrottle.Streak {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.streaks[rs.Msg]
	if s == nil {
		s = &logthrottle.Streak{Log: r.log, Level: rs.Level, Every: RejectLogInterval, Hold: streakHold,
			Failed: rs.Msg, Recovered: rs.Recovered}
		r.streaks[rs.Msg] = s
	}
	return s
}

// Ok ends the failure streak of reason rs (one with Recovered), if one is
// under way: the source calls it after each success of what rs fails.
func (r *Rejects) Ok(rs Reason, args ...any) {
	if r == nil || rs.Recovered == "" {
		return
	}
	r.mu.Lock()
	s := r.streaks[rs.Msg]
	r.mu.Unlock()
	if s != nil {
		s.Ok(append([]any{"source", r.source}, args...)...)
	}
}

// Flush writes the refusals still held back by the log throttle, and the
// summaries of failure streaks under way; the source calls it (through
// Group.Shutdown) when it stops.
func (r *Rejects) Flush() {
	if r == nil {
		return
	}
	r.thr.Flush()
	r.mu.Lock()
	streaks := make([]*logthrottle.Streak, 0, len(r.streaks))
	for _, s := range r.streaks {
		streaks = append(streaks, s)
	}
	r.mu.Unlock()
	for _, s := range streaks {
		s.Stop()
	}
}

// Add counts one rejected input of reason from peer and logs it, throttled.
func (r *Rejects) Add(rs Reason, peer string, args ...any) { r.AddN(rs, 1, peer, args...) }

// AddN counts n rejected inputs of reason from peer and logs them once, throttled.
func (r *Rejects) AddN(rs Reason, n int64, peer string, args ...any) {
	if r == nil {
		return
	}
	if c := r.counter(rs); c != nil {
		c.Add(n)
	}
	all := make([]any, 0, len(args)+6)
	all = append(all, "source", r.source)
	if peer != "" {
		all = append(all, "peer", peer)
	}
	if n != 1 {
		all = append(all, "count", n)
	}
	all = append(all, args...)
	if rs.Recovered != "" {
		r.streak(rs).Fail(nil, all...)
		return
	}
	r.thr.Log(r.log, rs.Level, r.source+"\x00"+rs.Msg, rs.Msg, all...)
}

// Count returns the counter of reason (0 when it has none), for tests and
// status lines.
func (r *Rejects) Count(rs Reason) int64 {
	if c := r.counter(rs); c != nil {
		return c.Load()
	}
	return 0
}
