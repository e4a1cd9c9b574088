// Package status shows a running agent to people: the status page served
// at / of the monitoring address (the configured graph with live rates,
// channel fills, stage latencies and health), the JSON it polls (which
// `sluice top` reads too), each node's recent history, and the tap stream
// behind `sluice tap`.
//
// A Sampler reads the agent's Flume counters and latency histograms once a
// second and keeps what the page needs: rates over the last second, latency
// percentiles over the last minute (from the differences of the histograms'
// bucket counts, so old observations do not weigh on them) and a ring of
// points for the last minutes. Its memory is bounded by the number of
// components and histograms, not by time or traffic.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary: no
// CDN, no build step; edit the files in web/ and rebuild.
package status

import (
	"github.com/sluicehq/sluice/internal/metrics"
)

// Agent is what the status page reads from a running agent.
type Agent interface {
	// Graph describes the configuration running now.
	Graph() Graph
	// Status is the agent's health now, as /healthz tells it.
	Status() metrics.Status
}

// Graph is an agent's configuration as the page draws it: sources (with
// their interceptors and selector) feed channels; sinks take from channels,
// alone or in sink groups.
type Graph struct {
	Sources    []SourceSpec
	Channels   []ChannelSpec
	SinkGroups []GroupSpec
	Sinks      []SinkSpec
}

// Named is a named, typed part of a component (an interceptor).
type Named struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// SourceSpec is one configured source.
type SourceSpec struct {
	Name, Type   string
	Interceptors []Named
	Selector     SelectorSpec
	Channels     []string
	// Generator is set for a source that makes its events itself (seq,
	// stress): nothing comes in, so it has no input rate.
	Generator bool
}

// SelectorSpec is a source's channel selector.
type SelectorSpec struct {
	Type   string // replicating or multiplexing
	Header string // multiplexing: the header whose value picks channels
	// Routes says, for each channel of the source, when it gets events
	// ("all", "optional", "default", "web, api" for header values); a
	// channel missing from it gets them always.
	Routes map[string]string
	// Optional lists the channels whose failures do not fail the put.
	Optional []string
}

// ChannelSpec is one configured channel.
type ChannelSpec struct {
	Name, Type string
	// Bytes, when set, reports the body bytes the channel holds and its byte
	// capacity (0 when unlimited).
	Bytes func() (held, capacity int64)
}

// GroupSpec is one sink group.
type GroupSpec struct {
	Name      string
	Processor string // default, failover or load_balance
	Sinks     []string
}

// SinkSpec is one configured sink.
type SinkSpec struct {
	Name, Type string
	Channel    string
	Group      string // its sink group, or ""
}

// Snapshot is what /api/status serves: the graph with live numbers.
type Snapshot struct {
	Agent    string   `json:"agent"`
	State    string   `json:"state"`
	Healthy  bool     `json:"healthy"`
	Problems []string `json:"problems"`
	// Notes say what busy components do, as /healthz's last lines: a
	// drain, with the events left.
	Notes    []string `json:"notes"`
	Time     int64    `json:"time"`     // Unix milliseconds of the last sample
	Interval float64  `json:"interval"` // seconds between samples: rates are over one
	Window   float64  `json:"window"`   // seconds of the latency window
	Tap      bool     `json:"tap"`      // whether this agent serves taps (--allow-tap)
	Nodes    []Node   `json:"nodes"`
	Edges    []Edge   `json:"edges"`
}

// Node is one box of the graph.
type Node struct {
	ID   string `json:"id"`   // kind/name, unique
	Kind string `json:"kind"` // source, selector, channel, group or sink
	Name string `json:"name"`
	Type string `json:"type"`
	// State is running, starting, failed, draining or stopping (sources,
	// channels, sinks); Reason says why a component cannot work, Note what
	// a draining one does and Left the events it has left, as /healthz
	// does.
	State        string  `json:"state,omitempty"`
	Reason       string  `json:"reason,omitempty"`
	Note         string  `json:"note,omitempty"`
	Left         *int64  `json:"left,omitempty"`
	Interceptors []Named `json:"interceptors,omitempty"`
	Detail       string  `json:"detail,omitempty"` // a selector's header, a group's processor
	// In and Out are events a second over the last sample interval: events
	// received and accepted by a source, put and taken by a channel, taken
	// and delivered by a sink (for a group, summed over its sinks). A
	// generator source (Generator set) has no In: what it puts out is Out.
	In        *float64 `json:"in,omitempty"`
	Out       *float64 `json:"out,omitempty"`
	Generator bool     `json:"generator,omitempty"`
	// Errors is the total of the component's failure counters; ErrorRate
	// their growth a second.
	Errors    int64             `json:"errors"`
	ErrorRate float64           `json:"errorRate"`
	Fill      *Fill             `json:"fill,omitempty"`
	Latency   []Latency         `json:"latency,omitempty"`
	Counters  map[string]string `json:"counters,omitempty"` // Flume's attributes, as /metrics shows them
}

// Fill is how full a channel is.
type Fill struct {
	Events   int64   `json:"events"`
	Capacity int64   `json:"capacity"` // 0 when unbounded or unknown (Kafka)
	Percent  float64 `json:"percent"`
	// Bytes and ByteCapacity are body bytes, for channels that count them
	// (memory); ByteCapacity 0 means unlimited.
	Bytes        *int64 `json:"bytes,omitempty"`
	ByteCapacity *int64 `json:"byteCapacity,omitempty"`
}

// Latency is one stage's latency over the window, in nanoseconds.
type Latency struct {
	Stage string `json:"stage"` // source, channel, sink or end_to_end
	Count uint64 `json:"count"` // events observed in the window
	P50   int64  `json:"p50"`
	P99   int64  `json:"p99"`
}

// Edge is an arrow of the graph.
type Edge struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Label    string `json:"label,omitempty"`
	Optional bool   `json:"optional,omitempty"`
}

// History is what /api/history serves for one node: its points of the last
// minutes, oldest first.
type History struct {
	ID     string   `json:"id"`
	Step   float64  `json:"step"` // seconds between points
	Stages []string `json:"stages"`
	Points []Point  `json:"points"`
}

// Point is one step of a node's history: rates averaged over the step,
// the channel's size at its end and each stage's percentiles over the
// step (in the order of History.Stages), in nanoseconds.
type Point struct {
	Time int64   `json:"t"` // Unix milliseconds
	In   float64 `json:"in"`
	Out  float64 `json:"out"`
	Size int64   `json:"size"`
	P50  []int64 `json:"p50"`
	P99  []int64 `json:"p99"`
}
