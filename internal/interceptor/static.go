package interceptor

import (
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// Static sets one fixed header on every event, as Flume's StaticInterceptor.
type Static struct {
	key, value string
	preserve   bool
}

// NewStatic builds a static interceptor from key (key), value (value) and
// preserveExisting (true).
func NewStatic(_ flow.Env, p *config.Props) (flow.Interceptor, error) {
	return &Static{
		key:      p.String("key", "key"),
		value:    p.String("value", "value"),
		preserve: p.Bool("preserveExisting", true),
	}, nil
}

// Intercept sets the header on every event, keeping an existing value when
// preserveExisting is set.
func (s *Static) Intercept(events []event.Event) []event.Event {
	setHeader(events, s.key, s.value, s.preserve)
	return events
}
