package status

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
)

// Sampling defaults: a sample a second, latency percentiles over the last
// minute, a history point every 5 seconds for 15 minutes.
const (
	DefaultInterval = time.Second
	DefaultWindow   = 60 // samples
	DefaultStep     = 5  // samples per history point
	DefaultPoints   = 180
)

// errorCounters are the Flume counters that count failures, by kind.
var errorCounters = map[metrics.Kind][]string{
	metrics.KindSource:  {"EventReadFail", "ChannelWriteFail", "GenericProcessingFail"},
	metrics.KindChannel: {"EventPutErrorCount", "EventTakeErrorCount", "CheckpointWriteErrorCount", "CheckpointBackupWriteErrorCount"},
	metrics.KindSink:    {"EventWriteFail", "ChannelReadFail", "ConnectionFailedCount"},
}

// flowCounters are the counters whose rates are a component's In and Out.
var flowCounters = map[metrics.Kind][2]string{
	metrics.KindSource:  {"EventReceivedCount", "EventAcceptedCount"},
	metrics.KindChannel: {"EventPutSuccessCount", "EventTakeSuccessCount"},
	metrics.KindSink:    {"EventDrainAttemptCount", "EventDrainSuccessCount"},
}

// Sampler samples an agent's metrics at a fixed interval and keeps what
// the status page shows. Start starts its goroutine; Stop ends it.
type Sampler struct {
	agent    Agent
	reg      *metrics.Registry
	interval time.Duration
	window   int // samples in the latency window
	step     int // samples per history point
	points   int // history points kept per node

	mu      sync.Mutex
	at      time.Time               // time of the last sample
	ticks   int                     // samples taken
	graph   Graph                   // as of the last sample
	sets    map[string]*setState    // by Kind.Name
	hists   map[histKey]*histState  // by stage and component
	nodes   map[string]*nodeState   // by node ID
	reading []metrics.LatencyCounts // scratch
	merged  []uint64                // scratch

	cancel context.CancelFunc
	done   chan struct{}
}

type histKey struct {
	stage     metrics.Stage
	component string
}

// setState is what the sampler keeps of one counter set.
type setState struct {
	set   *metrics.Set
	at    time.Time
	vals  map[string]int64   // numeric attributes at the last sample
	attrs map[string]string  // every attribute as Flume prints it
	rates map[string]float64 // growth a second of each counter over the last interval
}

// histState is what the sampler keeps of one latency histogram: its counts
// at the last sample and, for each of the last window samples, the counts
// observed since the sample before (only the non-zero buckets).
type histState struct {
	prev []uint64
	ring [][]bucketCount
	pos  int // next slot of ring
}

type bucketCount struct {
	i int
	n uint64
}

// nodeState is a node's latest values and history.
type nodeState struct {
	node    Node
	history []Point // ring of at most points
	pos     int
	acc     Point // rates summed over the current step
	accN    int
}

// NewSampler returns a sampler of agent's metrics in reg. Zero arguments
// take the defaults.
func NewSampler(agent Agent, reg *metrics.Registry, interval time.Duration) *Sampler {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Sampler{
		agent: agent, reg: reg, interval: interval,
		window: DefaultWindow, step: DefaultStep, points: DefaultPoints,
		sets:  map[string]*setState{},
		hists: map[histKey]*histState{},
		nodes: map[string]*nodeState{},
	}
}

// Start takes a first sample and starts sampling every interval until Stop.
func (s *Sampler) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	s.Sample(time.Now())
	done := s.done
	panics.Go("status sampler", func() {
		defer close(done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.Sample(now)
			}
		}
	})
}

// Stop ends the sampling goroutine and waits for it.
func (s *Sampler) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	s.cancel = nil
}

// Sample reads the metrics once, as of now. Start calls it every interval;
// tests call it directly.
func (s *Sampler) Sample(now time.Time) {
	g := s.agent.Graph()
	sets := s.reg.Sets()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ticks++
	s.at = now
	s.graph = g
	s.sampleSets(sets, now)
	s.sampleHists()
	s.sampleNodes(g, now)
}

