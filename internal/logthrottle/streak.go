package logthrottle

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultStreakEvery is how often a failure streak is summarised while it
// lasts, when Streak.Every is not set.
const DefaultStreakEvery = 30 * time.Second

// Streak tells one run of failures of one thing (a sink's downstream, a
// disk, a broker connection) the same way for every component:
//
//   - the first failure of a streak is logged at once, with its error;
//   - while the streak lasts, a failure at least Every after the last line
//     is logged as a summary (Failed + " (repeated)") with the last error,
//     how many failures the streak has had and for how long it has failed;
//     the others are only counted;
//   - when the streak ends (Ok), the summary of the failures not yet told
//     comes first, then one line Recovered at INFO with recovered_after
//     (how long the streak lasted) and failures (how many attempts failed).
//
// Nothing is written on a timer: no summary can come out after the
// recovery, quoting an error that is over. Stop writes the summary still
// held back when the owner stops while failing.
//
// Set the exported fields before the first call; a Streak is safe for
// concurrent use after that.
type Streak struct {
	Log       *slog.Logger // nil: slog.Default()
	Level     slog.Level   // of the failure lines; the zero value is INFO, so set it (usually slog.LevelWarn)
	Failed    string       // message of a failure line, such as "avro sink: delivery failed; the events stay in the channel"
	Recovered string       // message of the recovery line, such as "avro sink: delivering again"
	Every     time.Duration
	// Hold makes a streak end only once Ok has been called for Hold
	// without a failure in between (the owner calls Ok on every good
	// reading): a state that flaps, such as free space hovering at a limit,
	// is one streak, not two lines per flap. 0: the first Ok ends it.
	Hold time.Duration
	Now  func() time.Time // the clock; nil: time.Now (tests set a fake one)

	mu       sync.Mutex
	since    time.Time // first failure of the streak; zero when not failing
	failures int       // failures in the streak
	held     int       // failures counted since the last line
	lastLine time.Time
	okSince  time.Time // first Ok since the last failure, while Hold runs
	err      error     // the last failure's error and attributes, for the summary
	args     []any
}

// reportedError marks an error whose failure a Streak has logged (or
// counted in a summary), so that callers up the stack do not log it again.
type reportedError struct{ err error }

func (r *reportedError) Error() string { return r.err.Error() }
func (r *reportedError) Unwrap() error { return r.err }

// Reported reports whether err, or an error it wraps, came from
// Streak.Fail: its component has told it in its own failure streak.
func Reported(err error) bool {
	var r *reportedError
	return errors.As(err, &r)
}

// AsReported marks err as told by a streak without counting a failure:
// an error that follows from one the streak has told (a call refused at
// once while a backoff after that failure lasts).
func AsReported(err error) error {
	if err == nil || Reported(err) {
		return err
	}
	return &reportedError{err}
}

func (s *Streak) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Streak) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Streak) every() time.Duration {
	if s.Every > 0 {
		return s.Every
	}
	return DefaultStreakEvery
}

// Fail records one failed attempt with its error (nil for a failure its
// attributes tell) and the attributes of the failure line (key-value pairs,
// as slog takes them), logs it as the rule above says, and returns err
// marked as reported (see Reported).
func (s *Streak) Fail(err error, args ...any) error {
	s.mu.Lock()
	defer s.mu.Unlock() // lines go out under the lock, so they keep their order
	now := s.now()
	s.failures++
	s.err, s.args, s.okSince = err, args, time.Time{}
	l := s.logger()
	switch {
	case s.since.IsZero():
		s.since, s.lastLine, s.held = now, now, 0
		l.Log(context.Background(), s.Level, s.Failed, withErr(args, err)...)
	case now.Sub(s.lastLine) >= s.every():
		s.held++
		s.summaryLocked(now)
	default:
		s.held++
	}
	return AsReported(err)
}

// summaryLocked writes the summary of the failures held back, if any.
func (s *Streak) summaryLocked(now time.Time) {
	if s.held == 0 {
		return
	}
	args := append(withErr(s.args, s.err), "failures", s.failures, "failing_for", Round(now.Sub(s.since)))
	s.logger().Log(context.Background(), s.Level, s.Failed+" (repeated)", args...)
	s.held, s.lastLine = 0, now
}

// withErr is args and err, in a new slice; a nil err (a failure told by
// its attributes alone, such as free space under a limit) adds nothing.
func withErr(args []any, err error) []any {
	args = args[:len(args):len(args)]
	if err == nil {
		return args
	}
	return append(args, "err", err)
}

// Ok ends the streak, if there is one (with Hold, once successes have
// lasted that long): the summary of the failures not yet told, then the
// Recovered line with args, recovered_after (from the first failure to the
// success that ended the streak) and failures. Without a streak it does
// nothing, so a component calls it after every success.
func (s *Streak) Ok(args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return
	}
	now := s.now()
	if s.okSince.IsZero() {
		s.okSince = now
	}
	if now.Sub(s.okSince) < s.Hold {
		return
	}
	s.summaryLocked(s.okSince) // failing_for: up to the success, as recovered_after
	args = append(args[:len(args):len(args)], "recovered_after", Round(s.okSince.Sub(s.since)), "failures", s.failures)
	s.logger().Log(context.Background(), slog.LevelInfo, s.Recovered, args...)
	s.since, s.okSince, s.failures, s.held, s.err, s.args = time.Time{}, time.Time{}, 0, 0, nil, nil
}

// Stop writes the summary of the failures still held back, for an owner
// that stops while failing; the streak goes on if the owner starts again.
func (s *Streak) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.since.IsZero() {
		s.summaryLocked(s.now())
	}
}

// Failing reports whether a streak is under way.
func (s *Streak) Failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.since.IsZero()
}

// Failures is the number of failures in the streak under way (0 when
// none is).
func (s *Streak) Failures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// Round is d as the streak lines show it: a duration string to the
// millisecond under a second, to a tenth of a second under a minute, to
// the second above (slog's JSON handler would print a time.Duration as
// nanoseconds).
func Round(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
