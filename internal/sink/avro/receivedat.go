package avrosink

import (
	"strconv"

	"github.com/sluicehq/sluice/internal/event"
)

// stamped builds the copies of a batch that carry the receivedAt header.
// The taken events are not changed (their header maps may be shared with
// the same event in another channel); the copies' maps are kept and reused
// from batch to batch, so steady state does not allocate.
type stamped struct {
	events []event.Event
	heads  []event.Headers
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
		for len(s.heads) <= i {
			s.heads = append(s.heads, nil)
		}
		m := append(s.heads[i][:0], e.Headers...)
		m.Set(h, strconv.FormatInt(e.ReceivedAt, 10))
		s.heads[i], e.Headers = m, m
		s.events = append(s.events, e)
	}
	return s.events
}
