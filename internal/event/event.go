// Package event holds the unit of data that moves through an agent.
package event

import "time"

// Event is a Flume event: string headers and an opaque body.
//
// Ownership: once an event has been handed to a Processor (a source) or put
// into a Channel, its Headers and Body bytes belong to the pipeline and
// must not be modified or reused by whoever produced them. Interceptors run
// before the put and may change an event in place.
type Event struct {
	Headers Headers
	Body    []byte

	// ReceivedAt is when this agent (or, with the opt-in header, the first
	// agent of a tier) received the event, in Unix nanoseconds; 0 if unknown.
	// It feeds the source and end-to-end latency histograms and is not a
	// header unless configured to be.
	ReceivedAt int64
	// CommittedAt is when the put that holds the event was committed into the
	// channel it was taken from, in Unix nanoseconds; channels set it. It feeds
	// the channel stage histogram.
	CommittedAt int64
}

// Now returns the current time in the unit Event timestamps use. Sources
// call it once per batch, not once per event.
func Now() int64 { return time.Now().UnixNano() }

// Header returns the value of header k, or "" when absent.
func (e *Event) Header(k string) string { return e.Headers.Value(k) }

// SetHeader sets header k.
func (e *Event) SetHeader(k, v string) { e.Headers.Set(k, v) }

// Size is the number of body bytes, which is what Flume's byte capacity
// accounting counts.
func (e *Event) Size() int { return len(e.Body) }