func (s *Sampler) sampleSets(sets []*metrics.Set, now time.Time) {
	seen := make(map[string]bool, len(sets))
	for _, set := range sets {
		key := string(set.Kind) + "." + set.Name
		seen[key] = true
		st := s.sets[key]
		if st == nil || st.set != set {
			// New, or replaced by a reload: no rates until the next sample.
			st = &setState{set: set}
			s.sets[key] = st
		}
		vals := make(map[string]int64, len(st.vals))
		attrs := make(map[string]string, len(st.attrs))
		rates := make(map[string]float64, len(st.vals))
		dt := now.Sub(st.at).Seconds()
		set.Each(func(name, value string) {
			attrs[name] = value
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return
			}
			vals[name] = v
			if prev, ok := st.vals[name]; ok && dt > 0 {
				d := v - prev
				if d < 0 { // counters reset when a component starts again
					d = v
				}
				rates[name] = float64(d) / dt
			}
		})
		st.vals, st.attrs, st.rates, st.at = vals, attrs, rates, now
	}
	for key := range s.sets {
		if !seen[key] {
			delete(s.sets, key)
		}
	}
}

func (s *Sampler) sampleHists() {
	s.reading = s.reg.ReadLatencies(s.reading)
	for _, r := range s.reading {
		k := histKey{r.Stage, r.Component}
		h := s.hists[k]
		if h == nil {
			h = &histState{prev: append([]uint64(nil), r.Counts...), ring: make([][]bucketCount, s.window)}
			s.hists[k] = h
			continue // what it observed before the first sample is not in the window
		}
		d := h.ring[h.pos][:0]
		for i, c := range r.Counts {
			if c > h.prev[i] {
				d = append(d, bucketCount{i, c - h.prev[i]})
			}
		}
		copy(h.prev, r.Counts)
		h.ring[h.pos] = d
		h.pos = (h.pos + 1) % len(h.ring)
	}
}

// percentiles returns the count, P50 and P99 of the union of the
// histograms keys over their last n samples.
func (s *Sampler) percentiles(keys []histKey, n int) (count uint64, p50, p99 time.Duration) {
	if cap(s.merged) < metrics.LatencyBuckets {
		s.merged = make([]uint64, metrics.LatencyBuckets)
	}
	m := s.merged[:metrics.LatencyBuckets]
	clear(m)
	for _, k := range keys {
		h := s.hists[k]
		if h == nil {
			continue
		}
		for j := 1; j <= n && j <= len(h.ring); j++ {
			for _, bc := range h.ring[(h.pos-j+len(h.ring))%len(h.ring)] {
				m[bc.i] += bc.n
				count += bc.n
			}
		}
	}
	if count == 0 {
		return 0, 0, 0
	}
	return count, metrics.Quantile(m, 0.5), metrics.Quantile(m, 0.99)
}

// stageKeys lists, for each node, the stages it shows and the histograms
// each is read from.
type stageKeys struct {
	stage string
	keys  []histKey
}

