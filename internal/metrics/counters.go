// Package metrics holds the agent's counters and latency histograms and
// exposes them as Flume's JSON and in Prometheus text format.
package metrics

import (
	"bytes"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is the Flume component kind that prefixes a component's JSON key.
type Kind string

const (
	KindSource  Kind = "SOURCE"
	KindChannel Kind = "CHANNEL"
	KindSink    Kind = "SINK"
	// KindMonitoring is the agent's monitoring port (Prometheus only).
	KindMonitoring Kind = "MONITORING"
)

// Set is the named counters and gauges of one component, in the order they
// were registered. Counters are atomics that components update on their hot
// path; exposition reads them without locks.
type Set struct {
	Kind Kind
	Name string // component name, such as "r1"
	Type string // component type, such as "netcat"

	mu       sync.Mutex
	names    []string
	counters []*atomic.Int64
	gauges   []gauge

	startTime atomic.Int64 // Unix ms
	stopTime  atomic.Int64
}

type gauge struct {
	name string
	fn   func() string
}

// NewSet returns an empty Set.
func NewSet(kind Kind, name, typ string) *Set {
	return &Set{Kind: kind, Name: name, Type: typ}
}

// Counter registers (or returns the already registered) counter name.
func (s *Set) Counter(name string) *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, n := range s.names {
		if n == name {
			return s.counters[i]
		}
	}
	c := new(atomic.Int64)
	s.names = append(s.names, name)
	s.counters = append(s.counters, c)
	return c
}

// Gauge registers a value computed when metrics are read, formatted as Flume
// prints it (see FormatFloat for doubles).
// Registering a name again replaces the earlier function. Prometheus
// exposition parses the string as a number ("true"/"false" as 1/0) and skips
// values that are neither.
func (s *Set) Gauge(name string, fn func() string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.gauges {
		if s.gauges[i].name == name {
			s.gauges[i].fn = fn
			return
		}
	}
	s.gauges = append(s.gauges, gauge{name, fn})
}

// Started records the start time and resets every counter, as Flume does on start().
func (s *Set) Started() {
	s.mu.Lock()
	for _, c := range s.counters {
		c.Store(0)
	}
	s.mu.Unlock()
	s.startTime.Store(time.Now().UnixMilli())
	s.stopTime.Store(0)
}

// Stopped records the stop time.
func (s *Set) Stopped() { s.stopTime.Store(time.Now().UnixMilli()) }

// Each calls fn for every attribute of the set as Flume shows it, counters
// and gauges as strings, StartTime and StopTime included; Type is not.
func (s *Set) Each(fn func(name, value string)) {
	names, counters, gauges := s.snapshot()
	for i, n := range names {
		fn(n, strconv.FormatInt(counters[i].Load(), 10))
	}
	for _, g := range gauges {
		fn(g.name, g.fn())
	}
	fn("StartTime", strconv.FormatInt(s.startTime.Load(), 10))
	fn("StopTime", strconv.FormatInt(s.stopTime.Load(), 10))
}

// snapshot copies the registered names, counters and gauges, so readers call
// gauge functions without holding s.mu.
func (s *Set) snapshot() ([]string, []*atomic.Int64, []gauge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...),
		append([]*atomic.Int64(nil), s.counters...),
		append([]gauge(nil), s.gauges...)
}

// SourceCounters are Flume's SourceCounter attributes.
type SourceCounters struct {
	*Set
	EventReceived, EventAccepted             *atomic.Int64
	AppendReceived, AppendAccepted           *atomic.Int64
	AppendBatchReceived, AppendBatchAccepted *atomic.Int64
	OpenConnection                           *atomic.Int64
	EventReadFail, ChannelWriteFail          *atomic.Int64
	GenericProcessingFail                    *atomic.Int64
}

// NewSourceCounters registers Flume's source counters in a new Set.
func NewSourceCounters(name, typ string) *SourceCounters {
	s := NewSet(KindSource, name, typ)
	return &SourceCounters{
		Set:                   s,
		EventReceived:         s.Counter("EventReceivedCount"),
		EventAccepted:         s.Counter("EventAcceptedCount"),
		AppendReceived:        s.Counter("AppendReceivedCount"),
		AppendAccepted:        s.Counter("AppendAcceptedCount"),
		AppendBatchReceived:   s.Counter("AppendBatchReceivedCount"),
		AppendBatchAccepted:   s.Counter("AppendBatchAcceptedCount"),
		OpenConnection:        s.Counter("OpenConnectionCount"),
		EventReadFail:         s.Counter("EventReadFail"),
		ChannelWriteFail:      s.Counter("ChannelWriteFail"),
		GenericProcessingFail: s.Counter("GenericProcessingFail"),
	}
}

// ChannelCounters are Flume's ChannelCounter attributes. ChannelSize,
// ChannelCapacity and ChannelFillPercentage are gauges registered with
// SetSize.
type ChannelCounters struct {
	*Set
	EventPutAttempt, EventPutSuccess   *atomic.Int64
	EventTakeAttempt, EventTakeSuccess *atomic.Int64
}

