package interceptor

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// Timestamp sets a header (timestamp) to the time of interception in epoch
// milliseconds, as Flume's TimestampInterceptor does. Flume reads the clock
// for every event; Timestamp reads it once per batch, which gives the events
// of one batch the same value and costs one string per batch, not per event.
type Timestamp struct {
	header   string
	preserve bool
	now      func() time.Time
}

// NewTimestamp builds a timestamp interceptor from headerName (timestamp) and
// preserveExisting (false).
func NewTimestamp(_ flow.Env, p *config.Props) (flow.Interceptor, error) {
	return &Timestamp{
		header:   p.String("headerName", "timestamp"),
		preserve: p.Bool("preserveExisting", false),
		now:      time.Now,
	}, nil
}

// Intercept sets the header on every event, keeping an existing value when
// preserveExisting is set.
func (t *Timestamp) Intercept(events []event.Event) []event.Event {
	if len(events) == 0 {
		return events
	}
	ms := strconv.FormatInt(t.now().UnixMilli(), 10)
	setHeader(events, t.header, ms, t.preserve)
	return events
}

// setHeader sets k to v on every event, skipping events that already have k
// when preserve is set.
func setHeader(events []event.Event, k, v string, preserve bool) {
	for i := range events {
		e := &events[i]
		if preserve {
			if _, ok := e.Headers.Get(k); ok {
				continue
			}
		}
		e.SetHeader(k, v)
	}
}
