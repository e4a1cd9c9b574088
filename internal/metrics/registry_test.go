package metrics

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// testRegistry registers a started source, channel and sink with some
// counts, as an agent would.
func testRegistry(t *testing.T) (*Registry, *SourceCounters, *ChannelCounters, *SinkCounters) {
	t.Helper()
	r := NewRegistry("a1")
	src := NewSourceCounters("r1", "netcat")
	ch := NewChannelCounters("c1", "memory")
	ch.SetSize(func() int64 { return 1 }, func() int64 { return 3 })
	snk := NewSinkCounters("k1", "logger")
	for _, s := range []*Set{src.Set, ch.Set, snk.Set} {
		r.Add(s)
		s.Started()
	}
	src.EventReceived.Add(7)
	src.EventAccepted.Add(6)
	src.OpenConnection.Add(2)
	ch.EventPutSuccess.Add(6)
	snk.EventDrainSuccess.Add(5)
	return r, src, ch, snk
}

func flumeJSON(t *testing.T, r *Registry) map[string]map[string]string {
	t.Helper()
	var got map[string]map[string]string
	if err := json.Unmarshal(r.FlumeJSON(), &got); err != nil {
		t.Fatalf("FlumeJSON is not an object of objects of strings: %v\n%s", err, r.FlumeJSON())
	}
	return got
}

func TestFlumeJSON(t *testing.T) {
	r, _, _, _ := testRegistry(t)
	got := flumeJSON(t, r)

	wantAttrs := map[string][]string{
		"SOURCE.r1": {"EventReceivedCount", "EventAcceptedCount", "AppendReceivedCount", "AppendAcceptedCount",
			"AppendBatchReceivedCount", "AppendBatchAcceptedCount", "OpenConnectionCount", "EventReadFail",
			"ChannelWriteFail", "GenericProcessingFail", "StartTime", "StopTime", "Type"},
		"CHANNEL.c1": {"ChannelSize", "ChannelCapacity", "ChannelFillPercentage", "EventPutAttemptCount",
			"EventPutSuccessCount", "EventTakeAttemptCount", "EventTakeSuccessCount", "StartTime", "StopTime", "Type"},
		"SINK.k1": {"ConnectionCreatedCount", "ConnectionClosedCount", "ConnectionFailedCount", "BatchEmptyCount",
			"BatchUnderflowCount", "BatchCompleteCount", "EventDrainAttemptCount", "EventDrainSuccessCount",
			"EventWriteFail", "ChannelReadFail", "StartTime", "StopTime", "Type"},
	}
	if len(got) != len(wantAttrs) {
		t.Errorf("keys = %v, want %d components", keys(got), len(wantAttrs))
	}
	for comp, attrs := range wantAttrs {
		m := got[comp]
		for _, a := range attrs {
			if _, ok := m[a]; !ok {
				t.Errorf("%s: missing %s", comp, a)
			}
		}
		if len(m) != len(attrs) {
			t.Errorf("%s: %d attributes %v, want %d", comp, len(m), keys(m), len(attrs))
		}
		if st, err := strconv.ParseInt(m["StartTime"], 10, 64); err != nil || time.Since(time.UnixMilli(st)) > time.Minute {
			t.Errorf("%s: StartTime = %q, want Unix ms of now", comp, m["StartTime"])
		}
	}
	checks := []struct{ comp, attr, want string }{
		{"SOURCE.r1", "Type", "SOURCE"},
		{"CHANNEL.c1", "Type", "CHANNEL"},
		{"SINK.k1", "Type", "SINK"},
		{"SOURCE.r1", "EventReceivedCount", "7"},
		{"SOURCE.r1", "OpenConnectionCount", "2"},
		{"SOURCE.r1", "StopTime", "0"},
		{"CHANNEL.c1", "ChannelSize", "1"},
		{"CHANNEL.c1", "ChannelCapacity", "3"},
		{"CHANNEL.c1", "ChannelFillPercentage", "33.33333333333333"},
		{"CHANNEL.c1", "EventPutSuccessCount", "6"},
		{"SINK.k1", "EventDrainSuccessCount", "5"},
		{"SINK.k1", "BatchEmptyCount", "0"},
	}
	for _, c := range checks {
		if v := got[c.comp][c.attr]; v != c.want {
			t.Errorf("%s %s = %q, want %q", c.comp, c.attr, v, c.want)
		}
	}
	if !bytes.Equal(r.FlumeJSON(), r.FlumeJSON()) {
		t.Error("FlumeJSON is not deterministic")
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// scrape gathers the registry's Prometheus text and parses it back.
func scrape(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := r.Prometheus().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatalf("encode: %v", err)
		}
	}
	return parseText(t, buf.Bytes())
}

