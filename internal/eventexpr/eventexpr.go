// Package eventexpr compiles and runs the expressions of the transform
// interceptor and the expression channel selector: small programs over one
// event, written in expr (github.com/expr-lang/expr), that see the body as
// the string body and the headers as the map headers, and call the helpers
// of this package (json, parseTime, formatTime, regexExtract, mask,
// sha256, toJSON) besides expr's own operators and builtins.
//
// An expression is compiled once, when the configuration is read: a syntax
// or type error, an unknown helper, a wrong number of arguments, a regular
// expression that does not compile or a time layout that cannot be
// translated is reported then, with the column inside the expression.
//
// Running an expression cannot hang or exhaust memory. expr has no
// unbounded loops; every loop sugar (all, map, filter, reduce, ...) charges
// each iteration to a per-event budget, and so does every string, list or
// map an expression builds, through expr's own memory budget and this
// package's helpers and its replacements of expr's growing builtins
// (string concatenation, join, replace, split, string, toJSON, ...).
// JSON is parsed within a size and nesting budget. A panic inside an
// expression is recovered and returned as the event's error.
package eventexpr

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/sluicehq/sluice/internal/config"
)

// Limits bound what an expression may be and what one evaluation may do.
type Limits struct {
	// MaxNodes bounds the size of an expression: the number of nodes of
	// its syntax tree (a name, a literal, an operator, a call: one each).
	MaxNodes uint
	// Budget bounds the work of the expressions of one component on one
	// event: every loop iteration, every element of a list or map built,
	// and every 64 bytes of a string built cost one unit each.
	Budget uint
	// JSONBytes bounds the size of a string json() parses; JSON nested
	// deeper than MaxJSONDepth is refused too.
	JSONBytes int
}

// MaxJSONDepth is the deepest nesting of arrays and objects json() reads
// (the limit of the parser, github.com/valyala/fastjson).
const MaxJSONDepth = 300

// DefaultLimits are the limits of a component that sets none.
//
// The budget's default bounds the worst case to about a fifth of a second
// of CPU per event on the 2-core test machine (a loop of loops stopped by
// it, or a pattern matching everywhere in a large body), while leaving
// 6.4 MB of strings to build per event.
var DefaultLimits = Limits{MaxNodes: 1000, Budget: 100_000, JSONBytes: 1 << 20}

// bytesPerUnit is how many bytes of a built string cost one budget unit.
const bytesPerUnit = 64

// Want is what a program must produce.
type Want int

const (
	// Bool: a boolean (drop, selector conditions). A value of unknown type
	// (a JSON field) is checked when the expression runs.
	Bool Want = iota
	// Value: a header value: a string, a number, a boolean, a time, or nil.
	Value
)

// Program is a compiled expression. It is immutable and safe for
// concurrent use.
type Program struct {
	src  string
	prog *vm.Program
	want Want
	// direct and fast, when set, compute a header value or a boolean
	// without the VM (see fastpath.go); they give the results prog gives.
	direct func(dst []byte, s *State) ([]byte, bool, error)
	fast   fbool
}

// Source returns the expression as written.
func (p *Program) Source() string { return p.src }

// Error is a compile error at a column of an expression.
type Error struct {
	Column int // 1-based, in characters of the expression; 0 if unknown
	Msg    string
}

func (e *Error) Error() string {
	if e.Column > 0 {
		return fmt.Sprintf("column %d: %s", e.Column, e.Msg)
	}
	return e.Msg
}

// Compiler compiles expressions under a set of limits.
type Compiler struct {
	limits Limits
	loc    *time.Location
}

// NewCompiler returns a compiler for limits (zero fields take
// DefaultLimits') whose time helpers read and write times without a zone
// in loc (nil: the local zone, as Flume's Joda patterns use the JVM's).
func NewCompiler(l Limits, loc *time.Location) *Compiler {
	if l.MaxNodes == 0 {
		l.MaxNodes = DefaultLimits.MaxNodes
	}
	if l.Budget == 0 {
		l.Budget = DefaultLimits.Budget
	}
	if l.JSONBytes == 0 {
		l.JSONBytes = DefaultLimits.JSONBytes
	}
	if loc == nil {
		loc = time.Local
	}
	return &Compiler{limits: l, loc: loc}
}

