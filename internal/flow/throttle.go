package flow

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// throttle lets a repeated message through at most once per interval and
// counts how many it held back, so a failing downstream does not flood the
// log. Safe for concurrent use.
type throttle struct {
	interval   time.Duration
	last       atomic.Int64 // Unix ns of the last message let through
	suppressed atomic.Int64
}

func newThrottle(interval time.Duration) *throttle { return &throttle{interval: interval} }

// log writes msg at level unless one went out less than interval ago; the
// message that goes out says how many were held back since the last one.
func (t *throttle) log(l *slog.Logger, level slog.Level, msg string, args ...any) {
	now := time.Now().UnixNano()
	last := t.last.Load()
	if last != 0 && now-last < int64(t.interval) || !t.last.CompareAndSwap(last, now) {
		t.suppressed.Add(1)
		return
	}
	if n := t.suppressed.Swap(0); n > 0 {
		args = append(args, "similar_messages_suppressed", n)
	}
	l.Log(context.Background(), level, msg, args...)
}
