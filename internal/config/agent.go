// Package config reads a sluice agent's configuration: Flume's agent
// properties files, read as java.util.Properties reads them.
//
// LoadSources parses one or more sources (files or URIs, read by Fetcher;
// a key of a later source overrides an earlier one), keeps the properties
// of one agent (keys starting with "NAME."), expands ${env:X}, ${sys:X},
// ${X} and config filter references ${f1['key']} in their values (Lookup,
// filters.go), and checks the structure Flume's grammar gives them:
//
//	a1.sources = r1           a1.sources.r1.type = netcat
//	a1.channels = c1          a1.sources.r1.channels = c1
//	a1.sinks = k1             a1.sinks.k1.channel = c1
//	a1.sinkgroups = g1        a1.sinkgroups.g1.sinks = k1
//	a1.configfilters = f1     a1.configfilters.f1.type = env
//
// The result is an Agent holding one Component per listed source, channel and
// sink, each with its properties in a Props, and the sink groups. Types are
// kept as written: mapping Flume's aliases and class names to
// implementations is the agent's job. Every problem is collected in one
// *Problems with a severity: errors refuse the configuration; warnings are
// what Flume silently ignores and sluice says it ignores (a key nothing
// reads, a key set twice, a component not listed); notes are Flume settings
// sluice deliberately does without. Load returns the errors as its error
// together with the partial Agent, so that a caller such as `sluice
// validate` can go on to build the components and report their problems
// (which they add to the same Problems through their Props) all at once.
//
// Props (props.go) is what a component constructor reads its settings
// through; Problems (problems.go) prints problems as FILE:LINE: key: message.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/redact"
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

	// Files names every source the configuration was read from, in order
	// (File is the first).
	Files []string
}

// Secrets returns the values read through config filters, which must never
// be printed; the agent's logger replaces them.
func (a *Agent) Secrets() []string { return a.Problems.Secrets() }

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
	Line      int    // line of the group's sinks key
	File      string // file of the group's sinks key
}

// Fingerprint returns a hash (hex SHA-256) that changes exactly when the
// component's type or any of its properties changes (after substitution),
// so that a reload can keep the components whose configuration did not
// change. Lines do not count.
func (c *Component) Fingerprint() string {
	h := sha256.New()
	buf := append([]byte(c.Kind), ' ')
	h.Write(strconv.AppendQuote(buf, c.Type))
	writeProps(h, c.Props)
	return hex.EncodeToString(h.Sum(nil))
}

// Fingerprint returns a hash (hex SHA-256) that changes exactly when the
// group's sinks or processor properties change.
func (g *SinkGroup) Fingerprint() string {
	h := sha256.New()
	h.Write(strconv.AppendQuote([]byte("sinkgroup "), strings.Join(g.Sinks, " ")))
	writeProps(h, g.Processor)
	return hex.EncodeToString(h.Sum(nil))
}

// writeProps writes p's keys and values, sorted by key, to a fingerprint's
// hash: the hash, not the text, is kept, so a large component costs 64
// bytes, and a secret's value enters only as its own hash.
func writeProps(h hash.Hash, p *Props) {
	if p == nil {
		return
	}
	keys := make([]string, 0, len(p.vals))
	for k := range p.vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf []byte
	for _, k := range keys {
		buf = append(buf[:0], '\n')
		buf = strconv.AppendQuote(buf, k)
		buf = append(buf, '=')
		if v := p.vals[k]; v.Secret {
			sum := sha256.Sum256([]byte(v.Text))
			buf = append(buf, "secret:"...)
			buf = hex.AppendEncode(buf, sum[:])
		} else {
			buf = strconv.AppendQuote(buf, v.Text)
		}
		h.Write(buf)
	}
}

// Source is one configuration text and the name it is known by in
// problems (a file path or a URI).
type Source struct {
	Name string
	Data []byte
}

// Load reads the configuration of agent agentName from file. sys holds the
// system properties given on the command line (-DNAME=value), for ${sys:X};
// ${env:X} reads the process environment; external config filters run.
//
// When the configuration has errors, Load returns what it could build
// together with a *Problems error listing them all. Other errors (the file
// cannot be read) come with a nil Agent. Warnings and notes are in the
// Agent's Problems either way.
func Load(file, agentName string, sys map[string]string) (*Agent, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return LoadSources([]Source{{Name: file, Data: data}}, agentName, Lookup{Sys: sys, Exec: RunCommand})
}