// Limits returns the compiler's limits.
func (c *Compiler) Limits() Limits { return c.limits }

// envType is the compile-time environment: the names an expression sees.
var envType = Vars{}

// Compile compiles src to a program producing want. The error is an
// *Error. A panic inside expr's compiler (a bug there) is an error too: a
// configuration must never take the agent down.
func (c *Compiler) Compile(src string, want Want) (p *Program, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, &Error{Msg: fmt.Sprintf("the expression could not be compiled (%v)", r)}
		}
	}()
	return c.compile(src, want)
}

func (c *Compiler) compile(src string, want Want) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, &Error{Msg: "the expression is empty"}
	}
	// The source's own use of an internal name would bypass the patches.
	if i := strings.Index(src, internalMark); i >= 0 {
		return nil, &Error{Column: len([]rune(src[:i])) + 1, Msg: fmt.Sprintf("%q is not allowed in an expression", internalMark)}
	}
	if len(src) > maxSource {
		return nil, &Error{Msg: fmt.Sprintf("the expression is %d bytes long, over the limit of %d", len(src), maxSource)}
	}
	if err := checkNesting(src); err != nil {
		return nil, err
	}
	pv := &patcher{c: c}
	opts := []expr.Option{
		expr.Env(envType),
		expr.MaxNodes(c.limits.MaxNodes),
		expr.Timezone(c.loc.String()),
		expr.Patch(shadowScan{pv}),
		expr.Patch(pv),
		expr.Patch(&budgetPatcher{}),
		func(cf *conf.Config) {
			for name, f := range functions {
				cf.Functions[name] = f
			}
		},
	}
	prog, err := expr.Compile(src, opts...)
	if len(pv.errs) > 0 {
		// The patcher's own errors (a pattern or layout that does not
		// compile) are the cause of any type error that follows.
		return nil, pv.errs[0]
	}
	if err != nil {
		return nil, compileError(src, err)
	}
	t := prog.Node().Type()
	switch want {
	case Bool:
		if t != nil && t.Kind() != reflect.Bool && t.Kind() != reflect.Interface {
			return nil, &Error{Msg: fmt.Sprintf("the expression gives %s; it must give a boolean (true or false)", typeName(t))}
		}
	case Value:
		if t != nil {
			switch t.Kind() {
			case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
				if t != timeType && t != bytesType {
					return nil, &Error{Msg: fmt.Sprintf("the expression gives %s, which is not a header value (a string, number, boolean, time or nil); wrap it in toJSON(...) to write it as JSON", typeName(t))}
				}
			case reflect.Func:
				return nil, &Error{Msg: "the expression gives a function; call it"}
			}
		}
	}
	p := &Program{src: src, prog: prog, want: want}
	if want == Value {
		p.direct = directValue(prog.Node(), c)
	} else {
		p.fast = fastBool(prog.Node())
	}
	return p, nil
}

// maxSource and maxNesting bound the text of an expression and how deep
// its brackets nest, so that parsing it cannot exhaust the stack (expr's
// parser recurses; parentheses are not nodes, so MaxNodes does not bound
// them).
const (
	maxSource  = 64 << 10
	maxNesting = 100
)

// checkNesting fails when brackets outside string literals nest deeper
// than maxNesting.
func checkNesting(src string) *Error {
	depth, col := 0, 0
	var quote rune // the quote of the string literal we are in, or 0
	escaped := false
	for _, r := range src {
		col++
		switch {
		case quote != 0:
			switch {
			case escaped:
				escaped = false
			case r == '\\' && quote != '`':
				escaped = true
			case r == quote:
				quote = 0
			}
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case r == '(' || r == '[' || r == '{':
			depth++
			if depth > maxNesting {
				return &Error{Column: col, Msg: fmt.Sprintf("nested deeper than %d levels of brackets; simplify the expression", maxNesting)}
			}
		case r == ')' || r == ']' || r == '}':
			depth--
		}
	}
	return nil
}

