package flow

import (
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
)

// PutStreakHold is how long a source's puts must succeed before its streak
// of refused puts ends: a channel at its capacity refuses and takes puts in
// turn, which is one streak in the log, not two lines a put.
const PutStreakHold = 5 * time.Second

// PutStreak is the failure streak of a source that keeps a batch its
// channels refused and puts it again (every source that puts through a
// Retry; the thrift source, whose sender retries): the
// first refusal at WARN, a summary every 30 s while they go on, and once
// puts have succeeded for PutStreakHold the summary then recovered. The
// source calls Fail for each refused put, Ok after each put, and Stop when
// it stops.
func PutStreak(log *slog.Logger, failed, recovered string) *logthrottle.Streak {
	return &logthrottle.Streak{Log: log, Level: slog.LevelWarn, Hold: PutStreakHold, Failed: failed, Recovered: recovered}
}
