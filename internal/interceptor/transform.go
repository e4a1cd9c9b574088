package interceptor

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/eventexpr"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

// Transform changes, drops and rewrites events with expressions, sluice's
// answer to Flume's custom Java interceptors (docs/transforms.md). Its keys:
//
//	drop = EXPR          the event is removed when EXPR is true
//	set.NAME = EXPR      header NAME takes the value (nil removes it)
//	remove = NAME ...    the headers are removed
//	body = EXPR          the body is replaced
//	onError = keep|drop  what a failing expression does to the event
//
// The order is fixed: drop, then every set in the order of the header
// names, then remove, then body. Every expression sees the event as it came
// in (a set does not see another set's header); to build on a result, chain
// a second transform. When an expression fails on an event, nothing of the
// transform is applied to it: with onError = keep (the default) the event
// goes on as it came in, with drop it is dropped; either way the failure is
// counted by rule and logged, at most once per 10 seconds per rule.
type Transform struct {
	name    string
	c       *eventexpr.Compiler
	drop    *eventexpr.Program
	sets    []setRule
	remove  []string
	body    *eventexpr.Program
	onError string // "keep" or "drop"

	dropped   prometheus.Counter // by the drop expression
	errDrops  prometheus.Counter // by onError = drop
	errs      map[string]prometheus.Counter
	log       *slog.Logger
	throttle  *logthrottle.Throttle
	batches   sync.Pool // *batch
	hasChange bool
}

type setRule struct {
	header string
	rule   string // "set." + header, for metrics and logs
	prog   *eventexpr.Program
}

// NewTransform builds a transform interceptor.
func NewTransform(env flow.Env, p *config.Props) (flow.Interceptor, error) {
	reg := env.Registry()
	t := &Transform{
		name:     env.Name,
		c:        eventexpr.CompilerFromProps(p),
		onError:  p.Enum("onError", "keep", "keep", "drop"),
		dropped:  reg.Dropped(env.Name, "filtered"),
		errDrops: reg.Dropped(env.Name, "expression_error"),
		errs:     map[string]prometheus.Counter{},
		log:      env.Log(),
		throttle: logthrottle.New(10*time.Second, 1),
	}
	t.drop = t.c.CompileKey(p, "drop", eventexpr.Bool)
	t.body = t.c.CompileKey(p, "body", eventexpr.Value)
	for _, k := range p.Keys("set.") {
		name := strings.TrimPrefix(k, "set.")
		if name == "" {
			p.Errorf(k, "the header name is missing: write set.NAME = EXPR")
			p.MarkUsed(k)
			continue
		}
		if prog := t.c.CompileKey(p, k, eventexpr.Value); prog != nil {
			t.sets = append(t.sets, setRule{header: name, rule: k, prog: prog})
		}
	}
	sort.Slice(t.sets, func(i, j int) bool { return t.sets[i].header < t.sets[j].header })
	t.remove = p.Fields("remove")
	if !p.Has("drop") && len(p.Keys("set.")) == 0 && !p.Has("remove") && !p.Has("body") {
		p.Errorf("type", "a transform needs at least one of drop, set.NAME, remove or body; see docs/transforms.md")
	}
	rules := p.Keys("set.")
	if t.drop != nil {
		rules = append(rules, "drop")
	}
	if t.body != nil {
		rules = append(rules, "body")
	}
	for _, rule := range rules {
		t.errs[rule] = reg.ExpressionErrors(env.Name, rule)
	}
	t.hasChange = len(t.sets) > 0 || len(t.remove) > 0 || t.body != nil
	n := len(t.sets)
	t.batches.New = func() any { return &batch{res: make([]setResult, n)} }
	return t, nil
}

// Intercept applies the transform to each event and returns the events
// kept, in order, at the front of events; the slots after them are zeroed.
func (t *Transform) Intercept(events []event.Event) []event.Event {
	if len(events) == 0 {
		return events
	}
	b := t.batches.Get().(*batch)
	b.s = t.c.Begin(&events[0])
	b.outcomes = b.outcomes[:0]
	for len(b.outcomes) < len(events) {
		t.run(b, events)
	}
	b.s.Release()
	b.s = nil
	kept := events[:0]
	filtered, failed := 0, 0
	for i, o := range b.outcomes {
		switch o {
		case keepEvent:
			kept = append(kept, events[i])
		case dropFiltered:
			filtered++
		case dropFailed:
			failed++
		}
	}
	t.batches.Put(b)
	if len(kept) < len(events) {
		clear(events[len(kept):])
		if filtered > 0 {
			t.dropped.Add(float64(filtered))
		}
		if failed > 0 {
			t.errDrops.Add(float64(failed))
		}
	}
	return kept
}