func (s *Sampler) sampleNodes(g Graph, now time.Time) {
	seen := map[string]bool{}
	sinksOf := map[string][]string{} // channel -> sinks taking from it
	for _, k := range g.Sinks {
		sinksOf[k.Channel] = append(sinksOf[k.Channel], k.Name)
	}
	keysOf := func(stage metrics.Stage, comps ...string) []histKey {
		out := make([]histKey, len(comps))
		for i, c := range comps {
			out[i] = histKey{stage, c}
		}
		return out
	}
	add := func(n Node, kind metrics.Kind, members []string, stages []stageKeys) {
		seen[n.ID] = true
		ns := s.nodes[n.ID]
		if ns == nil {
			ns = &nodeState{}
			s.nodes[n.ID] = ns
		}
		if kind != "" {
			var in, out, errRate float64
			var errs int64
			have := false
			for _, m := range members {
				st := s.sets[string(kind)+"."+m]
				if st == nil {
					continue
				}
				have = true
				fc := flowCounters[kind]
				in += st.rates[fc[0]]
				out += st.rates[fc[1]]
				for _, e := range errorCounters[kind] {
					errs += st.vals[e]
					errRate += st.rates[e]
				}
				if len(members) == 1 {
					n.Counters = st.attrs
					if kind == metrics.KindChannel {
						n.Fill = &Fill{Events: st.vals["ChannelSize"], Capacity: st.vals["ChannelCapacity"]}
						if c := n.Fill.Capacity; c > 0 {
							n.Fill.Percent = float64(n.Fill.Events) / float64(c) * 100
						}
					}
				}
			}
			if have {
				n.In, n.Out = &in, &out
				if n.Generator {
					n.In = nil
				}
				n.Errors, n.ErrorRate = errs, errRate
			}
		}
		for _, sk := range stages {
			c, p50, p99 := s.percentiles(sk.keys, s.window)
			n.Latency = append(n.Latency, Latency{Stage: sk.stage, Count: c, P50: int64(p50), P99: int64(p99)})
		}
		ns.node = n
		s.record(ns, stages, now)
	}
	for _, src := range g.Sources {
		add(Node{ID: "source/" + src.Name, Kind: "source", Name: src.Name, Type: src.Type, Interceptors: src.Interceptors,
			Generator: src.Generator},
			metrics.KindSource, []string{src.Name},
			[]stageKeys{{"source", keysOf(metrics.StageSource, src.Name)}})
		sel := Node{ID: "selector/" + src.Name, Kind: "selector", Name: src.Name, Type: src.Selector.Type}
		if src.Selector.Header != "" {
			sel.Detail = "header " + src.Selector.Header
		}
		add(sel, "", nil, nil)
	}
	for _, ch := range g.Channels {
		n := Node{ID: "channel/" + ch.Name, Kind: "channel", Name: ch.Name, Type: ch.Type}
		add(n, metrics.KindChannel, []string{ch.Name},
			[]stageKeys{{"channel", keysOf(metrics.StageChannel, sinksOf[ch.Name]...)}})
		if ch.Bytes != nil {
			ns := s.nodes[n.ID]
			if ns.node.Fill == nil {
				ns.node.Fill = &Fill{}
			}
			held, capacity := ch.Bytes()
			ns.node.Fill.Bytes, ns.node.Fill.ByteCapacity = &held, &capacity
		}
	}
	for _, grp := range g.SinkGroups {
		add(Node{ID: "group/" + grp.Name, Kind: "group", Name: grp.Name, Type: grp.Processor},
			metrics.KindSink, grp.Sinks,
			[]stageKeys{{"sink", keysOf(metrics.StageSink, grp.Sinks...)}, {"end_to_end", keysOf(metrics.StageEndToEnd, grp.Sinks...)}})
	}
	for _, k := range g.Sinks {
		add(Node{ID: "sink/" + k.Name, Kind: "sink", Name: k.Name, Type: k.Type},
			metrics.KindSink, []string{k.Name},
			[]stageKeys{{"sink", keysOf(metrics.StageSink, k.Name)}, {"end_to_end", keysOf(metrics.StageEndToEnd, k.Name)}})
	}
	for id := range s.nodes {
		if !seen[id] {
			delete(s.nodes, id)
		}
	}
}

// record adds this sample's rates to the node's current step, and closes
// the step into a history point every step samples.
func (s *Sampler) record(ns *nodeState, stages []stageKeys, now time.Time) {
	if ns.node.In != nil {
		ns.acc.In += *ns.node.In
	}
	if ns.node.Out != nil {
		ns.acc.Out += *ns.node.Out
	}
	ns.accN++
	if s.ticks%s.step != 0 {
		return
	}
	p := Point{Time: now.UnixMilli(), In: ns.acc.In / float64(ns.accN), Out: ns.acc.Out / float64(ns.accN)}
	if f := ns.node.Fill; f != nil {
		p.Size = f.Events
	}
	for _, sk := range stages {
		_, p50, p99 := s.percentiles(sk.keys, s.step)
		p.P50 = append(p.P50, int64(p50))
		p.P99 = append(p.P99, int64(p99))
	}
	ns.acc, ns.accN = Point{}, 0
	if len(ns.history) < s.points {
		ns.history = append(ns.history, p)
		return
	}
	ns.history[ns.pos] = p
	ns.pos = (ns.pos + 1) % s.points
}

