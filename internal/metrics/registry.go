package metrics

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stage names a part of the path an event takes, for latency histograms.
type Stage string

const (
	// StageSource is from receipt to the commit of the put into every required channel.
	StageSource Stage = "source"
	// StageChannel is from the put commit to the take by a sink.
	StageChannel Stage = "channel"
	// StageSink is from the take to the downstream acknowledgement.
	StageSink Stage = "sink"
	// StageEndToEnd is from receipt to the downstream acknowledgement.
	StageEndToEnd Stage = "end_to_end"
)

// Registry holds the counter sets and latency histograms of one agent.
// Sets are added when components are built and removed when a reload drops
// them; histograms live as long as the registry.
type Registry struct {
	Agent string

	mu   sync.Mutex
	sets map[string]*Set // by Kind + "." + Name

	latency *prometheus.HistogramVec
	dropped *prometheus.CounterVec
}

// NewRegistry returns an empty registry for the agent named agent.
func NewRegistry(agent string) *Registry {
	return &Registry{
		Agent: agent,
		sets:  map[string]*Set{},
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "sluice_stage_latency_seconds",
			Help:        "Latency of each stage an event passes: source (receipt to put commit), channel (put commit to take), sink (take to downstream ack), end_to_end (receipt to downstream ack).",
			ConstLabels: prometheus.Labels{"agent": agent},
			// 10 µs to ~80 s: sub-millisecond paths and Flume-like seconds both resolve.
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 24),
		}, []string{"stage", "component"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "sluice_events_dropped_total",
			Help:        "Events dropped on purpose by configuration (filter interceptors, failed optional channels), by component and reason.",
			ConstLabels: prometheus.Labels{"agent": agent},
		}, []string{"component", "reason"}),
	}
}

// Dropped returns the counter of events component dropped for reason (such
// as "filtered" or "optional_channel_failed"). Every drop a user configured
// is counted here; nothing is dropped silently.
func (r *Registry) Dropped(component, reason string) prometheus.Counter {
	return r.dropped.WithLabelValues(component, reason)
}

// DroppedVec is the underlying counter vector, for exposition.
func (r *Registry) DroppedVec() *prometheus.CounterVec { return r.dropped }

// Add registers s, replacing a set of the same kind and name.
func (r *Registry) Add(s *Set) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets[string(s.Kind)+"."+s.Name] = s
}

// Remove drops the set of that kind and name.
func (r *Registry) Remove(kind Kind, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sets, string(kind)+"."+name)
}

// Sets returns the registered sets ordered by kind and name.
func (r *Registry) Sets() []*Set {
	r.mu.Lock()
	out := make([]*Set, 0, len(r.sets))
	for _, s := range r.sets {
		out = append(out, s)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Latency returns the histogram of stage for component. Callers look it up
// once, at construction, and observe on the hot path.
func (r *Registry) Latency(stage Stage, component string) Histogram {
	return Histogram{h: r.latency.WithLabelValues(string(stage), component)}
}

// LatencyVec is the underlying histogram vector, for exposition.
func (r *Registry) LatencyVec() *prometheus.HistogramVec { return r.latency }

// Histogram records latencies of one stage of one component. The zero value
// discards observations, so components built without a registry work.
type Histogram struct {
	h prometheus.Observer
}

// Since records the time from start (Unix nanoseconds, as in event.Event)
// to now (the same unit). A zero start is unknown and not recorded.
func (h Histogram) Since(start, now int64) {
	if h.h == nil || start == 0 {
		return
	}
	h.h.Observe(float64(now-start) / 1e9)
}

// Observe records d.
func (h Histogram) Observe(d time.Duration) {
	if h.h != nil {
		h.h.Observe(d.Seconds())
	}
}
