package listener

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Reason is one kind of refused input or closed connection.
type Reason struct {
	// Counter is the source metric counting it, such as "LineTooLongCount"
	// (Prometheus: sluice_source_line_too_long_total); "" counts nothing.
	Counter string
	// Msg is the log message, saying what was refused and what was done.
	Msg   string
	Level slog.Level
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
// metrics. It is safe for concurrent use.
type Rejects struct {
	source string
	log    *slog.Logger
	set    *metrics.Set
	thr    *logthrottle.Throttle

	mu       sync.Mutex
	counters map[string]*atomic.Int64
}

// NewRejects returns the rejects of source, counting into set (nil: no
// counters) and registering the counters of reasons there now, so they show
// as 0 before anything is refused.
func NewRejects(source string, log *slog.Logger, set *metrics.Set, reasons ...Reason) *Rejects {
	if log == nil {
		log = slog.Default()
	}
	r := &Rejects{source: source, log: log, set: set, thr: logthrottle.New(RejectLogInterval, rejectLogBurst),
		counters: map[string]*atomic.Int64{}}
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

// Flush writes the refusals still held back by the log throttle; the
// source calls it (through Group.Shutdown) when it stops.
func (r *Rejects) Flush() {
	if r != nil {
		r.thr.Flush()
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
