package interceptor

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// RegexFilter keeps or drops events by whether their body contains a match
// of a pattern, as Flume's RegexFilteringInterceptor. Dropped events are
// counted in the registry's dropped counter with reason "filtered".
type RegexFilter struct {
	re      *regexp.Regexp
	exclude bool
	dropped prometheus.Counter
}

// NewRegexFilter builds a regex_filter interceptor from regex (.*) and
// excludeEvents (false: keep the events that match; true: drop them).
func NewRegexFilter(env flow.Env, p *config.Props) (flow.Interceptor, error) {
	return &RegexFilter{
		re:      compileRegex(p, "regex", p.String("regex", ".*")),
		exclude: p.Bool("excludeEvents", false),
		dropped: env.Registry().Dropped(env.Name, "filtered"),
	}, nil
}

// Intercept moves the events to keep to the front of events, in order, and
// returns them; the slots after them are zeroed so dropped bodies can be
// collected. The body is matched as UTF-8 text (Flume decodes it with the
// platform charset, UTF-8 on most systems).
func (f *RegexFilter) Intercept(events []event.Event) []event.Event {
	kept := events[:0]
	for i := range events {
		if f.re.Match(events[i].Body) != f.exclude {
			kept = append(kept, events[i])
		}
	}
	if n := len(events) - len(kept); n > 0 {
		clear(events[len(kept):])
		f.dropped.Add(float64(n))
	}
	return kept
}
