package eventexpr

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/sluicehq/sluice/internal/event"
)

// internalMark is in the names of the internal function and variable the
// patches add; an expression cannot spell it (it is not a letter).
const internalMark = "·"

// stateVar is the name under which expressions reach their State: the
// patches pass it to the helpers that need the event's caches or budget.
const stateVar = "ev" + internalMark

// Vars is the environment of an expression: the names it can use.
type Vars struct {
	// Body is the event's body as a string. It shares the body's bytes:
	// event bodies are never modified in place (see flow.Transaction), and
	// results are copied before they outlive the event's evaluation.
	Body  string `expr:"body"`
	State *State `expr:"ev·"`
	// headers is not here: the patcher turns every use of it into a
	// call that reads State.headers.
}

// State is what the expressions of one component need while they run on
// one event: the event, its parsed JSON, the budget spent, and a VM. Get
// one with Begin and give it back with Release; it is not safe for
// concurrent use.
type State struct {
	vars  Vars
	vm    vm.VM
	c     *Compiler
	body  []byte
	spent uint
	json  jsonCache
	// headers are the event's; hmap is them as a map, made the first time
	// an expression uses headers as a whole.
	headers event.Headers
	hmap    map[string]string
}

var statePool = sync.Pool{New: func() any { return new(State) }}

// Begin returns a State for evaluating the compiler's programs on e.
func (c *Compiler) Begin(e *event.Event) *State {
	s := statePool.Get().(*State)
	s.c = c
	s.vm.MemoryBudget = c.limits.Budget
	s.Reset(e)
	return s
}

// Reset makes s evaluate on e from now on, as a new Begin would, without
// going through the pool: a component that runs over a batch resets one
// State per event.
func (s *State) Reset(e *event.Event) {
	if s.json.n > 0 {
		s.json.reset()
	}
	s.body = e.Body
	s.vars = Vars{Body: bytesString(e.Body), State: s}
	s.headers, s.hmap = e.Headers, nil
	s.spent = 0
}

// headerMap returns the event's headers as a map, made once per event.
func (s *State) headerMap() map[string]string {
	if s.hmap == nil {
		s.hmap = s.headers.Map()
		if s.hmap == nil {
			s.hmap = map[string]string{}
		}
	}
	return s.hmap
}

// Release gives s back; its results must not be used afterwards unless
// they were copied (header and body values from Eval are).
func (s *State) Release() {
	s.json.reset()
	s.vars = Vars{}
	s.headers, s.hmap = nil, nil
	s.body = nil
	s.c = nil
	statePool.Put(s)
}

// bytesString views b as a string without copying.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// charge spends units of the budget, failing when it runs out.
func (s *State) charge(units uint) error {
	s.spent += units
	if s.spent > s.c.limits.Budget {
		return errBudget
	}
	return nil
}

// chargeBytes spends the budget of building a string of n bytes.
func (s *State) chargeBytes(n int) error {
	return s.charge(uint(n/bytesPerUnit + 1))
}

var errBudget = errors.New("the expression's per-event budget is spent (too many loop iterations, or too large a list, map or string built); see docs/transforms.md")

// run evaluates p, recovering any panic.
func (s *State) run(p *Program) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("%s: panic: %v", p.src, r)
		}
	}()
	v, err = s.vm.Run(p.prog, &s.vars)
	if err != nil {
		return nil, runError(err)
	}
	return v, nil
}

// runError makes a runtime error one line: the message and the column.
func runError(err error) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		msg := cleanMessage(fe.Message)
		if fe.Prev != nil && errors.Is(fe.Prev, errBudget) {
			return fmt.Errorf("%w (column %d)", errBudget, fe.Column+1)
		}
		return fmt.Errorf("%s (column %d)", msg, fe.Column+1)
	}
	return err
}

