package eventexpr

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/timelayout"
)

// helperNames are the helpers of this package, for messages and docs.
var helperNames = []string{"json", "parseTime", "formatTime", "regexExtract", "mask", "sha256", "toJSON", "fromJSON"}

// stateful are the functions that get the State as their first argument
// (the patcher adds it): those with a per-event cache or budget.
var stateful = map[string]bool{
	"json": true, "fromJSON": true, "toJSON": true, "mask": true,
	"join": true, "replace": true, "split": true, "splitAfter": true, "string": true, "repeat": true,
}

// constArgs names, for each helper, the arguments that must be constants
// (compiled when the configuration is read) and what they are.
var constArgs = map[string]map[int]constKind{
	"parseTime":    {1: constLayout, 2: constZone},
	"formatTime":   {1: constLayout, 2: constZone},
	"regexExtract": {1: constRegexp},
	"mask":         {1: constRegexp},
}

type constKind int

const (
	constLayout constKind = iota + 1
	constZone
	constRegexp
)

func (k constKind) String() string {
	switch k {
	case constLayout:
		return "time layout"
	case constZone:
		return "time zone"
	}
	return "regular expression"
}

var locationT = reflect.TypeOf((*time.Location)(nil))

// types returns the function types of signatures, for builtin.Function.
func types(fns ...any) []reflect.Type {
	out := make([]reflect.Type, len(fns))
	for i, f := range fns {
		out[i] = reflect.TypeOf(f).Elem()
	}
	return out
}

