package interceptor

import (
	"regexp"
	"slices"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// RemoveHeader deletes headers by name, by list, or by a pattern their
// name must match in full, as Flume's RemoveHeaderInterceptor.
type RemoveHeader struct {
	withName string
	hasName  bool
	fromList map[string]struct{}
	matching *regexp.Regexp // anchored at both ends; nil when unset
}

// NewRemoveHeader builds a remove_header interceptor from withName,
// fromList (split on fromListSeparator, default \s*,\s*) and matching (a
// pattern the whole header name must match). With none set it removes
// nothing.
func NewRemoveHeader(_ flow.Env, p *config.Props) (flow.Interceptor, error) {
	r := &RemoveHeader{}
	if p.Has("withName") {
		r.withName, r.hasName = p.String("withName", ""), true
	}
	sep := compileRegex(p, "fromListSeparator", p.String("fromListSeparator", `\s*,\s*`))
	if p.Has("fromList") {
		r.fromList = map[string]struct{}{}
		for _, name := range javaSplit(sep, p.String("fromList", "")) {
			r.fromList[name] = struct{}{}
		}
	}
	if p.Has("matching") {
		expr := p.String("matching", "")
		if re := compileRegex(p, "matching", expr); re != neverMatch {
			// Flume uses Matcher.matches(): the whole name must match.
			r.matching = regexp.MustCompile(`\A(?:` + expr + `)\z`)
		} else {
			r.matching = neverMatch
		}
	}
	return r, nil
}

// javaSplit splits s around matches of sep as Java's String.split does:
// trailing empty strings are dropped.
func javaSplit(sep *regexp.Regexp, s string) []string {
	parts := sep.Split(s, -1)
	for len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// Intercept removes the configured headers from every event.
func (r *RemoveHeader) Intercept(events []event.Event) []event.Event {
	for i := range events {
		h := &events[i].Headers
		if len(*h) == 0 {
			continue
		}
		if r.hasName {
			h.Delete(r.withName)
		}
		if r.fromList == nil && r.matching == nil {
			continue
		}
		*h = slices.DeleteFunc(*h, func(kv event.Header) bool {
			if _, ok := r.fromList[kv.Key]; ok {
				return true
			}
			return r.matching != nil && r.matching.MatchString(kv.Key)
		})
	}
	return events
}