func parseText(t *testing.T, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	out, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parse Prometheus text: %v\n%s", err, text)
	}
	return out
}

// sample finds the metric of family name whose labels include want.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (dto.MetricType, *dto.Metric) {
	mf := mfs[name]
	if mf == nil {
		return 0, nil
	}
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		return mf.GetType(), m
	}
	return mf.GetType(), nil
}

func TestPrometheus(t *testing.T) {
	r, _, _, _ := testRegistry(t)
	r.Latency(StageSink, "k1").Observe(300 * time.Microsecond)
	r.Latency(StageSink, "k1").Observe(3 * time.Millisecond)
	r.Dropped("i1", "filtered").Add(4)
	mfs := scrape(t, r)

	tests := []struct {
		name      string
		component string
		typ       string
		mtype     dto.MetricType
		value     float64
	}{
		{"sluice_source_event_received_total", "r1", "netcat", dto.MetricType_COUNTER, 7},
		{"sluice_source_event_accepted_total", "r1", "netcat", dto.MetricType_COUNTER, 6},
		{"sluice_source_append_batch_received_total", "r1", "netcat", dto.MetricType_COUNTER, 0},
		{"sluice_source_event_read_fail_total", "r1", "netcat", dto.MetricType_COUNTER, 0},
		{"sluice_source_channel_write_fail_total", "r1", "netcat", dto.MetricType_COUNTER, 0},
		{"sluice_source_open_connection_count", "r1", "netcat", dto.MetricType_GAUGE, 2},
		{"sluice_channel_size", "c1", "memory", dto.MetricType_GAUGE, 1},
		{"sluice_channel_capacity", "c1", "memory", dto.MetricType_GAUGE, 3},
		{"sluice_channel_fill_percentage", "c1", "memory", dto.MetricType_GAUGE, 100.0 / 3},
		{"sluice_channel_event_put_success_total", "c1", "memory", dto.MetricType_COUNTER, 6},
		{"sluice_channel_event_take_attempt_total", "c1", "memory", dto.MetricType_COUNTER, 0},
		{"sluice_sink_event_drain_success_total", "k1", "logger", dto.MetricType_COUNTER, 5},
		{"sluice_sink_connection_created_total", "k1", "logger", dto.MetricType_COUNTER, 0},
		{"sluice_sink_channel_read_fail_total", "k1", "logger", dto.MetricType_COUNTER, 0},
		{"sluice_sink_stop_time_seconds", "k1", "logger", dto.MetricType_GAUGE, 0},
	}
	for _, tt := range tests {
		mt, m := sample(mfs, tt.name, map[string]string{"agent": "a1", "component": tt.component, "type": tt.typ})
		if m == nil {
			t.Errorf("no %s{agent=a1,component=%s,type=%s}", tt.name, tt.component, tt.typ)
			continue
		}
		if mt != tt.mtype {
			t.Errorf("%s is a %v, want %v", tt.name, mt, tt.mtype)
		}
		var v float64
		if mt == dto.MetricType_COUNTER {
			v = m.GetCounter().GetValue()
		} else {
			v = m.GetGauge().GetValue()
		}
		if math.Abs(v-tt.value) > 1e-9 {
			t.Errorf("%s = %v, want %v", tt.name, v, tt.value)
		}
	}

	_, m := sample(mfs, "sluice_source_start_time_seconds", map[string]string{"component": "r1"})
	if m == nil || time.Since(time.Unix(int64(m.GetGauge().GetValue()), 0)) > time.Minute {
		t.Errorf("sluice_source_start_time_seconds = %v, want Unix seconds of now", m)
	}

	mt, m := sample(mfs, "sluice_stage_latency_seconds", map[string]string{"agent": "a1", "stage": "sink", "component": "k1"})
	if m == nil || mt != dto.MetricType_HISTOGRAM {
		t.Fatalf("no sluice_stage_latency_seconds histogram for sink k1")
	}
	h := m.GetHistogram()
	if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-0.0033) > 1e-12 {
		t.Errorf("latency count %d sum %v, want 2 and 0.0033", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		var want uint64
		switch le := b.GetUpperBound(); {
		case le >= 0.003:
			want = 2
		case le >= 0.0003:
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}

	_, m = sample(mfs, "sluice_events_dropped_total", map[string]string{"agent": "a1", "component": "i1", "reason": "filtered"})
	if m.GetCounter().GetValue() != 4 {
		t.Errorf("sluice_events_dropped_total = %v, want 4", m)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if mfs[name] == nil {
			t.Errorf("no %s from the runtime collectors", name)
		}
	}
}

func TestPromName(t *testing.T) {
	tests := []struct {
		kind  Kind
		attr  string
		gauge bool
		want  string
	}{
		{KindSource, "EventReceivedCount", false, "sluice_source_event_received_total"},
		{KindSource, "GenericProcessingFail", false, "sluice_source_generic_processing_fail_total"},
		{KindSource, "ChannelWriteFail", false, "sluice_source_channel_write_fail_total"},
		{KindSource, "OpenConnectionCount", true, "sluice_source_open_connection_count"},
		{KindSource, "KafkaCommitTimer", false, "sluice_source_kafka_commit_milliseconds_total"},
		{KindChannel, "ChannelFillPercentage", true, "sluice_channel_fill_percentage"},
		{KindChannel, "EventPutErrorCount", false, "sluice_channel_event_put_error_total"},
		{KindChannel, "CheckpointBackupWriteErrorCount", false, "sluice_channel_checkpoint_backup_write_error_total"},
		{KindChannel, "Closed", true, "sluice_channel_closed"},
		{KindSink, "RollbackCount", false, "sluice_sink_rollback_total"},
		{KindSink, "HTTPErrorCount", false, "sluice_sink_http_error_total"},
		{KindSink, "odd-name.x", true, "sluice_sink_odd_name_x"},
	}
	for _, tt := range tests {
		if got := promName(tt.kind, tt.attr, tt.gauge); got != tt.want {
			t.Errorf("promName(%s, %s, %v) = %s, want %s", tt.kind, tt.attr, tt.gauge, got, tt.want)
		}
	}
}

func TestRemoveDisappears(t *testing.T) {
	r, _, _, _ := testRegistry(t)
	r.Remove(KindSource, "r1")
	// A reload brings a new sink of the same name and another type.
	k := NewSinkCounters("k1", "null")
	r.Add(k.Set)

	if got := flumeJSON(t, r); got["SOURCE.r1"] != nil || got["CHANNEL.c1"] == nil || got["SINK.k1"]["EventDrainSuccessCount"] != "0" {
		t.Errorf("after reload, Flume JSON = %v", got)
	}
	mfs := scrape(t, r)
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "component" && l.GetValue() == "r1" {
					t.Errorf("removed source r1 still in %s", name)
				}
				if l.GetName() == "type" && l.GetValue() == "logger" {
					t.Errorf("replaced sink k1 (logger) still in %s", name)
				}
			}
		}
	}
	if mt, m := sample(mfs, "sluice_sink_event_drain_success_total", map[string]string{"component": "k1", "type": "null"}); m == nil || mt != dto.MetricType_COUNTER {
		t.Error("new sink k1 (null) missing from Prometheus")
	}
}