// functions are the helpers and the budgeted replacements of expr's
// builtins, by the name an expression calls them with.
var functions = map[string]*builtin.Function{
	"json": {
		Name:  "json",
		Func:  func(a ...any) (any, error) { return jsonOf(a[0].(*State), a[1], false) },
		Types: types(new(func(*State, string) any), new(func(*State, []byte) any)),
	},
	"fromJSON": {
		Name:  "fromJSON",
		Func:  func(a ...any) (any, error) { return jsonOf(a[0].(*State), a[1], true) },
		Types: types(new(func(*State, string) any)),
	},
	headersFn: {
		Name:  headersFn,
		Func:  func(a ...any) (any, error) { return a[0].(*State).headerMap(), nil },
		Types: types(new(func(*State) map[string]string)),
	},
	headerFn: {
		Name: headerFn,
		Func: func(a ...any) (any, error) {
			return byHeaderName(a, func(h event.Headers, k string) any { return h.Value(k) })
		},
		Types: types(new(func(*State, string) string)),
	},
	hasHeaderFn: {
		Name: hasHeaderFn,
		Func: func(a ...any) (any, error) {
			return byHeaderName(a, func(h event.Headers, k string) any { return h.Has(k) })
		},
		Types: types(new(func(*State, string) bool)),
	},
	jsonBodyFn: {
		Name: jsonBodyFn,
		Func: func(a ...any) (any, error) {
			s := a[0].(*State)
			return s.whole(s.vars.Body)
		},
		Types: types(new(func(*State) any)),
	},
	jsonPathFn: {
		Name: jsonPathFn,
		Func: func(a ...any) (any, error) {
			s := a[0].(*State)
			str, ok := a[1].(string)
			if !ok {
				return nil, fmt.Errorf("json: want a string, got %s", describe(a[1]))
			}
			return s.path(str, a[2:])
		},
		Types: types(new(func(*State, string, ...any) any)),
	},
	jsonBodyPathFn: {
		Name: jsonBodyPathFn,
		Func: func(a ...any) (any, error) {
			s := a[0].(*State)
			return s.path(s.vars.Body, a[1:])
		},
		Types: types(new(func(*State, ...any) any)),
	},
	"parseTime": {
		Name: "parseTime",
		Func: func(a ...any) (any, error) {
			loc := (*time.Location)(nil)
			if len(a) == 3 {
				loc = a[2].(*time.Location)
			}
			return parseTime(a[0], a[1].(*timelayout.Layout), loc)
		},
		Types: types(
			new(func(string, *timelayout.Layout) time.Time),
			new(func(string, *timelayout.Layout, *time.Location) time.Time),
			new(func(int, *timelayout.Layout) time.Time),
			new(func(float64, *timelayout.Layout) time.Time),
		),
	},
	"formatTime": {
		Name: "formatTime",
		Func: func(a ...any) (any, error) {
			t, ok := a[0].(time.Time)
			if !ok {
				return nil, fmt.Errorf("formatTime: want a time, got %s (parse it first with parseTime)", describe(a[0]))
			}
			if len(a) == 3 {
				t = t.In(a[2].(*time.Location))
			}
			return a[1].(*timelayout.Layout).Format(t), nil
		},
		Types: types(
			new(func(time.Time, *timelayout.Layout) string),
			new(func(time.Time, *timelayout.Layout, *time.Location) string),
		),
	},
	"regexExtract": {
		Name: "regexExtract",
		Func: func(a ...any) (any, error) {
			s, ok := a[0].(string)
			if !ok {
				if a[0] == nil {
					return nil, nil
				}
				return nil, fmt.Errorf("regexExtract: want a string, got %s", describe(a[0]))
			}
			return regexExtract(s, a[1].(*regexp.Regexp), a[2])
		},
		Types: types(
			new(func(string, *regexp.Regexp, int) any),
			new(func(string, *regexp.Regexp, string) any),
		),
	},
	"mask": {
		Name: "mask",
		Func: func(a ...any) (any, error) {
			with := ""
			if len(a) == 4 {
				with = a[3].(string)
			}
			return mask(a[0].(*State), a[1].(string), a[2].(*regexp.Regexp), with, len(a) == 4)
		},
		Types: types(
			new(func(*State, string, *regexp.Regexp) string),
			new(func(*State, string, *regexp.Regexp, string) string),
		),
	},
	"sha256": {
		Name: "sha256",
		Func: func(a ...any) (any, error) {
			sum := sha256.Sum256([]byte(a[0].(string)))
			return hex.EncodeToString(sum[:]), nil
		},
		Types: types(new(func(string) string)),
	},
	"toJSON": {
		Name:  "toJSON",
		Func:  func(a ...any) (any, error) { return toJSON(a[0].(*State), a[1]) },
		Types: types(new(func(*State, any) string)),
	},
	"string": {
		Name: "string",
		Func: func(a ...any) (any, error) {
			if err := a[0].(*State).chargeWritten(a[1]); err != nil {
				return nil, err
			}
			return builtin.String(a[1]), nil
		},
		Types: types(new(func(*State, any) string)),
	},
	"join": {
		Name: "join",
		Func: func(a ...any) (any, error) {
			s := a[0].(*State)
			glue := ""
			if len(a) == 3 {
				glue = a[2].(string)
			}
			var parts []string
			switch v := a[1].(type) {
			case []string:
				parts = v
			case []any:
				parts = make([]string, len(v))
				for i, x := range v {
					str, ok := x.(string)
					if !ok {
						return nil, fmt.Errorf("join: element %d is %s, not a string", i, describe(x))
					}
					parts[i] = str
				}
			default:
				return nil, fmt.Errorf("join: want a list of strings, got %s", describe(a[1]))
			}
			n := len(glue) * max(len(parts)-1, 0)
			for _, p := range parts {
				n += len(p)
			}
			if err := s.chargeBytes(n); err != nil {
				return nil, err
			}
			return strings.Join(parts, glue), nil
		},
		Types: types(
			new(func(*State, []any, string) string),
			new(func(*State, []any) string),
			new(func(*State, []string, string) string),
			new(func(*State, []string) string),
		),
	},
	"replace": {
		Name: "replace",
		Func: func(a ...any) (any, error) {
			s := a[0].(*State)
			str, old, repl := a[1].(string), a[2].(string), a[3].(string)
			n := -1
			if len(a) == 5 {
				n = runtime.ToInt(a[4])
			}
			count := strings.Count(str, old)
			if n >= 0 && n < count {
				count = n
			}
			if err := s.chargeBytes(len(str) + count*max(len(repl)-len(old), 0)); err != nil {
				return nil, err
			}
			return strings.Replace(str, old, repl, n), nil
		},
		Types: types(
			new(func(*State, string, string, string) string),
			new(func(*State, string, string, string, int) string),
		),
	},
	"repeat": {
		Name: "repeat",
		Func: func(a ...any) (any, error) {
			s, str, n := a[0].(*State), a[1].(string), runtime.ToInt(a[2])
			if n < 0 {
				return nil, fmt.Errorf("repeat: the count %d is negative", n)
			}
			if n > 0 && len(str) > s.remaining()/n {
				return nil, errBudget
			}
			if err := s.chargeBytes(len(str) * n); err != nil {
				return nil, err
			}
			return strings.Repeat(str, n), nil
		},
		Types: types(new(func(*State, string, int) string)),
	},
	"split":      splitFn("split", strings.SplitN),
	"splitAfter": splitFn("splitAfter", strings.SplitAfterN),
	addFn: {
		Name: addFn,
		Func: func(a ...any) (any, error) {
			s := a[0].(*State)
			if x, ok := a[1].(string); ok {
				if y, ok := a[2].(string); ok {
					return concatStrings(s, x, y)
				}
			}
			return runtime.Add(a[1], a[2]), nil
		},
		Types: types(new(func(*State, any, any) any)),
	},
	concatFn: {
		Name: concatFn,
		Func: func(a ...any) (any, error) {
			return concatStrings(a[0].(*State), a[1].(string), a[2].(string))
		},
		Types: types(new(func(*State, string, string) string)),
	},
	stepFn: {
		Name: stepFn,
		Func: func(a ...any) (any, error) {
			if err := a[0].(*State).charge(1); err != nil {
				return nil, err
			}
			return a[1], nil
		},
		// The step passes its argument through: keep its type, so that
		// a loop's predicate is still checked.
		Validate: func(args []reflect.Type) (reflect.Type, error) {
			if len(args) != 2 {
				return nil, fmt.Errorf("internal: %s takes 2 arguments", stepFn)
			}
			return args[1], nil
		},
	},
}