var (
	timeType  = reflect.TypeOf(time.Time{})
	bytesType = reflect.TypeOf([]byte(nil))
)

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Map:
		return "a map"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64, reflect.Float32, reflect.Uint, reflect.Uint64, reflect.Uint8:
		return "a number"
	}
	if t == timeType {
		return "a time"
	}
	if t == reflect.TypeOf(time.Duration(0)) {
		return "a duration"
	}
	return t.String()
}

// compileError turns expr's error into an *Error with the column, and
// names our own helpers as a user wrote them.
func compileError(src string, err error) *Error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return &Error{Msg: cleanMessage(err.Error())}
	}
	msg := cleanMessage(fe.Message)
	if name, ok := strings.CutPrefix(msg, "unknown func "); ok {
		msg += suggest(strings.TrimSuffix(name, "()"))
	} else if name, ok := strings.CutPrefix(msg, "unknown name "); ok {
		msg += suggest(name)
	}
	if msg == "invalid char escape" {
		msg += "; inside double quotes a backslash starts an escape: write regular expressions in backquotes, as `\\\\d+` in a properties file (which takes one backslash of each pair)"
	}
	col := fe.Column + 1
	if fe.Line > 1 { // a value spread over lines with \n escapes
		msg = fmt.Sprintf("line %d of the expression: %s", fe.Line, msg)
	}
	return &Error{Column: col, Msg: msg}
}

// cleanMessage hides the internal argument and types from expr's messages.
func cleanMessage(m string) string {
	m = strings.ReplaceAll(m, "*eventexpr.State, ", "")
	m = strings.ReplaceAll(m, "*timelayout.Layout", "string")
	m = strings.ReplaceAll(m, "*regexp.Regexp", "string")
	m = strings.ReplaceAll(m, "*time.Location", "string")
	m = strings.ReplaceAll(m, "eventexpr.Vars", "the event")
	return m
}

// suggest returns "; did you mean X?" for a misspelt name, or a list of
// the helpers.
func suggest(name string) string {
	best, bestD := "", 3
	for _, n := range Names() {
		if d := config.EditDistance(strings.ToLower(name), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		return fmt.Sprintf("; did you mean %s?", best)
	}
	return "; the event is body and headers, and the helpers are " + strings.Join(helperNames, ", ") + ", besides expr's builtins"
}

// Names lists every name an expression may use: the event's, the helpers'
// and expr's builtins'.
func Names() []string {
	out := []string{"body", "headers"}
	out = append(out, helperNames...)
	out = append(out, exprBuiltins...)
	return out
}

// exprBuiltins are expr's builtins an expression may call (see
// functions for those replaced by budgeted versions).
var exprBuiltins = []string{"all", "none", "any", "one", "filter", "map", "find", "findIndex", "findLast", "findLastIndex",
	"count", "sum", "groupBy", "sortBy", "reduce", "len", "type", "abs", "ceil", "floor", "round", "int", "float", "string",
	"trim", "trimPrefix", "trimSuffix", "upper", "lower", "split", "splitAfter", "replace", "repeat", "join", "indexOf",
	"lastIndexOf", "hasPrefix", "hasSuffix", "max", "min", "mean", "median", "toJSON", "fromJSON", "toBase64", "fromBase64",
	"now", "duration", "date", "timezone", "first", "last", "get", "take", "keys", "values", "toPairs", "fromPairs",
	"reverse", "uniq", "concat", "flatten", "sort"}

// walkNodes calls f on every node of the tree under n.
func walkNodes(n ast.Node, f func(ast.Node)) {
	ast.Walk(&n, visitorFunc(func(p *ast.Node) { f(*p) }))
}

type visitorFunc func(*ast.Node)

func (v visitorFunc) Visit(n *ast.Node) { v(n) }
