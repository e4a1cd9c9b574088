package interceptor

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/timelayout"
)

// jodaTime parses times written in a Joda-Time (or SimpleDateFormat)
// pattern, translated once by timelayout. Flume's millis serializer uses
// Joda's DateTimeFormat.forPattern with the JVM's default time zone; here
// that is the process's local zone.
type jodaTime struct {
	l   *timelayout.Layout
	loc *time.Location
}

// fallbackLayout stands in for a pattern that did not translate, so that an
// interceptor built from a configuration with problems is still safe to
// call.
var fallbackLayout, _ = timelayout.New("RFC3339")

// newJodaTime reads the Joda pattern at key (required) and records a problem
// when it is missing or cannot be translated.
func newJodaTime(p *config.Props, key string) *jodaTime {
	pattern := requiredRaw(p, key, "a Joda time pattern such as yyyy-MM-dd HH:mm:ss")
	if pattern == "" {
		return &jodaTime{l: fallbackLayout, loc: time.Local}
	}
	l, err := timelayout.Joda(pattern)
	if err != nil {
		p.Errorf(key, "%q: %v", pattern, err)
		return &jodaTime{l: fallbackLayout, loc: time.Local}
	}
	return &jodaTime{l: l, loc: time.Local}
}

// parse returns the epoch milliseconds of v.
func (j *jodaTime) parse(v string) (int64, error) {
	t, err := j.l.Parse(v, j.loc)
	if err != nil {
		return 0, fmt.Errorf("parse %q with pattern %q: %w", v, j.l, err)
	}
	return t.UnixMilli(), nil
}