func TestLatencySnapshot(t *testing.T) {
	r := NewRegistry("a1")
	h := r.Latency(StageEndToEnd, "k1")
	if r.Latency(StageEndToEnd, "k1") != h {
		t.Fatal("Latency gave two histograms for one stage and component")
	}
	r.Latency(StageSource, "r1") // never observed
	// 1 µs, 2 µs, ... 10 ms: uniform, so percentiles are known.
	const n = 10000
	for i := 1; i <= n; i++ {
		h.Observe(time.Duration(i) * time.Microsecond)
	}
	got := r.LatencySnapshot()
	if len(got) != 2 || got[0].Stage != StageEndToEnd || got[1].Stage != StageSource {
		t.Fatalf("LatencySnapshot = %+v, want end_to_end/k1 then source/r1", got)
	}
	if got[1].Count != 0 || got[1].P99 != 0 {
		t.Errorf("unobserved histogram: %+v", got[1])
	}
	s := got[0]
	if s.Component != "k1" || s.Count != n || s.Max != 10*time.Millisecond {
		t.Errorf("count %d max %v component %q, want %d, 10ms, k1", s.Count, s.Max, s.Component, n)
	}
	within := func(name string, got, want time.Duration) {
		t.Helper()
		if d := math.Abs(float64(got-want)) / float64(want); d > 0.0625 {
			t.Errorf("%s = %v, want %v ±6.25%%", name, got, want)
		}
	}
	within("mean", s.Mean, 5000500*time.Nanosecond)
	within("p50", s.P50, 5*time.Millisecond)
	within("p90", s.P90, 9*time.Millisecond)
	within("p99", s.P99, 9900*time.Microsecond)
	within("p999", s.P999, 9990*time.Microsecond)
	if s.P999 > s.Max || s.P50 > s.P90 || s.P90 > s.P99 || s.P99 > s.P999 {
		t.Errorf("percentiles out of order: %+v", s)
	}

	var zero Histogram // components built without a registry
	zero.Observe(time.Second)
	zero.Since(1, 2)
}

