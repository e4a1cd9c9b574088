package eventexpr

import (
	"fmt"
	"strconv"
	"time"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm/runtime"
	"github.com/valyala/fastjson"

	"github.com/sluicehq/sluice/internal/timelayout"
)

// The fast path evaluates the commonest shapes of expression without expr's
// VM, whose every value is boxed in an interface (an allocation per string
// or time) and whose every call allocates its argument list: comparisons
// of a header or a JSON field with constants, combined with && || !, and a
// header value that is a header, a JSON field, or parseTime of one. It is
// built from the tree expr checked and optimized, and gives the results the
// VM gives (TestFastPathMatchesVM and FuzzFastPath hold it to that); any
// other shape runs on the VM.

// dkind is what a fast source produced.
type dkind uint8

const (
	dNil  dkind = iota
	dStr        // s
	dJSON       // j, a value of doc's parse
	dAny        // a, a materialized value
)

type dval struct {
	k   dkind
	s   string
	j   *fastjson.Value
	doc *jsonDoc
	a   any
}

// value returns v as the VM would see it.
func (v dval) value(s *State) (any, error) {
	switch v.k {
	case dStr:
		return v.s, nil
	case dJSON:
		return s.jsonValue(v.doc, v.j)
	case dAny:
		return v.a, nil
	}
	return nil, nil
}

type (
	fsrc  func(s *State) (dval, error)
	fbool func(s *State) (bool, error)
)

// source compiles n when it is a header access, the body, a slice of one
// of those with constant bounds, json(body), or a folded JSON path on the
// body.
func source(n ast.Node) fsrc {
	switch n := n.(type) {
	case *ast.IdentifierNode:
		if n.Value != "body" {
			return nil
		}
		return func(s *State) (dval, error) { return dval{k: dStr, s: s.vars.Body}, nil }
	case *ast.SliceNode:
		from, okFrom := sliceBound(n.From, 0)
		to, okTo := sliceBound(n.To, -1)
		str := source(n.Node)
		if str == nil || !okFrom || !okTo {
			return nil
		}
		if _, ok := n.Node.(*ast.IdentifierNode); !ok {
			if !isCall(n.Node, headerFn) {
				return nil // a slice of a JSON value: a list, maybe
			}
		}
		hasTo := n.To != nil
		return func(s *State) (dval, error) {
			v, err := str(s)
			if err != nil || v.k != dStr {
				return v, err
			}
			a, b := from, to
			if !hasTo {
				b = len(v.s)
			}
			return dval{k: dStr, s: v.s[sliceRange(a, b, len(v.s)):sliceEnd(b, len(v.s))]}, nil
		}
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			return nil
		}
		switch id.Value {
		case headerFn:
			key, ok := n.Arguments[1].(*ast.StringNode)
			if !ok {
				return nil
			}
			name := key.Value
			return func(s *State) (dval, error) { return dval{k: dStr, s: s.headers.Value(name)}, nil }
		case jsonBodyFn:
			return func(s *State) (dval, error) {
				d := s.parse(s.vars.Body)
				if d.err != nil {
					return dval{}, d.err
				}
				if !d.valid {
					return dval{}, nil
				}
				root, err := d.tree()
				if err != nil {
					return dval{}, err
				}
				return dval{k: dJSON, j: root, doc: d}, nil
			}
		case jsonBodyPathFn:
			keys := make([]any, 0, len(n.Arguments)-1)
			for _, a := range n.Arguments[1:] {
				switch k := a.(type) {
				case *ast.StringNode:
					keys = append(keys, k.Value)
				case *ast.IntegerNode:
					keys = append(keys, k.Value)
				default:
					return nil
				}
			}
			return func(s *State) (dval, error) { return s.pathRaw(s.vars.Body, keys) }
		}
	}
	return nil
}

// sliceBound reads a constant slice bound; nil is def.
func sliceBound(n ast.Node, def int) (int, bool) {
	if n == nil {
		return def, true
	}
	i, ok := n.(*ast.IntegerNode)
	if !ok {
		return 0, false
	}
	return i.Value, true
}

// sliceEnd and sliceRange clamp the bounds of s[a:b] of a string of
// length n as expr's runtime.Slice does: negative bounds count from the
// end, and the result is empty rather than an error when they cross.
func sliceEnd(b, n int) int {
	if b < 0 {
		b += n
	}
	return min(max(b, 0), n)
}

func sliceRange(a, b, n int) int {
	if a < 0 {
		a += n
	}
	return min(max(a, 0), sliceEnd(b, n))
}

// constant returns the value of a literal node.
func constant(n ast.Node) (any, bool) {
	switch c := n.(type) {
	case *ast.StringNode:
		return c.Value, true
	case *ast.IntegerNode:
		return c.Value, true
	case *ast.FloatNode:
		return c.Value, true
	case *ast.BoolNode:
		return c.Value, true
	case *ast.NilNode:
		return nil, true
	}
	return nil, false
}

// equal is the VM's == between v and the constant c.
func equal(s *State, v dval, c any) (bool, error) {
	switch v.k {
	case dNil:
		return c == nil, nil
	case dStr:
		cs, ok := c.(string)
		return ok && v.s == cs, nil
	case dJSON:
		switch v.j.Type() {
		case fastjson.TypeString:
			cs, ok := c.(string)
			if !ok {
				return false, nil
			}
			b, _ := v.j.StringBytes()
			return bytesString(b) == cs, nil
		case fastjson.TypeNull:
			return c == nil, nil
		case fastjson.TypeObject, fastjson.TypeArray:
			if c == nil {
				return false, nil
			}
		}
	}
	x, err := v.value(s)
	if err != nil {
		return false, err
	}
	return runtime.Equal(x, c), nil
}

