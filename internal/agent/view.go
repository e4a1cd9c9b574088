package agent

import (
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/status"
)

// byteCounter is a channel that counts the body bytes it holds (memory).
type byteCounter interface {
	Bytes() int64
	ByteCapacity() int64
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
