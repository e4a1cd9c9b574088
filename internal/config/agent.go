// Package config reads a sluice agent's configuration: Flume's agent
// properties files, read as java.util.Properties reads them.
//
// Load parses the file (ParseProperties), keeps the properties of one agent
// (keys starting with "NAME."), expands ${env:X}, ${sys:X} and ${X} in their
// values (Lookup), and checks the structure Flume's grammar gives them:
//
//	a1.sources = r1           a1.sources.r1.type = netcat
//	a1.channels = c1          a1.sources.r1.channels = c1
//	a1.sinks = k1             a1.sinks.k1.channel = c1
//	a1.sinkgroups = g1        a1.sinkgroups.g1.sinks = k1
//
// The result is an Agent holding one Component per listed source, channel and
// sink, each with its properties in a Props, and the sink groups. Types are
// kept as written: mapping Flume's aliases and class names to
// implementations is the agent's job. Every structural problem is collected
// in one *Problems, returned as the error together with the partial Agent,
// so that a caller such as `sluice validate` can go on to build the
// components and report their problems (which they add to the same
// Problems through their Props) all at once.
//
// Props (props.go) is what a component constructor reads its settings
// through; Problems (problems.go) prints problems as FILE:LINE: key: message.
package config

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Component kinds.
const (
	KindSource  = "source"
	KindChannel = "channel"
	KindSink    = "sink"
)

// Agent is the configuration of one agent.
type Agent struct {
	File string
	Name string

	// The components in the order their list key names them. A listed
	// component without a type is reported and left out.
	Sources    []*Component
	Channels   []*Component
	Sinks      []*Component
	SinkGroups []*SinkGroup

	// Problems holds every problem found so far. All the Props of the
	// agent record theirs here, so the problems of component constructors
	// and of Props.Unused join the structural ones.
	Problems *Problems
}

// Component is one source, channel or sink.
type Component struct {
	Kind     string // KindSource, KindChannel or KindSink
	Name     string
	Type     string // as written: a Flume alias or a Java class name
	TypeLine int

	// Props holds all the component's keys, relative to its prefix (such
	// as "a1.sources.r1."), including type, channels, channel, selector.*
	// and interceptors.*. The keys the loader handles (type, channels,
	// channel, interceptors, selector.type, interceptors.NAME.type) are
	// already marked used; the agent calls Props.Unused after the
	// constructor ran.
	Props *Props

	Channels     []string       // a source's channels, in order
	Channel      string         // a sink's channel
	Selector     *Props         // a source's Props.Sub("selector."); read "type" for the kind
	Interceptors []*Interceptor // a source's interceptors, in order; one without a type is reported and left out
}

// Interceptor is one interceptor of a source.
type Interceptor struct {
	Name  string
	Type  string // as written
	Props *Props // the source's Props.Sub("interceptors.NAME.")
}

// SinkGroup is one sink group: sinks that share one sink processor.
type SinkGroup struct {
	Name  string
	Sinks []string
	// Processor holds the keys below "a1.sinkgroups.NAME.processor.";
	// "type" (default, failover, load_balance or a class name) is marked
	// used already.
	Processor *Props
	Line      int // line of the group's sinks key
}

// Fingerprint returns a string that changes exactly when the component's
// type or any of its properties changes (after substitution), so that a
// reload can keep the components whose configuration did not change. Lines
// do not count.
func (c *Component) Fingerprint() string {
	var b strings.Builder
	b.WriteString(c.Kind)
	b.WriteByte(' ')
	b.WriteString(strconv.Quote(c.Type))
	writeProps(&b, c.Props)
	return b.String()
}

// Fingerprint returns a string that changes exactly when the group's sinks
// or processor properties change.
func (g *SinkGroup) Fingerprint() string {
	var b strings.Builder
	b.WriteString("sinkgroup ")
	b.WriteString(strconv.Quote(strings.Join(g.Sinks, " ")))
	writeProps(&b, g.Processor)
	return b.String()
}

func writeProps(b *strings.Builder, p *Props) {
	if p == nil {
		return
	}
	keys := make([]string, 0, len(p.vals))
	for k := range p.vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteByte('\n')
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(p.vals[k].Text))
	}
}