// byHeaderName runs f on the event's headers and the header name of the
// arguments (State, name) of headerFn and hasHeaderFn.
func byHeaderName(a []any, f func(h event.Headers, k string) any) (any, error) {
	k, ok := a[1].(string)
	if !ok {
		return nil, fmt.Errorf("headers: a header's name is a string, not %s", describe(a[1]))
	}
	return f(a[0].(*State).headers, k), nil
}

// Names of the internal functions the patches call.
const (
	headersFn      = "headers" + internalMark
	headerFn       = "header" + internalMark
	hasHeaderFn    = "hasHeader" + internalMark
	jsonBodyFn     = "json" + internalMark + "body"
	jsonPathFn     = "json" + internalMark + "path"
	jsonBodyPathFn = "json" + internalMark + "bodypath"
	addFn          = "add" + internalMark
	concatFn       = "concat" + internalMark
	stepFn         = "step" + internalMark
)

func splitFn(name string, split func(s, sep string, n int) []string) *builtin.Function {
	return &builtin.Function{
		Name: name,
		Func: func(a ...any) (any, error) {
			s := a[0].(*State)
			str, sep := a[1].(string), a[2].(string)
			n := -1
			if len(a) == 4 {
				n = runtime.ToInt(a[3])
			}
			parts := strings.Count(str, sep) + 1
			if sep == "" {
				parts = utf8.RuneCountInString(str)
			}
			if n >= 0 && n < parts {
				parts = n
			}
			if err := s.charge(uint(parts)); err != nil {
				return nil, err
			}
			return split(str, sep, n), nil
		},
		Types: types(
			new(func(*State, string, string) []string),
			new(func(*State, string, string, int) []string),
		),
	}
}

func concatStrings(s *State, x, y string) (string, error) {
	if err := s.chargeBytes(len(x) + len(y)); err != nil {
		return "", err
	}
	return x + y, nil
}

// chargeWritten spends the budget of writing v out as text.
func (s *State) chargeWritten(v any) error {
	rem := s.remaining()
	n := estimate(v, rem)
	if n > uint(rem) {
		return errBudget
	}
	return s.chargeBytes(int(n))
}

// remaining returns how many bytes of string the budget still allows.
func (s *State) remaining() int {
	if s.spent >= s.c.limits.Budget {
		return 0
	}
	return int(s.c.limits.Budget-s.spent) * bytesPerUnit
}

// jsonOf is json(v): v parsed as JSON, or nil when it is not JSON (strict:
// an error, for fromJSON). The document is parsed once per event.
func jsonOf(s *State, v any, strict bool) (any, error) {
	var str string
	switch x := v.(type) {
	case nil:
		if strict {
			return nil, fmt.Errorf("fromJSON: nil is not JSON")
		}
		return nil, nil
	case string:
		str = x
	case []byte:
		str = bytesString(x)
	default:
		return nil, fmt.Errorf("json: want a string, got %s", describe(v))
	}
	r, err := s.whole(str)
	if err == nil && r == nil && strict && strings.TrimSpace(str) != "null" {
		return nil, fmt.Errorf("fromJSON: the string is not JSON")
	}
	return r, err
}

// parseTime reads v, a string (or, for the epoch layouts, a number), in
// layout l; a time without a zone is read in loc (nil: the compiler's).
func parseTime(v any, l *timelayout.Layout, loc *time.Location) (time.Time, error) {
	if loc == nil {
		loc = time.Local
	}
	switch x := v.(type) {
	case string:
		return l.Parse(x, loc)
	case int, int64, float64:
		if !l.IsEpoch() {
			return time.Time{}, fmt.Errorf("parseTime: a number needs an epoch layout (unix, unixMs, unixUs or unixNs), not %q", l)
		}
		return l.Parse(fmt.Sprint(x), loc)
	case nil:
		return time.Time{}, fmt.Errorf("parseTime: no value (nil) to parse")
	}
	return time.Time{}, fmt.Errorf("parseTime: want a string, got %s", describe(v))
}

