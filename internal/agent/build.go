package agent

import (
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/status"
)

// graph is one built configuration: every component constructed, none
// started. Nodes carry the fingerprint of their configuration so a reload
// can tell which ones to keep running.
type graph struct {
	cfg      *config.Agent
	view     status.Graph // as the status page draws it
	channels map[string]*channelNode
	sinks    map[string]*sinkNode
	runners  map[string]*runnerNode // by sink group name, or sink name for a sink in no group
	sources  map[string]*sourceNode
}

type channelNode struct {
	spec *config.Component
	ch   flow.Channel
	fp   string
	bad  bool // its settings had problems: derived checks against it would only add noise
	life life
}

type sinkNode struct {
	spec   *config.Component
	sink   flow.Sink
	fp     string
	runner string
	// healthGrace is how long the sink may keep failing before its runner
	// reports it (healthGraceMillis); 0 for a sink that reports its own health.
	healthGrace time.Duration
	life        life
}

type runnerNode struct {
	name    string
	group   *config.SinkGroup // nil for a lone sink
	members []string
	sink    flow.Sink // the sink processor, or the lone sink
	runner  *flow.SinkRunner
	fp      string
	life    life
}

type sourceNode struct {
	spec *config.Component
	src  flow.Source
	proc flow.Processor
	fp   string
	life life
}

// builder constructs components. keep, when set, names the nodes of a
// running graph to reuse instead of constructing anew (a reload).
type builder struct {
	cfg   *config.Agent
	reg   *metrics.Registry
	log   *slog.Logger
	probs *config.Problems
	keep  *graph
	taps  *flow.Taps // nil: nothing can be tapped (validation)
	sys   map[string]string
}

func (b *builder) env(name, typ string) flow.Env {
	return flow.Env{
		Agent:   b.cfg.Name,
		Name:    name,
		Type:    typ,
		Logger:  b.log.With("component", name, "type", typ),
		Metrics: b.reg,
		Sys:     b.sys,
	}
}

func (b *builder) problem(c *config.Component, key, format string, args ...any) {
	c.Props.Errorf(key, format, args...)
}

// typeProblem reports a type that cannot be built: a Flume type sluice
// lacks, a Java class (a custom plugin), or a misspelling.
func (b *builder) typeProblem(c *config.Component, typ string, known []string) {
	c.Props.Errorf("type", "%s", typeMessage(c.Kind, c.Type, typ, known))
}