// Load reads the configuration of agent agentName from file. sys holds the
// system properties given on the command line (-DNAME=value), for ${sys:X};
// ${env:X} reads the process environment.
//
// When the configuration has problems, Load returns what it could build
// together with a *Problems error listing them all. Other errors (the file
// cannot be read) come with a nil Agent.
func Load(file, agentName string, sys map[string]string) (*Agent, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return LoadReader(file, f, agentName, Lookup{Sys: sys})
}

// LoadReader is Load reading from r; file names it in problems.
func LoadReader(file string, r io.Reader, agentName string, lk Lookup) (*Agent, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", file, err)
	}
	probs := &Problems{}
	entries := parseProperties(file, data, probs)
	l := &loader{file: file, name: agentName, prefix: agentName + ".", lk: lk, probs: probs}
	a := l.load(entries)
	return a, probs.Err()
}

// The key parts Flume's grammar knows below "a1.".
const (
	partSources       = "sources"
	partChannels      = "channels"
	partSinks         = "sinks"
	partSinkGroups    = "sinkgroups"
	partConfigFilters = "configfilters"
)

var listParts = []string{partSources, partChannels, partSinks, partSinkGroups}

// compKeys are the keys of one component (or interceptor), relative to its
// prefix.
type compKeys struct {
	vals  map[string]Value
	first string // the key on the lowest line
}

func (c *compKeys) add(key string, v Value) {
	if c.vals == nil {
		c.vals = map[string]Value{}
	}
	if f, ok := c.vals[c.first]; len(c.vals) == 0 || !ok || v.Line < f.Line {
		c.first = key
	}
	c.vals[key] = v
}

type loader struct {
	file, name, prefix string
	lk                 Lookup
	probs              *Problems

	lists map[string]Value                // "sources" -> "r1 r2"
	comps map[string]map[string]*compKeys // "sources" -> "r1" -> keys

	channelSet map[string]bool // every listed channel
	usedChan   map[string]bool
}

func (l *loader) errorf(line int, key, format string, args ...any) {
	l.probs.Add(l.file, line, key, format, args...)
}

func (l *loader) load(entries []Entry) *Agent {
	a := &Agent{File: l.file, Name: l.name, Problems: l.probs}
	l.lists = map[string]Value{}
	l.comps = map[string]map[string]*compKeys{}

	agents := map[string]bool{}
	mine := 0
	for _, e := range entries {
		// Flume trims keys and values (String.trim) and ignores empty values.
		key := javaTrim(e.Key)
		if !strings.HasPrefix(key, l.prefix) {
			if i := strings.IndexByte(key, '.'); i > 0 {
				agents[key[:i]] = true
			}
			continue
		}
		mine++
		val, msgs := l.lk.Substitute(e.Value)
		for _, m := range msgs {
			l.errorf(e.Line, key, "%s", m)
		}
		val = javaTrim(val)
		if val == "" {
			continue
		}
		l.classify(key, key[len(l.prefix):], Value{Text: val, Line: e.Line})
	}
	if mine == 0 {
		msg := fmt.Sprintf("no property starts with %q", l.prefix)
		if len(agents) > 0 {
			names := make([]string, 0, len(agents))
			for n := range agents {
				names = append(names, n)
			}
			sort.Strings(names)
			msg += fmt.Sprintf("; this file configures %s (choose one with -n)", strings.Join(names, ", "))
		}
		l.errorf(0, l.name, "%s", msg)
		return a
	}
	missing := func(part string) {
		if _, ok := l.lists[part]; !ok {
			l.errorf(0, l.prefix+part, "the agent has no %s; list them, as in %s%s = %s1",
				part, l.prefix, part, map[string]string{partSources: "r", partChannels: "c", partSinks: "k"}[part])
		}
	}
	missing(partChannels)

	l.channelSet = map[string]bool{}
	l.usedChan = map[string]bool{}
	for _, n := range l.listed(partChannels) {
		l.channelSet[n] = true
	}
	for _, n := range l.listed(partChannels) {
		if c := l.component(KindChannel, partChannels, n); c != nil {
			a.Channels = append(a.Channels, c)
		}
	}
	// Events may enter or leave through a Kafka channel shared with other
	// agents, so with Kafka channels only an agent may lack sources or sinks
	// (Flume documents both set-ups); any other agent needs both.
	if !kafkaChannelsOnly(a.Channels) {
		missing(partSources)
		missing(partSinks)
	}
	for _, n := range l.listed(partSources) {
		if c := l.component(KindSource, partSources, n); c != nil {
			a.Sources = append(a.Sources, c)
		}
	}
	for _, n := range l.listed(partSinks) {
		if c := l.component(KindSink, partSinks, n); c != nil {
			a.Sinks = append(a.Sinks, c)
		}
	}
	a.SinkGroups = l.sinkGroups()
	l.unlisted(partSources, "source")
	l.unlisted(partChannels, "channel")
	l.unlisted(partSinks, "sink")
	l.unlisted(partSinkGroups, "sink group")

	if v, ok := l.lists[partChannels]; ok {
		for _, n := range l.listed(partChannels) {
			if !l.usedChan[n] {
				l.errorf(v.Line, l.prefix+partChannels,
					"channel %s is not used by any source or sink; connect it or remove it from %s%s", n, l.prefix, partChannels)
			}
		}
	}
	return a
}