// LoadReader is Load reading from r with lk; file names it in problems.
func LoadReader(file string, r io.Reader, agentName string, lk Lookup) (*Agent, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", file, err)
	}
	return LoadSources([]Source{{Name: file, Data: data}}, agentName, lk)
}

// LoadSources reads the configuration of agent agentName from several
// sources, as Flume 1.10+ reads several -f files or --conf-uri URIs: a key
// set in a later source overrides the earlier one, and each value keeps the
// name and line of the source that set it, so that its problems name that
// source. There must be at least one source.
func LoadSources(srcs []Source, agentName string, lk Lookup) (*Agent, error) {
	return LoadSourcesInto(&Problems{}, srcs, agentName, lk)
}

// LoadSourcesInto is LoadSources recording into probs (so that the caller
// sets how many problems it keeps).
func LoadSourcesInto(probs *Problems, srcs []Source, agentName string, lk Lookup) (*Agent, error) {
	if len(srcs) == 0 {
		return nil, errors.New("config: no configuration source")
	}
	var all []fileEntry
	names := make([]string, len(srcs))
	for i, src := range srcs {
		names[i] = src.Name
		for _, e := range parseAll(src.Name, src.Data, probs) {
			all = append(all, fileEntry{Entry: e, file: src.Name})
		}
	}
	lk.agent = agentName
	lk.props = map[string]string{}
	for _, e := range all {
		lk.props[javaTrim(e.Key)] = e.Value
	}
	l := &loader{file: srcs[0].Name, name: agentName, prefix: agentName + ".", lk: lk, probs: probs}
	a := l.load(all)
	a.Files = names
	return a, probs.Err()
}