// typeMessage says why type written (canonical typ) of kind is not one of
// known.
func typeMessage(kind, written, typ string, known []string) string {
	if msg := missingTypeMessage(kind, written); msg != "" {
		return msg
	}
	list := strings.Join(known, ", ")
	if strings.Contains(typ, ".") {
		return fmt.Sprintf("%s type %q is a Java class, and sluice runs no Java plugins; its %s types are %s (or their Flume class names)", kind, written, kind, list)
	}
	msg := fmt.Sprintf("unknown %s type %q", kind, written)
	best, bestD := "", 3
	for _, k := range known {
		if d := config.EditDistance(typ, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf("; did you mean %s?", best)
	}
	return msg + fmt.Sprintf(" known types: %s (or their Flume class names)", list)
}

// prepare applies what sluice knows about a component's keys before its
// constructor reads them: feature groups it refuses in one line, and Flume
// keys it deliberately ignores (a note each).
func (b *builder) prepare(c *config.Component, typ string) {
	for _, g := range refusedGroups[c.Kind+":"+typ] {
		keys := c.Props.Keys(g.prefix)
		if len(keys) == 0 {
			continue
		}
		first := keys[0]
		for _, k := range keys {
			c.Props.MarkUsed(k)
			if c.Props.LineOf(k) < c.Props.LineOf(first) {
				first = k
			}
		}
		c.Props.Errorf(first, "%s", g.msg)
	}
	for _, k := range sortedKeys(ignoredKeys[c.Kind+":"+typ]) {
		c.Props.Ignored(k, ignoredKeys[c.Kind+":"+typ][k])
	}
}

func (b *builder) build() *graph {
	g := &graph{
		cfg:      b.cfg,
		channels: map[string]*channelNode{},
		sinks:    map[string]*sinkNode{},
		runners:  map[string]*runnerNode{},
		sources:  map[string]*sourceNode{},
	}
	b.buildChannels(g)
	b.buildSinks(g)
	b.buildRunners(g)
	b.buildSources(g)
	g.view = describe(g)
	return g
}

func (b *builder) buildChannels(g *graph) {
	for _, c := range b.cfg.Channels {
		fp := c.Fingerprint()
		if k := b.keep; k != nil {
			if old, ok := k.channels[c.Name]; ok && old.fp == fp {
				g.channels[c.Name] = old
				continue
			}
		}
		typ := canonicalType(c.Type)
		f, ok := channelTypes[typ]
		if !ok {
			b.typeProblem(c, typ, knownNames(channelTypes))
			continue
		}
		before := b.probs.Count(config.Error)
		b.prepare(c, typ)
		ch, err := f(b.env(c.Name, typ), c.Props)
		c.Props.Unused()
		if err != nil {
			b.problem(c, "type", "cannot build channel: %v", err)
			continue
		}
		g.channels[c.Name] = &channelNode{spec: c, ch: ch, fp: fp, bad: b.probs.Count(config.Error) > before}
	}
}

// runnerOf returns the name of the runner that drives sink: its group, or itself.
func runnerOf(cfg *config.Agent, sink string) (string, *config.SinkGroup) {
	for _, grp := range cfg.SinkGroups {
		for _, s := range grp.Sinks {
			if s == sink {
				return grp.Name, grp
			}
		}
	}
	return sink, nil
}

// runnerFingerprint covers the group's settings and every member sink's,
// plus whether each member's channel is unchanged: a runner is kept only
// when nothing it drives changed.
func (b *builder) runnerFingerprint(g *graph, grp *config.SinkGroup, members []*config.Component) string {
	var parts []string
	if grp != nil {
		parts = append(parts, "group:"+grp.Fingerprint())
	}
	for _, m := range members {
		chFP := ""
		if n, ok := g.channels[m.Channel]; ok {
			chFP = n.fp
		}
		parts = append(parts, "sink:"+m.Name+"="+m.Fingerprint()+";channel="+chFP)
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

func (b *builder) buildSinks(g *graph) {
	byName := map[string]*config.Component{}
	for _, c := range b.cfg.Sinks {
		byName[c.Name] = c
	}
	for _, c := range b.cfg.Sinks {
		rname, grp := runnerOf(b.cfg, c.Name)
		var members []*config.Component
		if grp == nil {
			members = []*config.Component{c}
		} else {
			for _, s := range grp.Sinks {
				if m, ok := byName[s]; ok {
					members = append(members, m)
				}
			}
		}
		rfp := b.runnerFingerprint(g, grp, members)
		if k := b.keep; k != nil {
			if old, ok := k.runners[rname]; ok && old.fp == rfp && k.sinks[c.Name] != nil {
				g.sinks[c.Name] = k.sinks[c.Name]
				continue
			}
		}
		typ := canonicalType(c.Type)
		f, ok := sinkTypes[typ]
		if !ok {
			b.typeProblem(c, typ, knownNames(sinkTypes))
			continue
		}
		b.prepare(c, typ)
		env := b.env(c.Name, typ)
		if n, ok := g.channels[c.Channel]; ok {
			env.Channel = n.ch
			env.ChannelTap = b.taps.Point("channel", c.Channel)
		}
		s, err := f(env, c.Props)
		var grace time.Duration
		if err == nil {
			b.checkBatch(c, s, g.channels[c.Channel])
			// A sink that reports its own health reads its own grace; for
			// the others the runner tells a sink that keeps failing.
			if _, own := s.(flow.HealthReporter); !own {
				grace = time.Duration(c.Props.IntRange("healthGraceMillis",
					int(flow.DefaultSinkHealthGrace/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
			}
		}
		c.Props.Unused()
		if err != nil {
			b.problem(c, "type", "cannot build sink: %v", err)
			continue
		}
		g.sinks[c.Name] = &sinkNode{spec: c, sink: s, fp: c.Fingerprint(), runner: rname, healthGrace: grace}
	}
}

// checkBatch reports a batch size larger than the channel's
// transactionCapacity, which Flume rejects too (the batch could never commit).
func (b *builder) checkBatch(c *config.Component, comp any, ch *channelNode) {
	bs, ok := comp.(flow.BatchSizer)
	if !ok || ch == nil || ch.bad {
		return
	}
	tc, ok := ch.ch.(flow.TxCapacity)
	if !ok || bs.BatchSize() <= tc.TransactionCapacity() {
		return
	}
	key := "type"
	for _, k := range []string{"batchSize", "batch-size", "sink.batchSize", "flumeBatchSize", "hdfs.batchSize"} {
		if hasKey(c.Props, k) {
			key = k
			break
		}
	}
	b.problem(c, key, "batch size %d is larger than channel %s's transactionCapacity %d; lower it or raise %s",
		bs.BatchSize(), ch.spec.Name, tc.TransactionCapacity(), ch.spec.Props.Full("transactionCapacity"))
}

func (b *builder) buildRunners(g *graph) {
	done := map[string]bool{}
	for _, c := range b.cfg.Sinks {
		sn, ok := g.sinks[c.Name]
		if !ok {
			continue
		}
		rname := sn.runner
		if done[rname] {
			continue
		}
		done[rname] = true
		_, grp := runnerOf(b.cfg, c.Name)
		if grp == nil {
			r := &runnerNode{name: rname, members: []string{c.Name}, sink: sn.sink}
			r.fp = b.runnerFingerprint(g, nil, []*config.Component{c})
			if k := b.keep; k != nil && k.runners[rname] != nil && k.runners[rname].fp == r.fp {
				r = k.runners[rname]
			}
			g.runners[rname] = r
			continue
		}
		members := map[string]flow.Sink{}
		var specs []*config.Component
		for _, s := range grp.Sinks {
			if n, ok := g.sinks[s]; ok {
				members[s] = n.sink
				specs = append(specs, n.spec)
			}
		}
		fp := b.runnerFingerprint(g, grp, specs)
		if k := b.keep; k != nil && k.runners[rname] != nil && k.runners[rname].fp == fp {
			g.runners[rname] = k.runners[rname]
			continue
		}
		if len(members) != len(grp.Sinks) {
			continue // a member failed to build; its problem is reported
		}
		proc, err := flow.NewSinkProcessor(grp.Processor, grp.Sinks, members, b.log)
		grp.Processor.Unused()
		if err != nil {
			b.probs.Add(grp.File, grp.Line, b.cfg.Name+".sinkgroups."+grp.Name, "cannot build sink group: %v", err)
			continue
		}
		g.runners[rname] = &runnerNode{name: rname, group: grp, members: grp.Sinks, sink: proc, fp: fp}
	}
}

func (b *builder) buildSources(g *graph) {
	for _, c := range b.cfg.Sources {
		fp := c.Fingerprint()
		allKept := true
		chans := map[string]flow.Channel{}
		for _, name := range c.Channels {
			n, ok := g.channels[name]
			if !ok {
				allKept = false
				continue
			}
			chans[name] = n.ch
			if b.keep == nil || b.keep.channels[name] != n {
				allKept = false
			}
		}
		if k := b.keep; k != nil && allKept {
			if old, ok := k.sources[c.Name]; ok && old.fp == fp {
				g.sources[c.Name] = old
				continue
			}
		}
		typ := canonicalType(c.Type)
		f, ok := sourceTypes[typ]
		if !ok {
			b.typeProblem(c, typ, knownNames(sourceTypes))
			continue
		}
		b.prepare(c, typ)
		env := b.env(c.Name, typ)
		src, err := f(env, c.Props)
		if err != nil {
			b.problem(c, "type", "cannot build source: %v", err)
		}
		var ics []flow.Interceptor
		for _, ic := range c.Interceptors {
			name, icf := interceptorType(ic.Type)
			if icf == nil {
				if msg := missingTypeMessage("interceptor", ic.Type); msg != "" {
					ic.Props.Errorf("type", "%s", msg)
				} else if strings.Contains(ic.Type, ".") {
					// A custom Java interceptor: what transform is for.
					ic.Props.Errorf("type", "interceptor type %q is a Java class, and sluice runs no Java plugins; "+
						"port its logic to a transform interceptor (type = transform, with drop, set.NAME, remove and body expressions; "+
						"see docs/transforms.md), or use one of: %s", strings.TrimSpace(ic.Type), interceptorAliases())
				} else {
					ic.Props.Errorf("type", "unknown interceptor type %q; known types: %s (or their Flume builder class names)", ic.Type, interceptorAliases())
				}
				// Its other keys are not reported as unread: the type is the problem.
				for _, k := range ic.Props.Keys("") {
					ic.Props.MarkUsed(k)
				}
				continue
			}
			i, err := icf(b.env(c.Name+"."+ic.Name, name), ic.Props)
			if err != nil {
				ic.Props.Errorf("type", "cannot build interceptor: %v", err)
				continue
			}
			ics = append(ics, i)
		}
		var sel flow.Selector
		styp := strings.TrimSpace(c.Selector.String("type", ""))
		msg := missingTypeMessage("selector", styp)
		if msg == "" && strings.Contains(styp, ".") && !strings.HasPrefix(strings.ToLower(styp), "org.apache.flume.channel.") {
			// A selector class of the user's own, in the words every
			// other plugin class gets, and what replaces it.
			msg = typeMessage("selector", styp, styp, []string{flow.SelectorExpression, flow.SelectorLoadBalancing, flow.SelectorMultiplexing, flow.SelectorReplicating}) +
				"; an expression selector (selector.when.CHANNEL = EXPR) routes by any rule over the event, see docs/transforms.md"
		}
		if msg != "" {
			c.Selector.Errorf("type", "%s", msg)
			for _, k := range c.Selector.Keys("") {
				c.Selector.MarkUsed(k)
			}
		} else if len(chans) == len(c.Channels) {
			sel, err = flow.NewSelectorEnv(b.env(c.Name+".selector", "selector"), c.Selector, chans, c.Channels)
			if err != nil {
				c.Selector.Errorf("type", "cannot build selector: %v", err)
			}
		}
		if src != nil {
			for _, name := range c.Channels {
				b.checkBatch(c, src, g.channels[name])
			}
		}
		c.Props.Unused()
		if src == nil || sel == nil {
			continue
		}
		proc := flow.NewChannelProcessor(flow.ProcessorConfig{
			Source:       c.Name,
			Interceptors: ics,
			Selector:     sel,
			Metrics:      b.reg,
			Logger:       env.Log(),
			Tap:          b.taps.Point("source", c.Name),
		})
		g.sources[c.Name] = &sourceNode{spec: c, src: src, proc: proc, fp: fp}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// hasKey reports whether p sets k, without marking it read.
func hasKey(p *config.Props, k string) bool {
	for _, x := range p.Keys(k) {
		if x == k {
			return true
		}
	}
	return false
}
