// Package logthrottle keeps repeated log messages from flooding the log: a
// peer that sends a thousand bad frames a second, or a downstream that
// refuses every batch, is told about once, then summarised.
//
// Messages are grouped by a key (usually the message text). The first Burst
// messages of a key go out at once; after that at most one per Interval goes
// out, carrying how many were held back since the last one. When messages
// stop arriving, the count of those still held back is written once the
// interval ends, so no suppression goes unreported.
//
// A run of failures of one thing (a downstream that is down, a full disk, a
// broker outage) is told through a Streak instead, which every component
// shares: one line when the failure starts, at most a periodic summary
// while it lasts, and when it ends the summary first, then one line saying
// it recovered, after how long and how many failed attempts. A Throttle's
// summary comes on a timer and could follow the recovery; a Streak's never
// does.
package logthrottle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/panics"
)

// Throttle is safe for concurrent use. The zero value is not usable; call New.
type Throttle struct {
	interval time.Duration
	burst    int

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	windowStart time.Time // start of the current interval
	sent        int       // messages let through in the current interval
	suppressed  int64     // held back since the last message that went out
	flush       *time.Timer
	// last held-back message, for the summary written when messages stop
	l     *slog.Logger
	level slog.Level
	msg   string
	args  []any
}

// maxKeys bounds the memory a caller that builds keys from peer input could
// take: past it, keys are forgotten (their pending summaries still go out).
const maxKeys = 1024

// New returns a Throttle that lets burst messages of a key through per
// interval (burst < 1 means 1).
func New(interval time.Duration, burst int) *Throttle {
	if burst < 1 {
		burst = 1
	}
	return &Throttle{interval: interval, burst: burst, keys: map[string]*state{}}
}

// Log writes msg with args at level through l, unless key already had its
// burst in the current interval; then the message is counted, and the next
// one that goes out (or a summary at the end of the interval) carries the
// count as "suppressed".
func (t *Throttle) Log(l *slog.Logger, level slog.Level, key, msg string, args ...any) {
	if !l.Enabled(context.Background(), level) {
		return
	}
	now := time.Now()
	t.mu.Lock()
	s := t.keys[key]
	if s == nil {
		if len(t.keys) >= maxKeys {
			t.forgetIdle(now)
		}
		s = &state{windowStart: now}
		t.keys[key] = s
	}
	if now.Sub(s.windowStart) >= t.interval {
		s.windowStart, s.sent = now, 0
	}
	if s.sent >= t.burst {
		s.suppressed++
		s.l, s.level, s.msg, s.args = l, level, msg, args
		if s.flush == nil {
			wait := t.interval - now.Sub(s.windowStart)
			s.flush = time.AfterFunc(wait, func() {
				defer panics.Guard("log summary timer")
				t.flushKey(key, s)
			})
		}
		t.mu.Unlock()
		return
	}
	s.sent++
	n := s.suppressed
	s.suppressed = 0
	t.mu.Unlock()
	if n > 0 {
		args = append(args[:len(args):len(args)], "suppressed", n)
	}
	l.Log(context.Background(), level, msg, args...)
}

// flushKey writes the summary of messages held back for key, if no message
// went out since they were counted.
func (t *Throttle) flushKey(key string, s *state) {
	t.mu.Lock()
	s.flush = nil
	n := s.suppressed
	if n == 0 {
		t.mu.Unlock()
		return
	}
	s.suppressed = 0
	// The summary starts a new interval: it counts as that interval's first
	// message, so a steady stream yields one line per interval.
	s.windowStart, s.sent = time.Now(), 1
	l, level, msg, args := s.l, s.level, s.msg, s.args
	s.l, s.args = nil, nil
	t.mu.Unlock()
	args = append(args[:len(args):len(args)], "suppressed", n)
	l.Log(context.Background(), level, msg+" (repeated)", args...)
}

// Flush writes the summaries still held back now, instead of at the end of
// their intervals, and stops their timers. An owner calls it when it stops,
// so that its summaries come out before its "stopped" line and no timer
// logs for a component that is gone (or is lost when the process exits).
// Messages logged after Flush are throttled as before.
func (t *Throttle) Flush() {
	t.mu.Lock()
	var pending []*state
	var keys []string
	for k, s := range t.keys {
		if s.flush != nil {
			s.flush.Stop()
			pending, keys = append(pending, s), append(keys, k)
		}
	}
	t.mu.Unlock()
	for i, s := range pending {
		t.flushKey(keys[i], s)
	}
}

// forgetIdle drops keys with nothing pending. Caller holds t.mu.
func (t *Throttle) forgetIdle(now time.Time) {
	for k, s := range t.keys {
		if s.suppressed == 0 && now.Sub(s.windowStart) >= t.interval {
			delete(t.keys, k)
		}
	}
	if len(t.keys) < maxKeys {
		return
	}
	for k, s := range t.keys {
		if s.suppressed == 0 {
			delete(t.keys, k)
		}
	}
}