// EvalBool runs a Bool program.
func (p *Program) EvalBool(s *State) (bool, error) {
	if p.fast != nil {
		return p.fast(s)
	}
	v, err := s.run(p)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("the expression gave %s, not a boolean", describe(v))
	}
	return b, nil
}

// EvalString runs a Value program and returns its value as a header value
// (copied: it may outlive s), or ok false for nil.
func (p *Program) EvalString(s *State) (v string, ok bool, err error) {
	if p.direct != nil {
		b, ok, err := p.direct(nil, s)
		return string(b), ok, err
	}
	r, err := s.run(p)
	if err != nil {
		return "", false, err
	}
	return s.headerValue(r)
}

// AppendString runs a Value program and appends its value, as a header
// value, to dst; ok is false for nil. A component that sets several
// headers collects them in one buffer and makes one string of it.
func (p *Program) AppendString(dst []byte, s *State) (_ []byte, ok bool, err error) {
	if p.direct != nil {
		return p.direct(dst, s)
	}
	r, err := s.run(p)
	if err != nil {
		return dst, false, err
	}
	return s.appendHeaderValue(dst, r)
}

// appendHeaderValue appends r converted by headerValue to dst.
func (s *State) appendHeaderValue(dst []byte, r any) ([]byte, bool, error) {
	switch v := r.(type) {
	case string:
		return append(dst, v...), true, nil
	case int:
		return strconv.AppendInt(dst, int64(v), 10), true, nil
	case time.Time:
		return strconv.AppendInt(dst, v.UnixMilli(), 10), true, nil
	}
	v, ok, err := s.headerValue(r)
	return append(dst, v...), ok, err
}

// EvalBytes runs a Value program and returns its value as a body (a new
// slice), or ok false for nil.
func (p *Program) EvalBytes(s *State) (v []byte, ok bool, err error) {
	r, err := s.run(p)
	if err != nil {
		return nil, false, err
	}
	switch x := r.(type) {
	case string:
		return []byte(x), true, nil
	case []byte:
		return append([]byte(nil), x...), true, nil
	}
	str, ok, err := s.headerValue(r)
	return []byte(str), ok, err
}

// headerValue converts the result of an expression to a header value:
// strings as they are, numbers in decimal, booleans as true or false, times
// as epoch milliseconds (Flume's timestamp header); nil is no value.
func (s *State) headerValue(r any) (string, bool, error) {
	switch v := r.(type) {
	case nil:
		return "", false, nil
	case string:
		return s.own(v), true, nil
	case []byte:
		return string(v), true, nil
	case int:
		return strconv.Itoa(v), true, nil
	case int64:
		return strconv.FormatInt(v, 10), true, nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true, nil
	case bool:
		return strconv.FormatBool(v), true, nil
	case time.Time:
		return strconv.FormatInt(v.UnixMilli(), 10), true, nil
	case time.Duration:
		return strconv.FormatInt(v.Milliseconds(), 10), true, nil
	}
	switch v := r.(type) {
	case int8, int16, int32, uint, uint8, uint16, uint32, uint64, float32:
		return fmt.Sprint(v), true, nil
	}
	return "", false, fmt.Errorf("the expression gave %s, which is not a header value; wrap it in toJSON(...) to write it as JSON", describe(r))
}

// own returns v, copied when it shares the bytes of the event's body or of
// a parser's buffer, so that it can outlive the evaluation.
func (s *State) own(v string) string {
	if len(v) == 0 {
		return ""
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(v)))
	if len(s.body) > 0 {
		b := uintptr(unsafe.Pointer(unsafe.SliceData(s.body)))
		if p >= b && p < b+uintptr(len(s.body)) {
			return string([]byte(v))
		}
	}
	if s.json.owns(p) {
		return string([]byte(v))
	}
	return v
}

// describe names the type of a value in messages.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int64, float64:
		return "a number"
	case map[string]any:
		return "a map"
	case []any:
		return "a list"
	case time.Time:
		return "a time"
	}
	return fmt.Sprintf("a %T", v)
}
