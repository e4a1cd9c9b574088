package flow

import (
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/eventexpr"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

// SelectedChannel is one channel a selector may choose.
type SelectedChannel struct {
	Name    string
	Channel Channel
}

// Selector decides which of a source's channels get each event, as Flume's
// channel selectors do. A selector is safe for concurrent use; only a
// load_balancing one changes after construction (its round-robin position).
type Selector interface {
	// Channels lists every channel the selector may choose, in a fixed
	// order; Route's indexes refer to it.
	Channels() []SelectedChannel
	// Route returns the indexes of the required channels of e (their
	// failure fails the put) and of its optional channels (their failure is
	// counted and logged). The slices belong to the selector and must not be
	// changed. A selector that routes every event alike returns the same
	// slices for every event, which lets the ChannelProcessor put a batch
	// without grouping it.
	Route(e *event.Event) (required, optional []int)
}

// Selector type names, with Flume's class names as aliases.
const (
	SelectorReplicating   = "replicating"
	SelectorMultiplexing  = "multiplexing"
	SelectorLoadBalancing = "load_balancing"
	// SelectorExpression is sluice's own: channels chosen by expressions
	// over the event (docs/transforms.md).
	SelectorExpression = "expression"
)

// DefaultSelectorHeader is the header a multiplexing selector reads when
// selector.header is not set.
const DefaultSelectorHeader = "flume.selector.header"

var selectorAliases = map[string]string{
	"replicating":  SelectorReplicating,
	"multiplexing": SelectorMultiplexing,
	"org.apache.flume.channel.replicatingchannelselector":  SelectorReplicating,
	"org.apache.flume.channel.multiplexingchannelselector": SelectorMultiplexing,
	"load_balancing": SelectorLoadBalancing,
	"org.apache.flume.channel.loadbalancingchannelselector": SelectorLoadBalancing,
	"expression": SelectorExpression,
}

// NewSelector builds the channel selector of a source from its selector.*
// properties p (nil means none set: replicating to every channel). channels
// holds the Channel of each name in sourceChannels, the source's channel
// list. Problems go to p; the returned selector is usable whenever p has
// none.
//
// replicating (default): every event goes to every channel;
// selector.optional lists channels whose failures are ignored.
//
// multiplexing: the value of header selector.header (default
// flume.selector.header) picks the required channels from
// selector.mapping.<value> and the optional ones from
// selector.optional.<value>; a missing, empty or unmapped value goes to
// selector.default. A channel both required and optional for a value is
// required. An event with no channel at all (no default set) is counted as
// dropped with reason "no_channel".
//
// load_balancing (Flume 1.10): each event goes to one of the channels,
// picked by selector.policy: round_robin (default) or random. There are no
// optional channels.
//
// expression (sluice's own): selector.when.<channel> = EXPR sends the
// events for which EXPR is true to that channel (an event may go to
// several); selector.optional.<channel> = EXPR does the same for a channel
// whose failure does not fail the put; selector.default lists the
// channels of the events no when-expression took. A channel both required
// and optional for an event is required. An expression that fails on an
// event counts as false for it, and is counted and logged.
func NewSelector(p *config.Props, channels map[string]Channel, sourceChannels []string) (Selector, error) {
	return NewSelectorEnv(Env{}, p, channels, sourceChannels)
}

// NewSelectorEnv is NewSelector for a selector whose expressions report
// their failures in env's metrics and log (only the expression selector's
// do).
func NewSelectorEnv(env Env, p *config.Props, channels map[string]Channel, sourceChannels []string) (Selector, error) {
	if p == nil {
		p = config.FromMap("selector.", nil)
	}
	s := &selector{index: map[string]int{}}
	for _, name := range sourceChannels {
		if _, dup := s.index[name]; dup {
			continue
		}
		ch, ok := channels[name]
		if !ok {
			return nil, fmt.Errorf("selector: channel %s of the source is not defined", name)
		}
		s.index[name] = len(s.chans)
		s.chans = append(s.chans, SelectedChannel{Name: name, Channel: ch})
	}
	typ := strings.TrimSpace(p.String("type", SelectorReplicating))
	canon, ok := selectorAliases[strings.ToLower(typ)]
	if !ok {
		p.Errorf("type", "unknown selector type %q; use replicating, multiplexing, load_balancing or expression (custom selector classes are not supported; an expression selector routes by any rule over the event)", typ)
		canon = SelectorReplicating
	}
	switch canon {
	case SelectorReplicating:
		s.buildReplicating(p)
	case SelectorMultiplexing:
		s.buildMultiplexing(p)
	case SelectorExpression:
		s.buildExpression(env, p)
	default:
		s.buildLoadBalancing(p)
	}
	return s, nil
}

type route struct{ required, optional []int }

type selector struct {
	chans []SelectedChannel
	index map[string]int

	header string // "" for replicating
	all    route
	routes map[string]route // multiplexing: by header value
	def    route            // multiplexing: missing, empty or unmapped value

	pick func() int // load_balancing: the channel of the next event; nil otherwise
	one  [][]int    // load_balancing: one[i] routes to channel i alone
	next atomic.Uint64

	exprs *exprRoutes // expression; nil otherwise
}

func (s *selector) Channels() []SelectedChannel { return s.chans }

// spreads reports whether the selector sends the events of a batch to
// different channels by design (load_balancing), so the processor groups
// them without first checking whether they all go the same way: each event
// is then routed exactly once, and round robin is exact.
func (s *selector) spreads() bool { return s.pick != nil || s.exprs != nil }

func (s *selector) Route(e *event.Event) (required, optional []int) {
	if s.pick != nil {
		return s.one[s.pick()], nil
	}
	if s.exprs != nil {
		return s.exprs.route(e)
	}
	if s.header == "" {
		return s.all.required, s.all.optional
	}
	v := e.Headers.Value(s.header)
	if v != "" {
		if r, ok := s.routes[v]; ok {
			return r.required, r.optional
		}
	}
	return s.def.required, s.def.optional
}

// indexes resolves the channel names of key to indexes, reporting names
// that are not channels of the source.
func (s *selector) indexes(p *config.Props, key string) []int {
	var out []int
	for _, name := range p.Fields(key) {
		i, ok := s.index[name]
		if !ok {
			p.Errorf(key, "channel %q is not one of the source's channels (%s)", name, s.names())
			continue
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

func (s *selector) names() string {
	var n []string
	for _, c := range s.chans {
		n = append(n, c.Name)
	}
	return strings.Join(n, " ")
}

func (s *selector) buildReplicating(p *config.Props) {
	opt := s.indexes(p, "optional")
	for i := range s.chans {
		if slices.Contains(opt, i) {
			s.all.optional = append(s.all.optional, i)
		} else {
			s.all.required = append(s.all.required, i)
		}
	}
}

func (s *selector) buildMultiplexing(p *config.Props) {
	s.header = p.String("header", DefaultSelectorHeader)
	if strings.TrimSpace(s.header) == "" {
		p.Errorf("header", "the header name is empty; set the header whose value picks the channels")
		s.header = DefaultSelectorHeader
	}
	s.routes = map[string]route{}
	s.def.required = s.indexes(p, "default")
	for _, k := range p.Keys("mapping.") {
		v := strings.TrimPrefix(k, "mapping.")
		r := s.routes[v]
		r.required = s.indexes(p, k)
		if len(r.required) == 0 {
			// Flume: a value mapped to nothing required goes to the defaults.
			r.required = s.def.required
		}
		s.routes[v] = r
	}
	for _, k := range p.Keys("optional.") {
		v := strings.TrimPrefix(k, "optional.")
		r, mapped := s.routes[v]
		if !mapped {
			r.required = s.def.required
		}
		for _, i := range s.indexes(p, k) {
			if !slices.Contains(r.required, i) {
				r.optional = append(r.optional, i)
			}
		}
		s.routes[v] = r
	}
	if p.Has("optional") {
		p.Errorf("optional", "a multiplexing selector takes optional channels per header value: use selector.optional.<value>")
	}
}

func (s *selector) buildLoadBalancing(p *config.Props) {
	n := len(s.chans)
	if n == 0 {
		return // no channel: every event is counted as dropped (no_channel)
	}
	for i := range n {
		s.one = append(s.one, []int{i})
	}
	switch policy := strings.TrimSpace(p.String("policy", "round_robin")); strings.ToLower(policy) {
	case "round_robin":
		s.pick = func() int { return int((s.next.Add(1) - 1) % uint64(n)) }
	case "random":
		s.pick = func() int { return rand.IntN(n) }
	default:
		p.Errorf("policy", "%q is not a policy of the load_balancing selector; use round_robin or random", policy)
		s.pick = func() int { return 0 }
	}
	if p.Has("optional") {
		p.Warnf("optional", "a load_balancing selector has no optional channels (as in Flume); ignored")
	}
}

// exprRoutes is the state of an expression selector.
type exprRoutes struct {
	source   string
	c        *eventexpr.Compiler
	when     []exprRule // required channels
	optional []exprRule
	def      uint64 // the default channels, as a bit set of indexes
	log      *slog.Logger
	throttle *logthrottle.Throttle
	// routes caches the route of each pair of channel sets, so that the
	// slices Route returns are shared (the processor compares them by
	// address) and built once.
	routes sync.Map // [2]uint64 -> *route
}

type exprRule struct {
	key  string // such as "when.c1", for metrics and logs
	ch   int
	prog *eventexpr.Program
	errs prometheus.Counter
}

// maxExprChannels is how many channels an expression selector can choose
// among (the width of its channel sets).
const maxExprChannels = 64

func (s *selector) buildExpression(env Env, p *config.Props) {
	x := &exprRoutes{
		source:   env.Name,
		c:        eventexpr.CompilerFromProps(p),
		log:      env.Log(),
		throttle: logthrottle.New(10*time.Second, 1),
	}
	if len(s.chans) > maxExprChannels {
		p.Errorf("type", "an expression selector chooses among at most %d channels; this source has %d", maxExprChannels, len(s.chans))
		return
	}
	reg := env.Registry()
	rules := func(prefix string) []exprRule {
		var out []exprRule
		for _, k := range p.Keys(prefix) {
			name := strings.TrimPrefix(k, prefix)
			i, ok := s.index[name]
			if !ok {
				p.Errorf(k, "%q is not one of the source's channels (%s); the key names the channel that takes the events for which the expression is true", name, s.names())
				p.MarkUsed(k)
				continue
			}
			if prog := x.c.CompileKey(p, k, eventexpr.Bool); prog != nil {
				out = append(out, exprRule{key: k, ch: i, prog: prog, errs: reg.ExpressionErrors(env.Name, k)})
			}
		}
		return out
	}
	x.when = rules("when.")
	x.optional = rules("optional.")
	for _, i := range s.indexes(p, "default") {
		x.def |= 1 << i
	}
	if len(p.Keys("when.")) == 0 && len(p.Keys("optional.")) == 0 {
		p.Errorf("type", "an expression selector needs selector.when.<channel> = EXPR for at least one channel; see docs/transforms.md")
	}
	s.exprs = x
}

// route evaluates the selector's expressions on e.
func (x *exprRoutes) route(e *event.Event) (required, optional []int) {
	st := x.c.Begin(e)
	var req, opt uint64
	for i := range x.when {
		if req&(1<<x.when[i].ch) == 0 && x.eval(&x.when[i], st) {
			req |= 1 << x.when[i].ch
		}
	}
	if req == 0 {
		req = x.def
	}
	for i := range x.optional {
		r := &x.optional[i]
		if (req|opt)&(1<<r.ch) == 0 && x.eval(r, st) {
			opt |= 1 << r.ch
		}
	}
	st.Release()
	key := [2]uint64{req, opt}
	if r, ok := x.routes.Load(key); ok {
		rt := r.(*route)
		return rt.required, rt.optional
	}
	rt := &route{required: setIndexes(req), optional: setIndexes(opt)}
	r, _ := x.routes.LoadOrStore(key, rt)
	rt = r.(*route)
	return rt.required, rt.optional
}

// eval runs one rule; a failure counts as false, and is counted and logged.
func (x *exprRoutes) eval(r *exprRule, st *eventexpr.State) bool {
	ok, err := r.prog.EvalBool(st)
	if err != nil {
		r.errs.Inc()
		x.throttle.Log(x.log, slog.LevelWarn, r.key, "selector expression failed; it counts as false for this event",
			"selector", x.source, "rule", r.key, "err", err.Error())
		return false
	}
	return ok
}

// setIndexes lists the bits set in b, lowest first.
func setIndexes(b uint64) []int {
	var out []int
	for b != 0 {
		i := bits.TrailingZeros64(b)
		out = append(out, i)
		b &^= 1 << i
	}
	return out
}