func TestHistogramSince(t *testing.T) {
	r := NewRegistry("a1")
	h := r.Latency(StageChannel, "c1")
	h.Since(0, 1000)                    // unknown start: not recorded
	h.Since(2_000_000, 1_000_000)       // clock stepped back: zero
	h.Since(1_000_000, 1_000_000+1_500) // 1.5 µs
	s := r.LatencySnapshot()[0]
	if s.Count != 2 || s.Max != 1500*time.Nanosecond {
		t.Errorf("count %d max %v, want 2 and 1.5µs", s.Count, s.Max)
	}
}

func TestBuckets(t *testing.T) {
	// Every duration falls in the bucket whose bounds hold it, buckets are
	// contiguous, and none is wider than 1/16 of its lower bound.
	for i := 0; i < numBuckets-1; i++ {
		lo, hi := bucketBounds(i)
		nlo, _ := bucketBounds(i + 1)
		if hi != nlo {
			t.Fatalf("bucket %d ends at %v, bucket %d starts at %v", i, hi, i+1, nlo)
		}
		if lo >= 2*subBuckets && (hi-lo)/lo > 1.0/subBuckets {
			t.Fatalf("bucket %d [%v,%v) wider than 1/%d", i, lo, hi, subBuckets)
		}
	}
	for _, ns := range []uint64{0, 1, 15, 16, 31, 32, 33, 1000, 1 << 20, 1<<20 - 1, 123456789, 1<<40 + 12345, 1<<53 - 1} {
		i := bucketOf(ns)
		lo, hi := bucketBounds(i)
		if f := float64(ns); f < lo || f >= hi {
			t.Errorf("%d in bucket %d [%v,%v)", ns, i, lo, hi)
		}
	}
	if bucketOf(math.MaxUint64) != numBuckets-1 {
		t.Errorf("largest duration in bucket %d, want the last, %d", bucketOf(math.MaxUint64), numBuckets-1)
	}
}

func TestConcurrentUpdates(t *testing.T) {
	r, src, ch, snk := testRegistry(t)
	hs := []Histogram{r.Latency(StageSource, "r1"), r.Latency(StageSink, "k1")}
	const workers, perWorker = 4, 2000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				src.EventReceived.Add(1)
				ch.EventPutSuccess.Add(1)
				snk.EventDrainSuccess.Add(1)
				hs[i%2].Observe(time.Duration(i) * time.Microsecond)
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { // a reloading agent
		defer readers.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := NewSinkCounters("k2", "null")
			r.Add(k.Set)
			k.Started()
			r.Latency(StageSink, "k2").Observe(time.Millisecond)
			r.Remove(KindSink, "k2")
		}
	}()
	go func() { // scrapers
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = r.FlumeJSON()
			if _, err := r.Prometheus().Gather(); err != nil {
				t.Errorf("gather: %v", err)
				return
			}
			_ = r.LatencySnapshot()
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()

	got := flumeJSON(t, r)
	want := strconv.Itoa(workers*perWorker + 7)
	if got["SOURCE.r1"]["EventReceivedCount"] != want {
		t.Errorf("EventReceivedCount = %s, want %s", got["SOURCE.r1"]["EventReceivedCount"], want)
	}
	var total uint64
	for _, s := range r.LatencySnapshot() {
		if s.Component != "k2" {
			total += s.Count
		}
	}
	if total != workers*perWorker {
		t.Errorf("histograms counted %d, want %d", total, workers*perWorker)
	}
}

func BenchmarkHistogramSince(b *testing.B) {
	h := NewRegistry("a1").Latency(StageEndToEnd, "k1")
	start := time.Now().UnixNano()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Since(start, start+int64(i&0xfffff)*1000)
	}
}

func BenchmarkHistogramSinceParallel(b *testing.B) {
	h := NewRegistry("a1").Latency(StageEndToEnd, "k1")
	start := time.Now().UnixNano()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			h.Since(start, start+int64(i&0xfffff)*1000)
		}
	})
}

// BenchmarkPrometheusHistogram is the baseline Histogram replaced: a
// prometheus.Histogram with 24 exponential buckets, fed the same values.
func BenchmarkPrometheusHistogram(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x", Help: "x", Buckets: prometheus.ExponentialBuckets(10e-6, 2, 24)})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Observe(float64(int64(i&0xfffff)*1000) / 1e9)
	}
}

func BenchmarkPrometheusHistogramParallel(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x", Help: "x", Buckets: prometheus.ExponentialBuckets(10e-6, 2, 24)})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			h.Observe(float64(int64(i&0xfffff)*1000) / 1e9)
		}
	})
}
