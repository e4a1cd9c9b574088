package flow

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
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
func NewSelector(p *config.Props, channels map[string]Channel, sourceChannels []string) (Selector, error) {
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
		p.Errorf("type", "unknown selector type %q; use replicating, multiplexing or load_balancing (custom selector classes are not supported)", typ)
		canon = SelectorReplicating
	}
	switch canon {
	case SelectorReplicating:
		s.buildReplicating(p)
	case SelectorMultiplexing:
		s.buildMultiplexing(p)
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
}

func (s *selector) Channels() []SelectedChannel { return s.chans }

// spreads reports whether the selector sends the events of a batch to
// different channels by design (load_balancing), so the processor groups
// them without first checking whether they all go the same way: each event
// is then routed exactly once, and round robin is exact.
func (s *selector) spreads() bool { return s.pick != nil }

func (s *selector) Route(e *event.Event) (required, optional []int) {
	if s.pick != nil {
		return s.one[s.pick()], nil
	}
	if s.header == "" {
		return s.all.required, s.all.optional
	}
	v := e.Headers[s.header]
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
