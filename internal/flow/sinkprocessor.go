package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

// Sink processor types, with Flume's class names as aliases.
const (
	ProcessorDefault     = "default"
	ProcessorFailover    = "failover"
	ProcessorLoadBalance = "load_balance"
)

var processorAliases = map[string]string{
	"default":      ProcessorDefault,
	"failover":     ProcessorFailover,
	"load_balance": ProcessorLoadBalance,
	"org.apache.flume.sink.defaultsinkprocessor":       ProcessorDefault,
	"org.apache.flume.sink.failoversinkprocessor":      ProcessorFailover,
	"org.apache.flume.sink.loadbalancingsinkprocessor": ProcessorLoadBalance,
}

// failurePenalty is Flume's base penalty: a failed sink sits out
// min(max, 2^fails × 1 s).
const failurePenalty = time.Second

// NewSinkProcessor builds the processor of a sink group from its
// processor.* properties p, over the group's sinks (names in the order
// listed) whose Sink values are in byName. The processor is itself a Sink
// for a SinkRunner. Its Start and Stop do not start or stop the member
// sinks; the agent does that for every sink.
//
//   - default: exactly one sink, run as is.
//   - failover: processor.priority.<sink> (higher first; unset priorities
//     follow list order below the set ones, as -1, -2, ...),
//     processor.maxpenalty (30000 ms). The highest-priority sink not sitting
//     out a penalty processes; on an error the next one tries the same call,
//     and the failed sink sits out min(maxpenalty, 2^fails × 1 s). Backoff
//     is not a failure. Equal priorities keep list order (Flume drops the
//     later sink with a warning).
//   - load_balance: processor.backoff (false), processor.selector
//     (round_robin | random), processor.selector.maxTimeOut (30000 ms, the
//     longest a failed sink is skipped when backoff is on). Each call starts
//     at the next sink in selector order; an error moves on to the next sink
//     in the same call; Backoff is returned as is; if all fail, the errors
//     are returned together.
//
// log receives the group's warnings (nil: slog.Default()).
func NewSinkProcessor(p *config.Props, sinks []string, byName map[string]Sink, log *slog.Logger) (Sink, error) {
	if p == nil {
		p = config.FromMap("processor.", nil)
	}
	var members []member
	for _, name := range sinks {
		s, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("sink group: sink %s is not defined", name)
		}
		members = append(members, member{name: name, sink: s})
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("sink group has no sinks")
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("sinkgroup", groupName(p))
	typ := strings.TrimSpace(p.String("type", ProcessorDefault))
	canon, ok := processorAliases[strings.ToLower(typ)]
	if !ok {
		p.Errorf("type", "unknown sink processor type %q; use default, failover or load_balance", typ)
		canon = ProcessorDefault
	}
	switch canon {
	case ProcessorFailover:
		return newFailover(p, members, log), nil
	case ProcessorLoadBalance:
		return newLoadBalance(p, members, log), nil
	}
	if len(members) != 1 {
		p.Errorf("type", "the default sink processor runs exactly one sink, and this group has %d; use failover or load_balance", len(members))
	}
	return members[0].sink, nil
}

// groupName guesses the group's name from a prefix like "a1.sinkgroups.g1.processor.".
func groupName(p *config.Props) string {
	parts := strings.Split(strings.TrimSuffix(p.Prefix, "."), ".")
	if len(parts) >= 2 {
		return parts[len(parts)-2]
	}
	return p.Prefix
}

type member struct {
	name        string
	sink        Sink
	priority    int
	fails       int
	failedUntil time.Time
	streak      *logthrottle.Streak // the group's lines about this member
}

// penalize records a failure of m at now, with the penalty capped at max.
func (m *member) penalize(now time.Time, max time.Duration) time.Duration {
	m.fails++
	d := max
	if m.fails < 30 {
		d = min(max, failurePenalty<<m.fails)
	}
	m.failedUntil = now.Add(d)
	return d
}

func (m *member) recover() {
	if m.fails > 0 {
		m.streak.Ok("sink", m.name)
	}
	m.fails, m.failedUntil = 0, time.Time{}
}

// group holds what both processors share. Its methods run on the runner's
// goroutine only.
type group struct {
	members []member
	log     *slog.Logger
	now     func() time.Time
}

// newGroup tells each member's failures in a streak of its own: failed
// is what the group does about a failed member, recovered what it does
// once the member delivers again.
func newGroup(members []member, log *slog.Logger, failed, recovered string) group {
	for i := range members {
		members[i].streak = &logthrottle.Streak{Log: log, Level: slog.LevelWarn, Failed: failed, Recovered: recovered}
	}
	return group{members: members, log: log, now: time.Now}
}

func (g *group) Start(context.Context) error { return nil }
func (g *group) Stop(context.Context) error  { return nil }

// flushLogs writes the member failures still held back.
func (g *group) flushLogs() {
	for i := range g.members {
		g.members[i].streak.Stop()
	}
}

// BatchSize is the largest batch size of the members, for the agent's
// transactionCapacity check.
func (g *group) BatchSize() int {
	n := 0
	for _, m := range g.members {
		if bs, ok := m.sink.(BatchSizer); ok {
			n = max(n, bs.BatchSize())
		}
	}
	return n
}