// classify files one property of the agent under its list or component, or
// records a problem when it fits no part of the grammar.
func (l *loader) classify(key, rest string, v Value) {
	if slices.Contains(listParts, rest) {
		l.lists[rest] = v
		return
	}
	if rest == partConfigFilters || strings.HasPrefix(rest, partConfigFilters+".") {
		l.errorf(v.Line, key, "config filters are not supported; use ${env:NAME}, ${sys:NAME} or ${NAME} in values instead")
		return
	}
	for _, part := range listParts {
		after, ok := strings.CutPrefix(rest, part+".")
		if !ok {
			continue
		}
		name, prop, ok := strings.Cut(after, ".")
		if !ok || name == "" || prop == "" {
			l.errorf(v.Line, key, "not a property of a component; write %s%s.NAME.PROPERTY", l.prefix, part)
			return
		}
		m := l.comps[part]
		if m == nil {
			m = map[string]*compKeys{}
			l.comps[part] = m
		}
		ck := m[name]
		if ck == nil {
			ck = &compKeys{}
			m[name] = ck
		}
		ck.add(prop, v)
		return
	}
	msg := fmt.Sprintf("unknown key; an agent has %[1]ssources, %[1]schannels, %[1]ssinks, %[1]ssinkgroups and their components' %[1]sKIND.NAME.PROPERTY", l.prefix)
	first, tail, _ := strings.Cut(rest, ".")
	best, bestD := "", 3
	for _, part := range listParts {
		if d := editDistance(strings.ToLower(first), part); d < bestD {
			best, bestD = part, d
		}
	}
	if best != "" {
		s := l.prefix + best
		if tail != "" {
			s += "." + tail
		}
		msg = fmt.Sprintf("unknown key; did you mean %s?", s)
	}
	l.errorf(v.Line, key, "%s", msg)
}

// listed returns the names in list key part, without duplicates.
func (l *loader) listed(part string) []string {
	v, ok := l.lists[part]
	if !ok {
		return nil
	}
	return uniq(javaFields(v.Text))
}

// component builds the listed component name of kind, or returns nil when
// it has no type.
func (l *loader) component(kind, part, name string) *Component {
	prefix := l.prefix + part + "." + name + "."
	ck := l.comps[part][name]
	if ck == nil {
		ck = &compKeys{}
	}
	line := l.lists[part].Line
	if ck.first != "" {
		line = ck.vals[ck.first].Line
	}
	tv, hasType := ck.vals["type"]
	if hasType {
		line = tv.Line
	}
	p := NewProps(l.file, prefix, line, ck.vals, l.probs)
	c := &Component{Kind: kind, Name: name, Type: tv.Text, TypeLine: tv.Line, Props: p}
	if !hasType {
		l.errorf(line, prefix+"type", "missing required property; set %stype", prefix)
	}
	p.MarkUsed("type")
	switch kind {
	case KindSource:
		l.sourceChannels(c)
		c.Selector = p.Sub("selector.")
		c.Selector.MarkUsed("type")
		l.selectorChannels(c)
		l.interceptors(c)
	case KindSink:
		l.sinkChannel(c)
	}
	if !hasType {
		return nil
	}
	return c
}