// fastBool compiles a boolean tree, or returns nil.
func fastBool(n ast.Node) fbool {
	switch n := n.(type) {
	case *ast.BoolNode:
		b := n.Value
		return func(*State) (bool, error) { return b, nil }
	case *ast.UnaryNode:
		if n.Operator != "!" && n.Operator != "not" {
			return nil
		}
		x := fastBool(n.Node)
		if x == nil {
			return nil
		}
		return func(s *State) (bool, error) {
			b, err := x(s)
			return !b, err
		}
	case *ast.BinaryNode:
		switch n.Operator {
		case "&&", "and", "||", "or":
			l, r := fastBool(n.Left), fastBool(n.Right)
			if l == nil || r == nil {
				return nil
			}
			if n.Operator == "&&" || n.Operator == "and" {
				return func(s *State) (bool, error) {
					b, err := l(s)
					if err != nil || !b {
						return false, err
					}
					return r(s)
				}
			}
			return func(s *State) (bool, error) {
				b, err := l(s)
				if err != nil || b {
					return b, err
				}
				return r(s)
			}
		case "==", "!=":
			src, c, ok := sourceAndConst(n.Left, n.Right)
			if !ok {
				return nil
			}
			neg := n.Operator == "!="
			return func(s *State) (bool, error) {
				v, err := src(s)
				if err != nil {
					return false, err
				}
				eq, err := equal(s, v, c)
				return eq != neg, err
			}
		case "in":
			src := source(n.Left)
			if src == nil {
				return nil
			}
			set, ok := stringSet(n.Right)
			if !ok {
				return nil
			}
			return func(s *State) (bool, error) {
				v, err := src(s)
				if err != nil {
					return false, err
				}
				switch v.k {
				case dStr:
					_, in := set[v.s]
					return in, nil
				case dJSON:
					if v.j.Type() == fastjson.TypeString {
						b, _ := v.j.StringBytes()
						_, in := set[bytesString(b)]
						return in, nil
					}
				}
				x, err := v.value(s)
				if err != nil {
					return false, err
				}
				return inSet(x, set)
			}
		}
	}
	return nil
}

// inSet is the VM's `in` of x in a constant string set, panics included.
func inSet(x any, set map[string]struct{}) (in bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			in, err = false, fmt.Errorf("%v", r)
		}
	}()
	return runtime.In(x, set), nil
}

// sourceAndConst matches a source compared with a constant, either way
// round.
func sourceAndConst(a, b ast.Node) (fsrc, any, bool) {
	if src := source(a); src != nil {
		if c, ok := constant(b); ok {
			return src, c, true
		}
	}
	if src := source(b); src != nil {
		if c, ok := constant(a); ok {
			return src, c, true
		}
	}
	return nil, nil, false
}

// stringSet returns the strings of an `in` list of string constants (as
// written, or as the optimizer turned it into a set).
func stringSet(n ast.Node) (map[string]struct{}, bool) {
	switch n := n.(type) {
	case *ast.ConstantNode:
		m, ok := n.Value.(map[string]struct{})
		return m, ok
	case *ast.ArrayNode:
		m := map[string]struct{}{}
		for _, e := range n.Nodes {
			s, ok := e.(*ast.StringNode)
			if !ok {
				return nil, false
			}
			m[s.Value] = struct{}{}
		}
		return m, true
	}
	return nil, false
}

// directValue returns a function that appends the header value of n to
// dst without the VM, for the shapes it knows, or nil.
func directValue(n ast.Node, _ *Compiler) func(dst []byte, s *State) ([]byte, bool, error) {
	if src := source(n); src != nil {
		return func(dst []byte, s *State) ([]byte, bool, error) {
			v, err := src(s)
			if err != nil {
				return dst, false, err
			}
			switch v.k {
			case dNil:
				return dst, false, nil
			case dStr:
				return append(dst, v.s...), true, nil
			case dJSON:
				if v.j.Type() == fastjson.TypeString {
					b, _ := v.j.StringBytes()
					return append(dst, b...), true, nil
				}
			}
			x, err := v.value(s)
			if err != nil {
				return dst, false, err
			}
			return s.appendHeaderValue(dst, x)
		}
	}
	call, ok := n.(*ast.CallNode)
	if !ok || len(call.Arguments) != 3 {
		return nil
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != "parseTime" {
		return nil
	}
	src := source(call.Arguments[0])
	lc, ok1 := call.Arguments[1].(*ast.ConstantNode)
	zc, ok2 := call.Arguments[2].(*ast.ConstantNode)
	if src == nil || !ok1 || !ok2 {
		return nil
	}
	l, ok1 := lc.Value.(*timelayout.Layout)
	loc, ok2 := zc.Value.(*time.Location)
	if !ok1 || !ok2 {
		return nil
	}
	return func(dst []byte, s *State) ([]byte, bool, error) {
		v, err := src(s)
		if err != nil {
			return dst, false, err
		}
		var t time.Time
		switch {
		case v.k == dStr:
			t, err = l.Parse(v.s, loc)
		case v.k == dJSON && v.j.Type() == fastjson.TypeString:
			b, _ := v.j.StringBytes()
			t, err = l.Parse(bytesString(b), loc)
		default:
			var x any
			if x, err = v.value(s); err == nil {
				t, err = parseTime(x, l, loc)
			}
		}
		if err != nil {
			return dst, false, err
		}
		return strconv.AppendInt(dst, t.UnixMilli(), 10), true, nil
	}
}
