package avrosink

import (
	"maps"
	"strconv"

	"github.com/sluicehq/sluice/internal/event"
)

// stamped builds the copies of a batch that carry the receivedAt header.
// The taken events are not changed (their header maps may be shared with
// the same event in another channel); the copies' maps are kept and reused
// from batch to batch, so steady state does not allocate.
type stamped struct {
	events []event.Event
	maps   []map[string]string
}

// with returns events with header h set to each event's ReceivedAt (Unix
// nanoseconds); an event whose receive time is unknown (0) is sent as it
// is. The result is valid until the next call.
func (s *stamped) with(events []event.Event, h string) []event.Event {
	s.events = s.events[:0]
	for i, e := range events {
		if e.ReceivedAt == 0 {
			s.events = append(s.events, e)
			continue
		}
		for len(s.maps) <= i {
			s.maps = append(s.maps, make(map[string]string, len(e.Headers)+1))
		}
		m := s.maps[i]
		clear(m)
		maps.Copy(m, e.Headers)
		m[h] = strconv.FormatInt(e.ReceivedAt, 10)
		e.Headers = m
		s.events = append(s.events, e)
	}
	return s.events
}