// NewChannelCounters registers Flume's channel counters in a new Set.
func NewChannelCounters(name, typ string) *ChannelCounters {
	s := NewSet(KindChannel, name, typ)
	return &ChannelCounters{
		Set:              s,
		EventPutAttempt:  s.Counter("EventPutAttemptCount"),
		EventPutSuccess:  s.Counter("EventPutSuccessCount"),
		EventTakeAttempt: s.Counter("EventTakeAttemptCount"),
		EventTakeSuccess: s.Counter("EventTakeSuccessCount"),
	}
}

// SetSize registers the ChannelSize, ChannelCapacity and
// ChannelFillPercentage gauges, read from size and capacity.
func (c *ChannelCounters) SetSize(size func() int64, capacity func() int64) {
	c.Gauge("ChannelSize", func() string { return strconv.FormatInt(size(), 10) })
	c.Gauge("ChannelCapacity", func() string { return strconv.FormatInt(capacity(), 10) })
	c.Gauge("ChannelFillPercentage", func() string {
		return FormatFloat(fillPercentage(size(), capacity()))
	})
}

// SinkCounters are Flume's SinkCounter attributes.
type SinkCounters struct {
	*Set
	ConnectionCreated, ConnectionClosed, ConnectionFailed *atomic.Int64
	BatchEmpty, BatchUnderflow, BatchComplete             *atomic.Int64
	EventDrainAttempt, EventDrainSuccess                  *atomic.Int64
	EventWriteFail, ChannelReadFail                       *atomic.Int64
}

// NewSinkCounters registers Flume's sink counters in a new Set.
func NewSinkCounters(name, typ string) *SinkCounters {
	s := NewSet(KindSink, name, typ)
	return &SinkCounters{
		Set:               s,
		ConnectionCreated: s.Counter("ConnectionCreatedCount"),
		ConnectionClosed:  s.Counter("ConnectionClosedCount"),
		ConnectionFailed:  s.Counter("ConnectionFailedCount"),
		BatchEmpty:        s.Counter("BatchEmptyCount"),
		BatchUnderflow:    s.Counter("BatchUnderflowCount"),
		BatchComplete:     s.Counter("BatchCompleteCount"),
		EventDrainAttempt: s.Counter("EventDrainAttemptCount"),
		EventDrainSuccess: s.Counter("EventDrainSuccessCount"),
		EventWriteFail:    s.Counter("EventWriteFail"),
		ChannelReadFail:   s.Counter("ChannelReadFail"),
	}
}

// fillPercentage is Flume's ChannelCounter.getChannelFillPercentage:
// size/capacity*100 in doubles, or Double.MAX_VALUE when the capacity is 0
// (always so for the Kafka channel).
func fillPercentage(size, capacity int64) float64 {
	if capacity == 0 {
		return math.MaxFloat64
	}
	return float64(size) / float64(capacity) * 100
}

// FormatFloat prints f as Java's Double.toString does, which is how Flume
// shows doubles such as ChannelFillPercentage: plain decimal with at least
// one fractional digit when 1e-3 <= |f| < 1e7 ("0.0", "12.5", "100.0"),
// otherwise computerized scientific notation ("1.0E-5", "1.0E7",
// "1.7976931348623157E308"), and "NaN", "Infinity", "-Infinity".
//
// The digits are the shortest that identify f, as Java prints them since
// JDK 19. Older JDKs print a longer string for a few values (4.9E-324 for
// the smallest subnormal, 9.999999999999999E22 for 1e23, 17-digit mantissas
// for some values above 1e16); for every fill percentage (0 to 100) we
// compared, JDK 17 and FormatFloat agree.
func FormatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	// Shortest digits and the decimal exponent: "d.ddde±x".
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	var out []byte
	if e[0] == '-' {
		out = append(out, '-')
		e = e[1:]
	}
	ePos := bytes.IndexByte(e, 'e')
	exp, _ := strconv.Atoi(string(e[ePos+1:]))
	digits := make([]byte, 0, ePos)
	for _, c := range e[:ePos] {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	if a := math.Abs(f); a >= 1e-3 && a < 1e7 {
		switch {
		case exp < 0: // 0.00ddd
			out = append(out, "0."...)
			for i := exp + 1; i < 0; i++ {
				out = append(out, '0')
			}
			out = append(out, digits...)
		case len(digits) <= exp+1: // ddd00.0
			out = append(out, digits...)
			for i := len(digits); i < exp+1; i++ {
				out = append(out, '0')
			}
			out = append(out, ".0"...)
		default: // dd.ddd
			out = append(out, digits[:exp+1]...)
			out = append(out, '.')
			out = append(out, digits[exp+1:]...)
		}
		return string(out)
	}
	out = append(out, digits[0], '.')
	if len(digits) > 1 {
		out = append(out, digits[1:]...)
	} else {
		out = append(out, '0')
	}
	out = append(out, 'E')
	out = strconv.AppendInt(out, int64(exp), 10)
	return string(out)
}