// checkChannel records a problem when a component refers to a channel that
// is not listed, and otherwise notes the channel used.
func (l *loader) checkChannel(p *Props, key, ch string) bool {
	if !l.channelSet[ch] {
		l.errorf(p.LineOf(key), p.Full(key), "channel %s is not defined; add it to %s%s", ch, l.prefix, partChannels)
		return false
	}
	l.usedChan[ch] = true
	return true
}

func (l *loader) sourceChannels(c *Component) {
	p := c.Props
	p.MarkUsed("channels")
	v, ok := p.vals["channels"]
	if !ok {
		l.errorf(p.Line, p.Full("channels"), "missing required property; set %s", p.Full("channels"))
		return
	}
	c.Channels = uniq(javaFields(v.Text))
	for _, ch := range c.Channels {
		l.checkChannel(p, "channels", ch)
	}
}

func (l *loader) sinkChannel(c *Component) {
	p := c.Props
	p.MarkUsed("channel")
	v, ok := p.vals["channel"]
	if !ok {
		l.errorf(p.Line, p.Full("channel"), "missing required property; set %s", p.Full("channel"))
		return
	}
	chs := javaFields(v.Text)
	if len(chs) != 1 {
		l.errorf(v.Line, p.Full("channel"), "a sink takes from exactly one channel; %q names %d", v.Text, len(chs))
		for _, ch := range chs {
			if l.channelSet[ch] {
				l.usedChan[ch] = true
			}
		}
		return
	}
	c.Channel = chs[0]
	l.checkChannel(p, "channel", c.Channel)
}

