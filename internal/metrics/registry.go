package metrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redact"
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
// them; histograms live as long as the registry. Each Registry owns its
// Prometheus registry (never the global default one), so several agents and
// tests in one process do not collide.
type Registry struct {
	Agent string
	// Redact, when set (before the registry is served), masks secrets in
	// everything the registry shows: component names and attribute values
	// in Flume's JSON, label values in Prometheus (those of collectors that
	// components register too), and the reasons of Handler's /healthz.
	Redact *redact.Redactor

	mu    sync.Mutex
	sets  map[string]*Set  // by Kind + "." + Name
	own   map[string]*Set  // the agent's own sets (AddOwn), by Kind + "." + Name
	hists map[string]*hist // by stage + "\x00" + component
	order []*hist          // in creation order, for exposition

	dropped *prometheus.CounterVec
	exprErr *prometheus.CounterVec

	promOnce sync.Once
	prom     *prometheus.Registry
}

// NewRegistry returns an empty registry for the agent named agent. It is
// cheap: the Prometheus registry and its Go and process collectors are
// built on first use of Prometheus.
func NewRegistry(agent string) *Registry {
	return &Registry{
		Agent: agent,
		sets:  map[string]*Set{},
		own:   map[string]*Set{},
		hists: map[string]*hist{},
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "sluice_events_dropped_total",
			Help:        "Events dropped on purpose by configuration (filter interceptors, failed optional channels), by component and reason.",
			ConstLabels: prometheus.Labels{"agent": agent},
		}, []string{"component", "reason"}),
		exprErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "sluice_expression_errors_total",
			Help:        "Events on which an expression (transform interceptor, expression selector) failed, by component and rule (the key of the expression).",
			ConstLabels: prometheus.Labels{"agent": agent},
		}, []string{"component", "rule"}),
	}
}

// Dropped returns the counter of events component dropped for reason (such
// as "filtered" or "optional_channel_failed"). Every drop a user configured
// is counted here; nothing is dropped silently.
func (r *Registry) Dropped(component, reason string) prometheus.Counter {
	return r.dropped.WithLabelValues(component, reason)
}

// ExpressionErrors returns the counter of events on which the expression
// rule (such as "set.timestamp" or "when.c1") of component failed.
func (r *Registry) ExpressionErrors(component, rule string) prometheus.Counter {
	return r.exprErr.WithLabelValues(component, rule)
}

// Add registers s, replacing a set of the same kind and name.
func (r *Registry) Add(s *Set) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets[string(s.Kind)+"."+s.Name] = s
}

// AddOwn registers s, a set of the agent's own (the monitoring port's
// listener), shown in Prometheus only: Flume's JSON has components alone.
func (r *Registry) AddOwn(s *Set) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.own[string(s.Kind)+"."+s.Name] = s
}

// ownSets returns the sets AddOwn registered.
func (r *Registry) ownSets() []*Set {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Set, 0, len(r.own))
	for _, s := range r.own {
		out = append(out, s)
	}
	return out
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

// Latency returns the histogram of stage for component, creating it on
// first use. Callers look it up once, at construction, and observe on the
// hot path; the same stage and component always give the same histogram.
func (r *Registry) Latency(stage Stage, component string) Histogram {
	key := string(stage) + "\x00" + component
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.hists[key]
	if !ok {
		h = &hist{stage: stage, component: component}
		r.hists[key] = h
		r.order = append(r.order, h)
	}
	return Histogram{h: h}
}

// histograms returns the histograms ordered by stage and component.
func (r *Registry) histograms() []*hist {
	r.mu.Lock()
	out := append([]*hist(nil), r.order...)
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].stage != out[j].stage {
			return out[i].stage < out[j].stage
		}
		return out[i].component < out[j].component
	})
	return out
}

// LatencySnapshot summarises every latency histogram (count, mean, P50, P90,
// P99, P99.9, max), ordered by stage and component. Histograms that have
// seen no event are included with a zero Count.
func (r *Registry) LatencySnapshot() []StageLatency {
	hs := r.histograms()
	out := make([]StageLatency, len(hs))
	for i, h := range hs {
		out[i] = h.summary()
	}
	return out
}
