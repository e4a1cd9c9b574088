// Package otlpconv maps OpenTelemetry log records (OTLP, as pdata's plog
// holds them) to Flume events and back, for the otlp source and sink. The
// mapping is written out in docs/components.md; in short:
//
//   - The body becomes the event body: a string as its bytes, bytes as they
//     are, any other value as JSON (a map as an object, an array as an
//     array, an int, double or bool as its JSON number or literal), with the
//     header otel.body_type naming the type when it is not a string.
//   - The record's attributes become headers of the same name; the
//     resource's attributes become headers of the same name behind a prefix
//     (resource. unless configured); the scope's behind otel.scope.attr. A
//     value that is not a string is written as text (an int in decimal, a
//     double as Go's shortest 'g' form, a bool as true or false, bytes as
//     they are, a map or array as JSON), and the header otel.types (a JSON
//     object) names the type of each such header, so that the sink can send
//     the attribute back with its type.
//   - timestamp is the record's time in epoch milliseconds (its observed
//     time when it has none), as Flume's sinks read it; the other fields of
//     a record have otel.* headers of their own.
//
// A record attribute whose name the mapping would read as one of its own
// headers (timestamp, a reserved otel.* name, a name behind the resource
// prefix) travels as otel.attr.NAME instead, so nothing is taken for what it
// is not; the sink undoes it. The sink reads the same names back: a header
// it does not know is a record attribute, so a Flume event's headers become
// the record's attributes and come back from an otlp source as the same
// headers.
package otlpconv

import "strings"

// Header names of the mapping.
const (
	// HeaderTimestamp is the record's time (else its observed time) in
	// epoch milliseconds: the header Flume's sinks (HDFS path escapes, the
	// timestamp interceptor) use.
	HeaderTimestamp = "timestamp"
	// HeaderTime is the record's time in epoch nanoseconds, written when
	// timestamp does not say all of it: when it is not a whole millisecond,
	// or when the record has an observed time too (so that a time equal to
	// the observed time is not taken for a missing one).
	HeaderTime = "otel.time_unix_nano"
	// HeaderObservedTime is the record's observed time in epoch nanoseconds.
	HeaderObservedTime   = "otel.observed_time_unix_nano"
	HeaderSeverityText   = "otel.severity_text"
	HeaderSeverityNumber = "otel.severity_number"
	HeaderTraceID        = "otel.trace_id" // 32 lower-case hex digits
	HeaderSpanID         = "otel.span_id"  // 16 lower-case hex digits
	HeaderTraceFlags     = "otel.trace_flags"
	HeaderEventName      = "otel.event_name"
	// HeaderDroppedAttributes is the record's dropped_attributes_count,
	// when not 0.
	HeaderDroppedAttributes = "otel.dropped_attributes_count"
	HeaderScopeName         = "otel.scope.name"
	HeaderScopeVersion      = "otel.scope.version"
	HeaderScopeSchemaURL    = "otel.scope.schema_url"
	// PrefixScopeAttribute starts the headers of the scope's attributes.
	PrefixScopeAttribute = "otel.scope.attr."
	// HeaderSchemaURL is the resource's schema URL.
	HeaderSchemaURL = "otel.schema_url"
	// HeaderBodyType names the body's type when it is not a string.
	HeaderBodyType = "otel.body_type"
	// HeaderTypes is a JSON object from header name to type, for the
	// attribute headers whose value is not a string.
	HeaderTypes = "otel.types"
	// PrefixEscaped starts a record attribute whose own name the mapping
	// reserves (such as an attribute named timestamp).
	PrefixEscaped = "otel.attr."

	// DefaultResourcePrefix starts the headers of resource attributes.
	DefaultResourcePrefix = "resource."
)

// Type names in HeaderTypes and HeaderBodyType.
const (
	TypeInt    = "int"
	TypeDouble = "double"
	TypeBool   = "bool"
	TypeBytes  = "bytes"
	TypeMap    = "map"
	TypeArray  = "array"
	TypeEmpty  = "empty" // no value at all
)

// reserved are the exact header names the mapping reads as record fields.
var reserved = map[string]bool{
	HeaderTimestamp: true, HeaderTime: true, HeaderObservedTime: true,
	HeaderSeverityText: true, HeaderSeverityNumber: true, HeaderTraceID: true,
	HeaderSpanID: true, HeaderTraceFlags: true, HeaderEventName: true,
	HeaderDroppedAttributes: true, HeaderSchemaURL: true, HeaderBodyType: true,
	HeaderTypes: true,
}

// Mapping is the configurable part of the mapping. Its zero value uses
// DefaultResourcePrefix.
type Mapping struct {
	// ResourcePrefix starts the header names of resource attributes. It
	// must not be empty (resource and record attributes would be one) nor
	// start with "otel." (the mapping's own names); see CheckPrefix.
	ResourcePrefix string
}

// CheckPrefix says what is wrong with p as a resource prefix, or "".
func CheckPrefix(p string) string {
	switch {
	case p == "":
		return "is empty, so resource attributes could not be told from the record's; use a prefix such as resource."
	case strings.HasPrefix(p, "otel."):
		return "starts with otel., which the mapping's own headers use; use another prefix, such as resource."
	}
	return ""
}

func (m Mapping) prefix() string {
	if m.ResourcePrefix == "" {
		return DefaultResourcePrefix
	}
	return m.ResourcePrefix
}

// escapes reports whether a record attribute named name must travel as
// PrefixEscaped+name: the sink would read the plain name as something else.
func (m Mapping) escapes(name string) bool {
	if reserved[name] || strings.HasPrefix(name, m.prefix()) {
		return true
	}
	if !strings.HasPrefix(name, "otel.") {
		return false
	}
	return strings.HasPrefix(name, "otel.scope.") || strings.HasPrefix(name, PrefixEscaped)
}