// selectorChannels checks the channels named by a replicating or
// multiplexing selector: each must be one of the source's channels.
func (l *loader) selectorChannels(c *Component) {
	p := c.Props
	switch strings.ToLower(p.vals["selector.type"].Text) {
	case "", "replicating", "org.apache.flume.channel.replicatingchannelselector",
		"multiplexing", "org.apache.flume.channel.multiplexingchannelselector":
	default:
		return // other selectors name no channels
	}
	var keys []string
	for k := range p.vals {
		if k == "selector.default" || k == "selector.optional" ||
			strings.HasPrefix(k, "selector.optional.") || strings.HasPrefix(k, "selector.mapping.") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	mine := map[string]bool{}
	for _, ch := range c.Channels {
		mine[ch] = true
	}
	for _, k := range keys {
		for _, ch := range javaFields(p.vals[k].Text) {
			if !l.checkChannel(p, k, ch) {
				continue
			}
			if len(mine) > 0 && !mine[ch] {
				l.errorf(p.LineOf(k), p.Full(k), "channel %s is not one of %s; a selector chooses among its source's channels",
					ch, p.Full("channels"))
			}
		}
	}
}

func (l *loader) interceptors(c *Component) {
	p := c.Props
	p.MarkUsed("interceptors")
	listLine := p.LineOf("interceptors")
	names := uniq(javaFields(p.vals["interceptors"].Text))
	listed := map[string]bool{}
	for _, n := range names {
		listed[n] = true
		sub := p.Sub("interceptors." + n + ".")
		t, ok := p.vals["interceptors."+n+".type"]
		if ok {
			sub.Line = t.Line
		} else {
			sub.Line = listLine
			l.errorf(listLine, sub.Full("type"), "missing required property; set %s", sub.Full("type"))
		}
		sub.MarkUsed("type")
		if ok {
			c.Interceptors = append(c.Interceptors, &Interceptor{Name: n, Type: t.Text, Props: sub})
		}
	}
	// Keys of interceptors that are not listed.
	unlisted := map[string]*compKeys{}
	for k, v := range p.vals {
		after, ok := strings.CutPrefix(k, "interceptors.")
		if !ok {
			continue
		}
		n, prop, ok := strings.Cut(after, ".")
		if !ok || n == "" || listed[n] {
			continue
		}
		if unlisted[n] == nil {
			unlisted[n] = &compKeys{}
		}
		unlisted[n].add(prop, v)
		p.MarkUsed(k)
	}
	for _, n := range sortedKeys(unlisted) {
		ck := unlisted[n]
		key := "interceptors." + n + "." + ck.first
		l.errorf(ck.vals[ck.first].Line, p.Full(key), "interceptor %s is not listed in %s", n, p.Full("interceptors"))
	}
}

func (l *loader) sinkGroups() []*SinkGroup {
	var out []*SinkGroup
	sinkSet := map[string]bool{}
	for _, s := range l.listed(partSinks) {
		sinkSet[s] = true
	}
	groupOf := map[string]string{}
	for _, name := range l.listed(partSinkGroups) {
		prefix := l.prefix + partSinkGroups + "." + name + "."
		ck := l.comps[partSinkGroups][name]
		if ck == nil {
			ck = &compKeys{}
		}
		g := &SinkGroup{Name: name, Line: l.lists[partSinkGroups].Line}
		if ck.first != "" {
			g.Line = ck.vals[ck.first].Line
		}
		pvals := map[string]Value{}
		for _, k := range sortedKeys(ck.vals) {
			v := ck.vals[k]
			if pk, ok := strings.CutPrefix(k, "processor."); ok {
				pvals[pk] = v
			} else if k != "sinks" {
				l.errorf(v.Line, prefix+k, "unknown property; a sink group has %ssinks and %sprocessor.*", prefix, prefix)
			}
		}
		sv, ok := ck.vals["sinks"]
		if ok {
			g.Line = sv.Line
			g.Sinks = uniq(javaFields(sv.Text))
		} else {
			l.errorf(g.Line, prefix+"sinks", "missing required property; set %ssinks", prefix)
		}
		pline := g.Line
		if tv, ok := pvals["type"]; ok {
			pline = tv.Line
		}
		g.Processor = NewProps(l.file, prefix+"processor.", pline, pvals, l.probs)
		g.Processor.MarkUsed("type")
		for _, s := range g.Sinks {
			switch {
			case !sinkSet[s]:
				l.errorf(sv.Line, prefix+"sinks", "sink %s is not defined; add it to %s%s", s, l.prefix, partSinks)
			case groupOf[s] != "":
				l.errorf(sv.Line, prefix+"sinks", "sink %s is already in sink group %s; a sink can be in only one group", s, groupOf[s])
			default:
				groupOf[s] = name
			}
		}
		out = append(out, g)
	}
	return out
}

// unlisted reports the components that have keys but are not in their list.
func (l *loader) unlisted(part, what string) {
	listed := map[string]bool{}
	for _, n := range l.listed(part) {
		listed[n] = true
	}
	for _, n := range sortedKeys(l.comps[part]) {
		if listed[n] {
			continue
		}
		ck := l.comps[part][n]
		key := l.prefix + part + "." + n + "." + ck.first
		l.errorf(ck.vals[ck.first].Line, key, "%s %s is not listed in %s%s", what, n, l.prefix, part)
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

func uniq(s []string) []string {
	var out []string
	seen := make(map[string]bool, len(s))
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// javaTrim trims what Java's String.trim trims: every char up to ' '.
func javaTrim(s string) string {
	i, j := 0, len(s)
	for i < j && s[i] <= ' ' {
		i++
	}
	for j > i && s[j-1] <= ' ' {
		j--
	}
	return s[i:j]
}

// javaFields splits s as Java's s.split("\\s+") splits a trimmed string.
func javaFields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		switch r {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			return true
		}
		return false
	})
}

// kafkaChannelsOnly reports whether the agent has channels and every one is
// Flume's Kafka channel (by alias or class name).
func kafkaChannelsOnly(chans []*Component) bool {
	for _, c := range chans {
		t := strings.ToLower(c.Type)
		if t != "kafka" && t != "org.apache.flume.channel.kafka.kafkachannel" {
			return false
		}
	}
	return len(chans) > 0
}
