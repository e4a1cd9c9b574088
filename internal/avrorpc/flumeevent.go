package avrorpc

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/event"
)

// AppendFlumeEvent appends e as one binary AvroFlumeEvent record
// ({map<string> headers; bytes body}) with no container or schema around
// it, which is how Flume's Kafka sink (useFlumeEventFormat) and Kafka channel
// (parseAsFlumeEvent) write an event into a Kafka record's value.
func AppendFlumeEvent(dst []byte, e *event.Event) []byte { return appendEvent(dst, e) }

// DecodeFlumeEvent decodes one binary AvroFlumeEvent record that fills b
// exactly, as AppendFlumeEvent writes it. The returned headers and body
// alias b, which must not be modified afterwards. Decoded structure is
// bounded by a budget of twice len(b) plus a little, so hostile bytes cannot
// make it allocate much more than they weigh.
func DecodeFlumeEvent(b []byte) (event.Event, error) {
	d := decoder{buf: b, budget: 2*len(b) + 4096}
	var e event.Event
	if err := d.event(&e); err != nil {
		return event.Event{}, fmt.Errorf("avro flume event: %w", err)
	}
	if d.remaining() != 0 {
		return event.Event{}, malformed("avro flume event: %d bytes after the event", d.remaining())
	}
	return e, nil
}
