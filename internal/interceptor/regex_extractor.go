package interceptor

import (
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// Flume's serializer class names for regex_extractor.
const (
	passThroughSerializer = "org.apache.flume.interceptor.RegexExtractorInterceptorPassThroughSerializer"
	millisSerializer      = "org.apache.flume.interceptor.RegexExtractorInterceptorMillisSerializer"
)

// RegexExtractor copies the groups of the first match of a pattern in the
// body into headers, as Flume's RegexExtractorInterceptor: group i goes to
// the header of the i-th serializer, as is or converted to epoch
// milliseconds. Groups without a serializer are ignored, and so are
// serializers without a group.
type RegexExtractor struct {
	re   *regexp.Regexp
	sers []extractSerializer
	log  *slog.Logger
}

type extractSerializer struct {
	header string
	millis *jodaTime // nil: pass the text through
}

// NewRegexExtractor builds a regex_extractor interceptor from regex
// (required), serializers (required, a space-separated list of names) and,
// for each name s, serializers.s.name (required: the header) and
// serializers.s.type (DEFAULT, or Flume's pass-through or millis serializer
// class; the millis serializer reads serializers.s.pattern, a Joda time
// pattern).
func NewRegexExtractor(env flow.Env, p *config.Props) (flow.Interceptor, error) {
	x := &RegexExtractor{re: neverMatch, log: env.Log()}
	if expr := requiredRaw(p, "regex", "a regular expression whose groups become headers"); expr != "" {
		x.re = compileRegex(p, "regex", expr)
	}
	names := strings.Fields(requiredRaw(p, "serializers", "a space-separated list of serializer names, one per group"))
	for i, name := range names {
		sp := p.Sub("serializers." + name + ".")
		s := extractSerializer{header: sp.String("name", "")}
		if s.header == "" {
			sp.Errorf("name", "missing required property; set %s to the header that receives group %d", sp.Full("name"), i+1)
		}
		switch typ := strings.TrimSpace(sp.String("type", "DEFAULT")); {
		case strings.EqualFold(typ, "DEFAULT"), typ == passThroughSerializer:
		case typ == millisSerializer:
			s.millis = newJodaTime(sp, "pattern")
		default:
			sp.Errorf("type", "%q is not a serializer sluice knows; use DEFAULT (the text as is) or %s (epoch milliseconds)", typ, millisSerializer)
		}
		x.sers = append(x.sers, s)
	}
	if n := x.re.NumSubexp(); x.re != neverMatch && n < len(x.sers) {
		x.log.Warn("regex_extractor has more serializers than the regex has groups; the extra serializers are never used",
			"groups", n, "serializers", len(x.sers))
	}
	return x, nil
}

// Intercept sets the headers of every event whose body matches. A group
// that took no part in the match sets no header (Flume would set a null
// value). A value the millis serializer cannot parse sets no header and is
// logged once per batch (Flume would fail the whole batch).
func (x *RegexExtractor) Intercept(events []event.Event) []event.Event {
	bad, firstBad := 0, ""
	var firstErr error
	for i := range events {
		e := &events[i]
		m := x.re.FindSubmatchIndex(e.Body)
		if m == nil {
			continue
		}
		for g := 1; g < len(m)/2 && g <= len(x.sers); g++ {
			a, b := m[2*g], m[2*g+1]
			if a < 0 {
				continue
			}
			s := &x.sers[g-1]
			if s.millis == nil {
				e.SetHeader(s.header, string(e.Body[a:b]))
				continue
			}
			v := string(e.Body[a:b])
			ms, err := s.millis.parse(v)
			if err != nil {
				if bad == 0 {
					firstBad, firstErr = v, err
				}
				bad++
				continue
			}
			e.SetHeader(s.header, strconv.FormatInt(ms, 10))
		}
	}
	if bad > 0 {
		x.log.Warn("regex_extractor could not parse extracted times; their headers were not set",
			"count", bad, "value", firstBad, "err", firstErr)
	}
	return events
}