// regexExtract returns group (a number, or a name) of the first match of
// re in s, or nil when re does not match or the group took no part.
func regexExtract(s string, re *regexp.Regexp, group any) (any, error) {
	var g int
	switch x := group.(type) {
	case int:
		g = x
	case string:
		g = re.SubexpIndex(x)
		if g < 0 {
			return nil, fmt.Errorf("regexExtract: the pattern has no group named %q", x)
		}
	default:
		return nil, fmt.Errorf("regexExtract: the group must be a number or a name, not %s", describe(group))
	}
	if g < 0 || g > re.NumSubexp() {
		return nil, fmt.Errorf("regexExtract: the pattern has %d group(s); group %d does not exist", re.NumSubexp(), g)
	}
	m := re.FindStringSubmatchIndex(s)
	if m == nil || m[2*g] < 0 {
		return nil, nil
	}
	return s[m[2*g]:m[2*g+1]], nil
}

// mask replaces what re matches in str (only its groups, when it has
// some) with one '*' per character, or with with.
func mask(s *State, str string, re *regexp.Regexp, with string, fixed bool) (string, error) {
	// Each match costs a unit: find no more than the budget allows, so
	// that a pattern matching everywhere in a large body fails early
	// rather than after listing a million matches.
	limit := 0
	if s.spent < s.c.limits.Budget {
		limit = int(s.c.limits.Budget - s.spent)
	}
	ms := re.FindAllStringSubmatchIndex(str, limit+1)
	if ms == nil {
		return str, nil
	}
	if len(ms) > limit {
		return "", errBudget
	}
	if err := s.charge(uint(len(ms))); err != nil {
		return "", err
	}
	if err := s.chargeBytes(len(str) + len(ms)*len(with)); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(str))
	last := 0
	for _, m := range ms {
		spans := [][2]int{{m[0], m[1]}}
		if len(m) > 2 {
			spans = spans[:0]
			for g := 1; g < len(m)/2; g++ {
				if m[2*g] >= 0 {
					spans = append(spans, [2]int{m[2*g], m[2*g+1]})
				}
			}
		}
		for _, sp := range spans {
			if sp[0] < last { // nested groups: the outer one covered it
				continue
			}
			b.WriteString(str[last:sp[0]])
			if fixed {
				b.WriteString(with)
			} else {
				b.WriteString(strings.Repeat("*", utf8.RuneCountInString(str[sp[0]:sp[1]])))
			}
			last = sp[1]
		}
	}
	b.WriteString(str[last:])
	return b.String(), nil
}

// toJSON writes v as compact JSON (no HTML escaping, keys sorted).
func toJSON(s *State, v any) (string, error) {
	if err := s.chargeWritten(v); err != nil {
		return "", err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("toJSON: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// estimate returns about how many bytes v takes written out, giving up
// (returning more than limit) once it passes limit, so that a value that
// refers to one large string many times costs what writing it would.
func estimate(v any, limit int) uint {
	n := 0
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if n > limit || depth > 100 {
			n = limit + 1
			return
		}
		switch x := v.(type) {
		case string:
			n += len(x) + 2
		case []byte:
			n += len(x)*2 + 2
		case []any:
			n += 2
			for _, e := range x {
				walk(e, depth+1)
				n++
			}
		case []string:
			n += 2
			for _, e := range x {
				n += len(e) + 3
			}
		case map[string]any:
			n += 2
			for k, e := range x {
				n += len(k) + 4
				walk(e, depth+1)
			}
		case map[string]string:
			n += 2
			for k, e := range x {
				n += len(k) + len(e) + 6
			}
		default:
			rv := reflect.ValueOf(v)
			switch rv.Kind() {
			case reflect.Slice, reflect.Array:
				n += 2
				for i := 0; i < rv.Len() && n <= limit; i++ {
					walk(rv.Index(i).Interface(), depth+1)
					n++
				}
			case reflect.Map:
				n += 2
				it := rv.MapRange()
				for it.Next() && n <= limit {
					walk(it.Key().Interface(), depth+1)
					walk(it.Value().Interface(), depth+1)
				}
			default:
				n += 32
			}
		}
	}
	walk(v, 0)
	return uint(n)
}