// batch is the scratch of one Intercept call.
type batch struct {
	s        *eventexpr.State
	outcomes []outcome
	rule     string // the rule running, for a panic
	res      []setResult
	buf      []byte // the values of the headers set on one event
	// The headers set are cut from arenas, not allocated per event: an
	// event whose headers have no room left gets new ones from heads, and
	// the values set are parts of strings made from text.
	heads event.HeaderArena
	text  []byte
}

// textChunk is how many bytes of header values batch.text holds at a time.
const textChunk = 16 << 10

// str returns b as a string that lives in the batch's text arena. The
// arena only ever appends, and a chunk is dropped (not reused) when full, so
// the bytes under a string it gave never change.
func (b *batch) str(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if cap(b.text)-len(b.text) < len(v) {
		b.text = make([]byte, 0, max(len(v), textChunk))
	}
	start := len(b.text)
	b.text = append(b.text, v...)
	return unsafe.String(&b.text[start], len(v))
}

type setResult struct {
	end int // end of the value in batch.buf
	ok  bool
}

type outcome int

const (
	keepEvent outcome = iota
	dropFiltered
	dropFailed
)

// run applies the transform to the events from len(b.outcomes) on,
// appending their outcomes. A panic (a bug in a helper, not an
// expression's error: expr recovers those itself) fails the event it
// happened on, like an error of the rule that was running, and returns;
// Intercept calls run again for the events after it.
func (t *Transform) run(b *batch, events []event.Event) {
	defer func() {
		if r := recover(); r != nil {
			b.outcomes = append(b.outcomes, t.failed(b.rule, fmt.Errorf("panic: %v", r)))
		}
	}()
	for i := len(b.outcomes); i < len(events); i++ {
		b.s.Reset(&events[i])
		b.outcomes = append(b.outcomes, t.apply(b, &events[i]))
	}
}

// apply runs the transform on e, with b.s reset to e.
func (t *Transform) apply(b *batch, e *event.Event) outcome {
	s := b.s
	if t.drop != nil {
		b.rule = "drop"
		drop, err := t.drop.EvalBool(s)
		if err != nil {
			return t.failed("drop", err)
		}
		if drop {
			return dropFiltered
		}
	}
	if !t.hasChange {
		return keepEvent
	}
	buf := b.buf[:0]
	for i := range t.sets {
		b.rule = t.sets[i].rule
		var ok bool
		var err error
		buf, ok, err = t.sets[i].prog.AppendString(buf, s)
		if err != nil {
			b.buf = buf
			return t.failed(b.rule, err)
		}
		b.res[i] = setResult{len(buf), ok}
	}
	b.buf = buf
	var body []byte
	bodySet := false
	if t.body != nil {
		b.rule = "body"
		v, ok, err := t.body.EvalBytes(s)
		if err != nil {
			return t.failed(b.rule, err)
		}
		if !ok {
			return t.failed(b.rule, fmt.Errorf("the body expression gave nil; give a string (\"\" for an empty body)"))
		}
		body, bodySet = v, true
	}
	// Everything evaluated: apply it. The header values share one string.
	values := b.str(buf)
	if h := e.Headers; cap(h)-len(h) < len(t.sets) {
		e.Headers = append(b.heads.Make(len(h)+len(t.sets)), h...)
	}
	start := 0
	for i := range t.sets {
		r := b.res[i]
		if r.ok {
			e.Headers.Set(t.sets[i].header, values[start:r.end])
		} else {
			e.Headers.Delete(t.sets[i].header)
		}
		start = r.end
	}
	for _, h := range t.remove {
		e.Headers.Delete(h)
	}
	if bodySet {
		e.Body = body
	}
	return keepEvent
}

// failed counts and logs a failed rule and says what becomes of the event.
func (t *Transform) failed(rule string, err error) outcome {
	if c := t.errs[rule]; c != nil {
		c.Inc()
	}
	what := "the event goes on unchanged (onError = keep)"
	out := keepEvent
	if t.onError == "drop" {
		what, out = "the event is dropped (onError = drop)", dropFailed
	}
	t.throttle.Log(t.log, slog.LevelWarn, rule, "transform expression failed; "+what,
		"interceptor", t.name, "rule", rule, "err", truncate(err.Error(), 300))
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
