package metrics

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Prometheus names. Every Flume attribute of a set becomes one metric named
// sluice_<kind>_<attribute in snake case>, labelled agent, component (the
// component name) and type (the component type, such as "netcat"):
//
//   - counters drop Flume's "Count" suffix and end in _total:
//     SOURCE EventReceivedCount → sluice_source_event_received_total,
//     SINK EventWriteFail → sluice_sink_event_write_fail_total;
//     Kafka's millisecond "...Timer" counters end in _milliseconds_total:
//     KafkaCommitTimer → sluice_source_kafka_commit_milliseconds_total;
//   - gauges (values registered with Set.Gauge, and the counters that hold a
//     level rather than a count: OpenConnectionCount, Closed, Unhealthy) keep
//     their name: sluice_source_open_connection_count;
//   - a channel's "Channel" prefix is not repeated: ChannelSize →
//     sluice_channel_size, ChannelFillPercentage →
//     sluice_channel_fill_percentage;
//   - StartTime and StopTime become ..._start_time_seconds and
//     ..._stop_time_seconds gauges (Unix seconds; 0 when not stopped).
//
// Latencies are sluice_stage_latency_seconds{agent,stage,component}, a
// histogram whose bucket bounds are powers of two of nanoseconds (1.024 µs
// to 68.7 s); an observation exactly on a bound counts in the next bucket.
// Configured drops are sluice_events_dropped_total{agent,component,reason};
// failed expressions sluice_expression_errors_total{agent,component,rule}.

// levelCounters are Flume attributes kept as counters that hold a level, so
// Prometheus sees them as gauges.
var levelCounters = map[string]bool{
	"OpenConnectionCount": true,
	"Closed":              true,
	"Unhealthy":           true,
	"ChannelSize":         true,
	"ChannelCapacity":     true,
}

// promName returns the Prometheus name of attribute attr of a set of kind.
func promName(kind Kind, attr string, gauge bool) string {
	k := strings.ToLower(string(kind))
	if kind == KindChannel && len(attr) > len("Channel") && strings.HasPrefix(attr, "Channel") {
		attr = attr[len("Channel"):]
	}
	suffix := ""
	if !gauge {
		suffix = "_total"
		switch {
		case strings.HasSuffix(attr, "Count") && len(attr) > len("Count"):
			attr = strings.TrimSuffix(attr, "Count")
		case strings.HasSuffix(attr, "Timer") && len(attr) > len("Timer"):
			attr = strings.TrimSuffix(attr, "Timer")
			suffix = "_milliseconds_total"
		}
	}
	return "sluice_" + k + "_" + snake(attr) + suffix
}

// snake turns CamelCase into snake_case ("EventPutAttempt" →
// "event_put_attempt", "HTTPError" → "http_error"); characters Prometheus
// does not allow in a name become underscores.
func snake(s string) string {
	var b strings.Builder
	upper := func(c byte) bool { return 'A' <= c && c <= 'Z' }
	lower := func(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
	for i := 0; i < len(s); i++ {
		c := s[i]
		if upper(c) {
			if i > 0 && (lower(s[i-1]) || upper(s[i-1]) && i+1 < len(s) && lower(s[i+1])) {
				b.WriteByte('_')
			}
			b.WriteByte(c + 'a' - 'A')
			continue
		}
		if !lower(c) {
			c = '_'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// parseGauge reads a gauge's Flume string as a number.
func parseGauge(v string) (float64, bool) {
	switch v {
	case "true":
		return 1, true
	case "false":
		return 0, true
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil
}

// Prometheus returns the agent's Prometheus registry, created on first use
// with the agent's counter sets (read at every scrape, so sets added or
// removed by a reload appear and disappear), its latency histograms, its
// drop counters, and the Go runtime and process collectors. Components may
// register further collectors in it.
func (r *Registry) Prometheus() *prometheus.Registry {
	r.promOnce.Do(func() {
		pr := prometheus.NewRegistry()
		pr.MustRegister(
			collector{r},
			r.dropped,
			r.exprErr,
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
		r.prom = pr
	})
	return r.prom
}

// collector exposes the registry's sets and histograms. It is unchecked
// (Describe sends nothing) because the sets change with reloads.
type collector struct{ r *Registry }

func (collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	// A name's help and label names must agree across sets: the first
	// attribute to produce a name defines its Desc for this scrape.
	descs := map[string]*prometheus.Desc{}
	desc := func(name, help string) *prometheus.Desc {
		d, ok := descs[name]
		if !ok {
			d = prometheus.NewDesc(name, help, []string{"component", "type"}, prometheus.Labels{"agent": r.Agent})
			descs[name] = d
		}
		return d
	}
	for _, s := range append(r.Sets(), r.ownSets()...) {
		seen := map[string]bool{} // one sample per name and set
		emit := func(name, help string, vt prometheus.ValueType, v float64) {
			if seen[name] {
				return
			}
			seen[name] = true
			ch <- prometheus.MustNewConstMetric(desc(name, help), vt, v, s.Name, s.Type)
		}
		names, counters, gauges := s.snapshot()
		for i, n := range names {
			v := float64(counters[i].Load())
			if levelCounters[n] {
				emit(promName(s.Kind, n, true), "Flume "+string(s.Kind)+" attribute "+n+".", prometheus.GaugeValue, v)
				continue
			}
			emit(promName(s.Kind, n, false), "Flume "+string(s.Kind)+" counter "+n+".", prometheus.CounterValue, v)
		}
		for _, g := range gauges {
			if v, ok := parseGauge(g.fn()); ok {
				emit(promName(s.Kind, g.name, true), "Flume "+string(s.Kind)+" attribute "+g.name+".", prometheus.GaugeValue, v)
			}
		}
		k := "sluice_" + strings.ToLower(string(s.Kind))
		emit(k+"_start_time_seconds", "Unix time the component last started (Flume's StartTime).",
			prometheus.GaugeValue, float64(s.startTime.Load())/1e3)
		emit(k+"_stop_time_seconds", "Unix time the component last stopped, 0 while it runs (Flume's StopTime).",
			prometheus.GaugeValue, float64(s.stopTime.Load())/1e3)
	}

	hd := prometheus.NewDesc("sluice_stage_latency_seconds",
		"Latency of each stage an event passes: source (receipt to put commit), channel (put commit to take), sink (take to downstream ack), end_to_end (receipt to downstream ack).",
		[]string{"stage", "component"}, prometheus.Labels{"agent": r.Agent})
	var counts [numBuckets]uint64
	for _, h := range r.histograms() {
		count, sum := h.read(&counts)
		buckets := make(map[float64]uint64, len(promBounds))
		var cum uint64
		next := 0
		for _, b := range promBounds {
			for end := bucketOf(b); next < end; next++ {
				cum += counts[next]
			}
			buckets[float64(b)/1e9] = cum
		}
		ch <- prometheus.MustNewConstHistogram(hd, count, sum, buckets, string(h.stage), h.component)
	}
}