// Snapshot returns the graph with the last sample's numbers and the health
// of every component now.
func (s *Sampler) Snapshot() Snapshot {
	st := s.agent.Status()
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{
		Agent: st.Agent, State: st.State, Healthy: st.Healthy(), Problems: st.Problems(), Notes: st.Notes(),
		Time: s.at.UnixMilli(), Interval: s.interval.Seconds(), Window: float64(s.window) * s.interval.Seconds(),
		Nodes: []Node{}, Edges: []Edge{},
	}
	if snap.Problems == nil {
		snap.Problems = []string{}
	}
	if snap.Notes == nil {
		snap.Notes = []string{}
	}
	health := map[string]metrics.ComponentStatus{}
	for _, c := range st.Components {
		health[c.Kind+"/"+c.Name] = c
	}
	g := s.graph
	push := func(id string) {
		ns := s.nodes[id]
		if ns == nil {
			return
		}
		n := ns.node
		if c, ok := health[id]; ok {
			n.State, n.Reason, n.Note, n.Left = c.State, c.Reason, c.Note, c.Left
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	for _, src := range g.Sources {
		push("source/" + src.Name)
		push("selector/" + src.Name)
		snap.Edges = append(snap.Edges, Edge{From: "source/" + src.Name, To: "selector/" + src.Name})
		opt := map[string]bool{}
		for _, c := range src.Selector.Optional {
			opt[c] = true
		}
		for _, c := range src.Channels {
			snap.Edges = append(snap.Edges, Edge{From: "selector/" + src.Name, To: "channel/" + c,
				Label: src.Selector.Routes[c], Optional: opt[c]})
		}
	}
	for _, ch := range g.Channels {
		push("channel/" + ch.Name)
	}
	// Groups and sinks in the order the page stacks them: each group where
	// its first sink comes, its sinks together, a sink in no group between
	// them, so that no arrow has to cross a group it does not go through.
	sinks := sinkOrder(g)
	pushed := map[string]bool{}
	for _, k := range sinks {
		if k.Group != "" && !pushed[k.Group] {
			pushed[k.Group] = true
			push("group/" + k.Group)
		}
	}
	for _, grp := range g.SinkGroups {
		if !pushed[grp.Name] { // a group none of whose sinks was built
			push("group/" + grp.Name)
		}
	}
	linked := map[[2]string]bool{}
	for _, k := range sinks {
		push("sink/" + k.Name)
		from := "channel/" + k.Channel
		if k.Group != "" {
			e := [2]string{from, "group/" + k.Group}
			if !linked[e] {
				linked[e] = true
				snap.Edges = append(snap.Edges, Edge{From: e[0], To: e[1]})
			}
			from = "group/" + k.Group
		}
		snap.Edges = append(snap.Edges, Edge{From: from, To: "sink/" + k.Name})
	}
	return snap
}

// sinkOrder returns g's sinks with each group's members together, where its
// first member is, in the group's order; sinks in no group keep their
// places between them.
func sinkOrder(g Graph) []SinkSpec {
	byName := map[string]SinkSpec{}
	for _, k := range g.Sinks {
		byName[k.Name] = k
	}
	members := map[string][]string{}
	for _, grp := range g.SinkGroups {
		members[grp.Name] = grp.Sinks
	}
	out := make([]SinkSpec, 0, len(g.Sinks))
	done := map[string]bool{}
	for _, k := range g.Sinks {
		if done[k.Name] {
			continue
		}
		if k.Group == "" {
			done[k.Name] = true
			out = append(out, k)
			continue
		}
		for _, m := range append(members[k.Group], k.Name) {
			if mk, ok := byName[m]; ok && !done[m] && mk.Group == k.Group {
				done[m] = true
				out = append(out, mk)
			}
		}
	}
	return out
}

// History returns the history of node id, oldest point first, and false
// when there is no such node.
func (s *Sampler) History(id string) (History, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nodes[id]
	if ns == nil {
		return History{}, false
	}
	h := History{ID: id, Step: float64(s.step) * s.interval.Seconds(), Stages: []string{}, Points: []Point{}}
	for _, l := range ns.node.Latency {
		h.Stages = append(h.Stages, l.Stage)
	}
	h.Points = append(h.Points, ns.history[ns.pos:]...)
	h.Points = append(h.Points, ns.history[:ns.pos]...)
	return h, true
}