type failover struct {
	group
	maxPenalty time.Duration
	order      []int // member indexes, highest priority first
}

func newFailover(p *config.Props, members []member, log *slog.Logger) *failover {
	f := &failover{group: newGroup(members, log, "sink failed; failing over to the next sink", "sink delivering again; back in the failover group")}
	f.maxPenalty = time.Duration(p.Int64("maxpenalty", 30000)) * time.Millisecond
	if f.maxPenalty < 0 {
		p.Errorf("maxpenalty", "%d is negative; use milliseconds, such as 30000", f.maxPenalty.Milliseconds())
		f.maxPenalty = 30 * time.Second
	}
	next := 0
	for i := range f.members {
		m := &f.members[i]
		key := "priority." + m.name
		if p.Has(key) {
			m.priority = p.Int(key, 0)
		} else {
			next--
			m.priority = next
		}
		f.order = append(f.order, i)
	}
	for _, k := range p.Keys("priority.") {
		name := strings.TrimPrefix(k, "priority.")
		if !slices.ContainsFunc(f.members, func(m member) bool { return m.name == name }) {
			p.MarkUsed(k)
			p.Errorf(k, "sink %q is not in this group (%s)", name, strings.Join(memberNames(f.members), " "))
		}
	}
	slices.SortStableFunc(f.order, func(a, b int) int { return f.members[b].priority - f.members[a].priority })
	return f
}

func (f *failover) Process(ctx context.Context) (Status, error) {
	now := f.now()
	var errs []error
	tried := 0
	for _, i := range f.order {
		m := &f.members[i]
		if now.Before(m.failedUntil) {
			continue
		}
		tried++
		st, err := m.sink.Process(ctx)
		if err == nil {
			m.recover()
			return st, nil
		}
		if ctx.Err() != nil {
			return Ready, err
		}
		d := m.penalize(now, f.maxPenalty)
		m.streak.Fail(err, "sink", m.name, "sits_out", d.String())
		errs = append(errs, fmt.Errorf("sink %s: %w", m.name, err))
	}
	if tried == 0 {
		return Ready, fmt.Errorf("every sink of the failover group is sitting out a penalty after failing")
	}
	return Ready, fmt.Errorf("all sinks of the failover group failed: %w", errors.Join(errs...))
}

type loadBalance struct {
	group
	backoff    bool
	random     bool
	maxTimeout time.Duration
	next       int   // round robin: where the next call starts
	order      []int // reused per call
	rnd        *rand.Rand
}

func newLoadBalance(p *config.Props, members []member, log *slog.Logger) *loadBalance {
	lb := &loadBalance{group: newGroup(members, log, "sink failed; trying the next sink of the group", "sink delivering again; back in the load_balance group")}
	lb.backoff = p.Bool("backoff", false)
	sel := strings.TrimSpace(p.String("selector", "round_robin"))
	switch strings.ToLower(sel) {
	case "round_robin":
	case "random":
		lb.random = true
	default:
		if strings.Contains(sel, ".") {
			p.Errorf("selector", "custom sink selector classes such as %q are not supported; use round_robin or random", sel)
		} else {
			p.Errorf("selector", "unknown sink selector %q; use round_robin or random", sel)
		}
	}
	lb.maxTimeout = time.Duration(p.Int64("selector.maxTimeOut", 30000)) * time.Millisecond
	if lb.maxTimeout < 0 {
		p.Errorf("selector.maxTimeOut", "%d is negative; use milliseconds, such as 30000", lb.maxTimeout.Milliseconds())
		lb.maxTimeout = 30 * time.Second
	}
	lb.order = make([]int, len(members))
	lb.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	return lb
}

func (lb *loadBalance) Process(ctx context.Context) (Status, error) {
	n := len(lb.members)
	if lb.random {
		for i := range lb.order {
			lb.order[i] = i
		}
		lb.rnd.Shuffle(n, func(i, j int) { lb.order[i], lb.order[j] = lb.order[j], lb.order[i] })
	} else {
		for i := range lb.order {
			lb.order[i] = (lb.next + i) % n
		}
		lb.next = (lb.next + 1) % n
	}
	now := lb.now()
	var errs []error
	tried := 0
	for _, i := range lb.order {
		m := &lb.members[i]
		if lb.backoff && now.Before(m.failedUntil) {
			continue
		}
		tried++
		st, err := m.sink.Process(ctx)
		if err == nil {
			m.recover()
			return st, nil
		}
		if ctx.Err() != nil {
			return Ready, err
		}
		if lb.backoff {
			m.penalize(now, lb.maxTimeout)
		} else {
			m.fails++ // counted for the streak's end only: no penalty without backoff
		}
		m.streak.Fail(err, "sink", m.name)
		errs = append(errs, fmt.Errorf("sink %s: %w", m.name, err))
	}
	if tried == 0 {
		return Ready, fmt.Errorf("every sink of the load_balance group is backing off after failing")
	}
	return Ready, fmt.Errorf("all sinks of the load_balance group failed: %w", errors.Join(errs...))
}

func memberNames(ms []member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.name
	}
	return out
}