// fileEntry is a property with the source it was read from.
type fileEntry struct {
	Entry
	file string
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
	if f, ok := c.vals[c.first]; len(c.vals) == 0 || !ok || v.File == f.File && v.Line < f.Line {
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

// errorAt records an error about key at the file and line of v.
func (l *loader) errorAt(v Value, key, format string, args ...any) {
	l.probs.Add(l.fileOf(v), v.Line, key, format, args...)
}

// warnAt records a warning about key at the file and line of v.
func (l *loader) warnAt(v Value, key, format string, args ...any) {
	l.probs.Warn(l.fileOf(v), v.Line, key, format, args...)
}

func (l *loader) fileOf(v Value) string {
	if v.File != "" {
		return v.File
	}
	return l.file
}

// mine returns the properties of this agent, trimmed as Flume trims them,
// the last of each key winning as in Java (a key set twice in one source is
// a warning naming both lines; a later source overriding an earlier one is
// what several sources are for), and the names of the other agents seen.
func (l *loader) mine(entries []fileEntry) ([]fileEntry, map[string]bool) {
	agents := map[string]bool{}
	last := map[string]int{}
	var out []fileEntry
	for _, e := range entries {
		// Flume trims keys and values (String.trim) and ignores empty values.
		e.Key = javaTrim(e.Key)
		if !strings.HasPrefix(e.Key, l.prefix) {
			if i := strings.IndexByte(e.Key, '.'); i > 0 {
				agents[e.Key[:i]] = true
			}
			continue
		}
		if i, ok := last[e.Key]; ok {
			prev := out[i]
			if prev.file == e.file {
				l.probs.Warn(prev.file, prev.Line, e.Key, "ignored: set again on line %d, and the later value wins, as in Flume", e.Line)
			}
			out[i].Key = "" // overridden
		}
		last[e.Key] = len(out)
		out = append(out, e)
	}
	kept := out[:0]
	for _, e := range out {
		if e.Key != "" {
			kept = append(kept, e)
		}
	}
	return kept, agents
}

func (l *loader) load(entries []fileEntry) *Agent {
	a := &Agent{File: l.file, Name: l.name, Problems: l.probs}
	l.lists = map[string]Value{}
	l.comps = map[string]map[string]*compKeys{}

	mine, agents := l.mine(entries)
	if len(mine) == 0 {
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

	// Config filters first: the other values may refer to them. Their own
	// values take ${env:}/${sys:} references only.
	filterPrefix := l.prefix + partConfigFilters
	var filterList Value
	hasFilterList := false
	filterKeys := map[string]map[string]Value{}
	rest := mine[:0:0]
	for _, e := range mine {
		key := e.Key
		if key != filterPrefix && !strings.HasPrefix(key, filterPrefix+".") {
			rest = append(rest, e)
			continue
		}
		v, ok := l.value(e, Lookup{Sys: l.lk.Sys, Env: l.lk.Env, agent: l.lk.agent, props: l.lk.props})
		if !ok {
			continue
		}
		if key == filterPrefix {
			filterList, hasFilterList = v, true
			continue
		}
		name, prop, ok := strings.Cut(strings.TrimPrefix(key, filterPrefix+"."), ".")
		if !ok || name == "" || prop == "" {
			l.warnAt(v, key, "ignored: not a property of a config filter; write %s.NAME.PROPERTY", filterPrefix)
			continue
		}
		if filterKeys[name] == nil {
			filterKeys[name] = map[string]Value{}
		}
		filterKeys[name][prop] = v
	}
	l.lk.filters = l.buildFilters(filterList, hasFilterList, filterKeys)

	for _, e := range rest {
		if v, ok := l.value(e, l.lk); ok {
			l.classify(e.Key, e.Key[len(l.prefix):], v)
		}
	}
	if _, ok := l.lists[partChannels]; !ok {
		l.errorf(0, l.prefix+partChannels, "the agent has no channels; list them, as in %s%s = c1", l.prefix, partChannels)
	}

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
	// Flume runs an agent with channels and sinks but no sources (to drain
	// a durable channel after its source was removed), or sources but no
	// sinks (events enter a Kafka channel, or wait in a durable one); only
	// an agent with neither is refused.
	_, hasSources := l.lists[partSources]
	_, hasSinks := l.lists[partSinks]
	if !hasSources && !hasSinks && len(l.channelSet) > 0 {
		l.errorf(0, l.prefix+partSources, "the agent has neither sources nor sinks; list them, as in %ssources = r1 and %ssinks = k1", l.prefix, l.prefix)
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

	// A channel nothing uses is dropped with a warning, as Flume drops it:
	// a leftover file channel is then not opened, and its data stays on
	// disk for when something uses it again.
	if v, ok := l.lists[partChannels]; ok && (hasSources || hasSinks) {
		used := a.Channels[:0]
		for _, c := range a.Channels {
			if l.usedChan[c.Name] {
				used = append(used, c)
				continue
			}
			l.warnAt(v, l.prefix+partChannels,
				"ignored: channel %s is not used by any source or sink, so it is not started; connect it or remove it from %s%s", c.Name, l.prefix, partChannels)
		}
		a.Channels = used
	}
	return a
}

// value substitutes the references in e's value with lk and returns it
// trimmed; ok is false when the value is empty (Flume ignores the key).
// Its problems are recorded, and a value with an unresolved reference
// marks its key broken so that nothing derived from it is reported again.
func (l *loader) value(e fileEntry, lk Lookup) (Value, bool) {
	text, x := lk.substitute(e.Value)
	for _, m := range x.probs {
		l.probs.Add(e.file, e.Line, e.Key, "%s", m)
	}
	if len(x.probs) > 0 || x.quiet {
		l.probs.Broken(e.Key)
	}
	text = javaTrim(text)
	for _, s := range x.secrets {
		l.probs.Secret(s)
	}
	for _, s := range redact.URLPasswords(text) {
		l.probs.Secret(s)
	}
	return Value{Text: text, Line: e.Line, File: e.file, Secret: x.secret}, text != ""
}

// classify files one property of the agent under its list or component, or
// records a problem when it fits no part of the grammar.
func (l *loader) classify(key, rest string, v Value) {
	if slices.Contains(listParts, rest) {
		l.lists[rest] = v
		return
	}
	for _, part := range listParts {
		after, ok := strings.CutPrefix(rest, part+".")
		if !ok {
			continue
		}
		name, prop, ok := strings.Cut(after, ".")
		if !ok || name == "" || prop == "" {
			l.warnAt(v, key, "ignored: not a property of a component; write %s%s.NAME.PROPERTY", l.prefix, part)
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
	msg := fmt.Sprintf("ignored: sluice does not read it; an agent has %[1]ssources, %[1]schannels, %[1]ssinks, %[1]ssinkgroups, %[1]sconfigfilters and their components' %[1]sKIND.NAME.PROPERTY", l.prefix)
	first, tail, _ := strings.Cut(rest, ".")
	best, bestD := "", 3
	for _, part := range listParts {
		if d := EditDistance(strings.ToLower(first), part); d < bestD {
			best, bestD = part, d
		}
	}
	if best != "" {
		s := l.prefix + best
		if tail != "" {
			s += "." + tail
		}
		msg = fmt.Sprintf("ignored: sluice does not read it; did you mean %s?", s)
	}
	l.warnAt(v, key, "%s", msg)
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
	at := l.lists[part]
	if ck.first != "" {
		at = ck.vals[ck.first]
	}
	tv, hasType := ck.vals["type"]
	if hasType {
		at = tv
	}
	p := NewProps(l.fileOf(at), prefix, at.Line, ck.vals, l.probs)
	c := &Component{Kind: kind, Name: name, Type: tv.Text, TypeLine: tv.Line, Props: p}
	if !hasType {
		l.errorAt(at, prefix+"type", "missing required property; set %stype", prefix)
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
		p.Errorf(key, "channel %s is not defined; add it to %s%s", ch, l.prefix, partChannels)
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
		p.Errorf("channels", "missing required property; set %s", p.Full("channels"))
		return
	}
	if l.probs.IsBroken(p.Full("channels")) {
		l.allChannelsUsed() // which ones cannot be known
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
		p.Errorf("channel", "missing required property; set %s", p.Full("channel"))
		return
	}
	if l.probs.IsBroken(p.Full("channel")) {
		l.allChannelsUsed()
		return
	}
	chs := javaFields(v.Text)
	if len(chs) != 1 {
		p.Errorf("channel", "a sink takes from exactly one channel; %s names %d", show(v), len(chs))
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

// allChannelsUsed counts every channel used, for a component whose
// channel list could not be resolved: "not used" would be a second,
// derived problem.
func (l *loader) allChannelsUsed() {
	for ch := range l.channelSet {
		l.usedChan[ch] = true
	}
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
				p.Errorf(k, "channel %s is not one of %s; a selector chooses among its source's channels",
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
			l.probs.Add(p.FileOf("interceptors"), listLine, sub.Full("type"), "missing required property; set %s", sub.Full("type"))
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
		l.warnAt(ck.vals[ck.first], p.Full(key), "ignored: interceptor %s is not listed in %s", n, p.Full("interceptors"))
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
		at := l.lists[partSinkGroups]
		if ck.first != "" {
			at = ck.vals[ck.first]
		}
		g := &SinkGroup{Name: name, Line: at.Line}
		pvals := map[string]Value{}
		for _, k := range sortedKeys(ck.vals) {
			v := ck.vals[k]
			if pk, ok := strings.CutPrefix(k, "processor."); ok {
				pvals[pk] = v
			} else if k != "sinks" {
				l.warnAt(v, prefix+k, "ignored: sluice does not read it; a sink group has %ssinks and %sprocessor.*", prefix, prefix)
			}
		}
		sv, ok := ck.vals["sinks"]
		if ok {
			g.Line, at = sv.Line, sv
			g.Sinks = uniq(javaFields(sv.Text))
		} else {
			l.errorAt(at, prefix+"sinks", "missing required property; set %ssinks", prefix)
		}
		g.File = l.fileOf(at)
		pat := at
		if tv, ok := pvals["type"]; ok {
			pat = tv
		}
		g.Processor = NewProps(l.fileOf(pat), prefix+"processor.", pat.Line, pvals, l.probs)
		g.Processor.MarkUsed("type")
		for _, s := range g.Sinks {
			switch {
			case !sinkSet[s]:
				l.errorAt(sv, prefix+"sinks", "sink %s is not defined; add it to %s%s", s, l.prefix, partSinks)
			case groupOf[s] != "":
				l.errorAt(sv, prefix+"sinks", "sink %s is already in sink group %s; a sink can be in only one group", s, groupOf[s])
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
		l.warnAt(ck.vals[ck.first], key, "ignored: %s %s is not listed in %s%s", what, n, l.prefix, part)
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
