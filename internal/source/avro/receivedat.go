package avrosource

import (
	"strconv"

	"github.com/sluicehq/sluice/internal/event"
)

// receivedAt sets each event's receive time from the receivedAtHeader an
// upstream sluice avro sink added (Unix nanoseconds), so this agent's
// source and end_to_end latencies count from the first tier's receipt. An
// event without the header, or with a value that is not a positive number,
// keeps the time this source received it. The header stays on the event,
// so a further tier can read it too. Tiers on different hosts need
// synchronised clocks for the figure to mean anything.
func (s *Source) receivedAt(events []event.Event) {
	h := s.receivedAtHeader
	if h == "" {
		return
	}
	for i := range events {
		v, ok := events[i].Headers.Get(h)
		if !ok {
			continue
		}
		if t, err := strconv.ParseInt(v, 10, 64); err == nil && t > 0 {
			events[i].ReceivedAt = t
		}
	}
}
