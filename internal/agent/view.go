package agent

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/status"
)

// byteCounter is a channel that counts the body bytes it holds (memory).
type byteCounter interface {
	Bytes() int64
	ByteCapacity() int64
}

// generator is a source that makes its events itself instead of receiving
// them (seq, stress): the page shows what it puts out, and no input rate.
type generator interface {
	GeneratesEvents() bool
}

// describe returns g as the status page draws it. It reads the selectors'
// properties, so it runs while g is built, never concurrently with
// anything reading them.
func describe(g *graph) status.Graph {
	var v status.Graph
	cfg := g.cfg
	for _, c := range cfg.Sources {
		if _, ok := g.sources[c.Name]; !ok {
			continue
		}
		s := status.SourceSpec{Name: c.Name, Type: canonicalType(c.Type), Channels: c.Channels,
			Selector: describeSelector(c)}
		if gen, ok := g.sources[c.Name].src.(generator); ok {
			s.Generator = gen.GeneratesEvents()
		}
		for _, ic := range c.Interceptors {
			name, _ := interceptorType(ic.Type)
			s.Interceptors = append(s.Interceptors, status.Named{Name: ic.Name, Type: name})
		}
		v.Sources = append(v.Sources, s)
	}
	for _, c := range cfg.Channels {
		n, ok := g.channels[c.Name]
		if !ok {
			continue
		}
		spec := status.ChannelSpec{Name: c.Name, Type: canonicalType(c.Type)}
		if bc, ok := n.ch.(byteCounter); ok {
			spec.Bytes = func() (int64, int64) { return bc.Bytes(), bc.ByteCapacity() }
		}
		v.Channels = append(v.Channels, spec)
	}
	for _, grp := range cfg.SinkGroups {
		if _, ok := g.runners[grp.Name]; !ok {
			continue
		}
		typ := "default"
		if grp.Processor != nil {
			typ = strings.ToLower(strings.TrimSpace(grp.Processor.String("type", "default")))
		}
		v.SinkGroups = append(v.SinkGroups, status.GroupSpec{Name: grp.Name, Processor: typ, Sinks: grp.Sinks})
	}
	for _, c := range cfg.Sinks {
		n, ok := g.sinks[c.Name]
		if !ok {
			continue
		}
		s := status.SinkSpec{Name: c.Name, Type: canonicalType(c.Type), Channel: c.Channel}
		if n.runner != c.Name {
			s.Group = n.runner
		}
		v.Sinks = append(v.Sinks, s)
	}
	return v
}

// withDrains is g's view with the channels and sinks of drains that g has
// no component of that name for (a channel a reload removed, its sinks and
// their group), so the page shows them draining.
func withDrains(g *graph, drains []*drainPart) status.Graph {
	v := g.view
	if len(drains) == 0 {
		return v
	}
	v.Channels = slices.Clone(v.Channels)
	v.SinkGroups = slices.Clone(v.SinkGroups)
	v.Sinks = slices.Clone(v.Sinks)
	haveChannel, haveSink, haveGroup := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, c := range v.Channels {
		haveChannel[c.Name] = true
	}
	for _, k := range v.Sinks {
		haveSink[k.Name] = true
	}
	for _, grp := range v.SinkGroups {
		haveGroup[grp.Name] = true
	}
	for _, p := range drains {
		for _, c := range p.g.view.Channels {
			if p.holds("channel", c.Name) && !haveChannel[c.Name] {
				haveChannel[c.Name] = true
				v.Channels = append(v.Channels, c)
			}
		}
		groups := map[string]bool{} // the groups of this drain drawn
		for _, grp := range p.g.view.SinkGroups {
			if p.holds("runner", grp.Name) && !haveGroup[grp.Name] {
				haveGroup[grp.Name], groups[grp.Name] = true, true
				v.SinkGroups = append(v.SinkGroups, grp)
			}
		}
		for _, k := range p.g.view.Sinks {
			if p.holds("sink", k.Name) && !haveSink[k.Name] {
				haveSink[k.Name] = true
				if k.Group != "" && !groups[k.Group] {
					k.Group = "" // the group of that name is the running graph's
				}
				v.Sinks = append(v.Sinks, k)
			}
		}
	}
	return v
}

// describeSelector says which channels of source c get which events.
func describeSelector(c *config.Component) status.SelectorSpec {
	p := c.Selector
	if p == nil {
		return status.SelectorSpec{Type: "replicating"}
	}
	typ := strings.ToLower(p.String("type", "replicating"))
	if !strings.Contains(typ, "multiplexing") {
		sp := status.SelectorSpec{Type: "replicating", Optional: p.Fields("optional")}
		return sp
	}
	sp := status.SelectorSpec{Type: "multiplexing", Header: p.String("header", "flume.selector.header"),
		Routes: map[string]string{}}
	when := map[string][]string{}
	required := map[string]bool{}
	for _, ch := range p.Fields("default") {
		when[ch] = append(when[ch], "default")
		required[ch] = true
	}
	for _, k := range p.Keys("mapping.") {
		for _, ch := range p.Fields(k) {
			when[ch] = append(when[ch], strings.TrimPrefix(k, "mapping."))
			required[ch] = true
		}
	}
	for _, k := range p.Keys("optional.") {
		for _, ch := range p.Fields(k) {
			when[ch] = append(when[ch], strings.TrimPrefix(k, "optional.")+" (optional)")
		}
	}
	for ch, vs := range when {
		sp.Routes[ch] = sp.Header + "=" + strings.Join(vs, ", ")
	}
	for _, ch := range c.Channels {
		if _, routed := when[ch]; routed && !required[ch] {
			sp.Optional = append(sp.Optional, ch) // only ever optional
		}
	}
	return sp
}
