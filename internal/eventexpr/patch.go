package eventexpr

import (
	"fmt"
	"reflect"
	"regexp"
	"time"

	"github.com/expr-lang/expr/ast"

	"github.com/sluicehq/sluice/internal/javaregex"
	"github.com/sluicehq/sluice/internal/timelayout"
)

// patcher rewrites a parsed expression before it is checked and compiled:
//   - the constant arguments of the helpers (time layouts, zones, regular
//     expressions) are compiled, so that a bad one is a configuration
//     error at its column, and replaced by what they compile to;
//   - the helpers that need the event's State get it as a first argument;
//   - json(body) and member accesses on json(...) with constant keys
//     (json(body).a.b[0]) read the parsed document directly, without
//     building maps for what is not asked for;
//   - headers, which an event holds as a list of pairs (event.Headers),
//     is read without making a map of it: headers["k"] and headers.k
//     become a lookup of k, "k" in headers a test for it, and only
//     headers used as a whole (toJSON(headers), keys(headers)) makes the
//     map, once per event.
//
// ast.Walk visits children before their parent, so a chain of member
// accesses is folded from the inside out.
type patcher struct {
	c    *Compiler
	errs []*Error
	// shadowed is set (by shadowScan, which runs first) when the
	// expression declares a variable named body or json: then json(body)
	// is left as written. headersShadowed is set when it declares one
	// named headers, which is then that variable.
	shadowed, headersShadowed bool
}

// shadowScan looks for variables that shadow body, json or headers.
type shadowScan struct{ p *patcher }

func (s shadowScan) Visit(node *ast.Node) {
	if n, ok := (*node).(*ast.VariableDeclaratorNode); ok {
		switch n.Name {
		case "body", "json":
			s.p.shadowed = true
		case "headers":
			s.p.headersShadowed = true
		}
	}
}

func (p *patcher) errorf(n ast.Node, format string, args ...any) {
	p.errs = append(p.errs, &Error{Column: startOf(n) + 1, Msg: fmt.Sprintf(format, args...)})
}

// startOf returns where the text of n begins: a node's own location is its
// operator's (the dot of a.b), so take the leftmost in its subtree.
func startOf(n ast.Node) int {
	from := n.Location().From
	walkNodes(n, func(c ast.Node) {
		if f := c.Location().From; f < from {
			from = f
		}
	})
	return from
}

func ident(name string) *ast.IdentifierNode { return &ast.IdentifierNode{Value: name} }

func (p *patcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.IdentifierNode:
		if n.Value == "headers" && !p.headersShadowed {
			p.patchCall(node, headersFn)
		}
	case *ast.CallNode:
		p.call(node, n)
	case *ast.MemberNode:
		if isCall(n.Node, headersFn) && !n.Method {
			// headers.k, headers["k"], headers?.k: a header is never
			// nil, so the optional access is the same lookup.
			p.patchCall(node, headerFn, n.Property)
			return
		}
		p.member(node, n)
	case *ast.BinaryNode:
		if n.Operator == "in" && isCall(n.Right, headersFn) {
			p.patchCall(node, hasHeaderFn, n.Left)
		}
	}
}

// patchCall replaces node with a call of fn with the State and args. The
// names it adds take the place of node's text, so that an error in the
// call is reported where node was written.
func (p *patcher) patchCall(node *ast.Node, fn string, args ...ast.Node) {
	at := (*node).Location()
	at.From = startOf(*node)
	callee, state := ident(fn), ident(stateVar)
	callee.SetLocation(at)
	state.SetLocation(at)
	ast.Patch(node, &ast.CallNode{Callee: callee, Arguments: append([]ast.Node{state}, args...)})
}

// isCall reports whether n is a call of the function named fn.
func isCall(n ast.Node, fn string) bool {
	c, ok := n.(*ast.CallNode)
	if !ok {
		return false
	}
	id, ok := c.Callee.(*ast.IdentifierNode)
	return ok && id.Value == fn
}

func (p *patcher) call(node *ast.Node, n *ast.CallNode) {
	id, ok := n.Callee.(*ast.IdentifierNode)
	if !ok {
		return
	}
	name := id.Value
	for i, kind := range constArgs[name] {
		if i >= len(n.Arguments) {
			continue
		}
		v, err := p.constant(n.Arguments[i], kind, name)
		if err != nil {
			p.errorf(n.Arguments[i], "%s", err)
			continue
		}
		loc := n.Arguments[i].Location()
		c := &ast.ConstantNode{Value: v}
		c.SetLocation(loc)
		c.SetType(reflect.TypeOf(v))
		n.Arguments[i] = c
	}
	if (name == "parseTime" || name == "formatTime") && len(n.Arguments) == 2 {
		// Without a zone, the component's (timeZone, else local).
		z := &ast.ConstantNode{Value: p.c.loc}
		z.SetType(locationT)
		n.Arguments = append(n.Arguments, z)
	}
	if name == "regexExtract" && len(n.Arguments) == 3 {
		p.checkGroup(n)
	}
	if name == "json" && len(n.Arguments) == 1 && !p.shadowed {
		if b, ok := n.Arguments[0].(*ast.IdentifierNode); ok && b.Value == "body" {
			ast.Patch(node, &ast.CallNode{Callee: ident(jsonBodyFn), Arguments: []ast.Node{ident(stateVar)}})
			return
		}
	}
	if stateful[name] {
		ast.Patch(node, &ast.CallNode{Callee: n.Callee, Arguments: append([]ast.Node{ident(stateVar)}, n.Arguments...)})
	}
}

// constant compiles the constant argument arg of helper fn.
func (p *patcher) constant(arg ast.Node, kind constKind, fn string) (any, error) {
	s, ok := arg.(*ast.StringNode)
	if !ok {
		return nil, fmt.Errorf("the %s of %s must be a constant string in quotes, read when the configuration is", kind, fn)
	}
	switch kind {
	case constLayout:
		l, err := timelayout.New(s.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: time layout %q: %v", fn, s.Value, err)
		}
		return l, nil
	case constZone:
		loc, err := time.LoadLocation(s.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: time zone %q: %v (use an IANA name such as Europe/Paris, or UTC or Local)", fn, s.Value, err)
		}
		return loc, nil
	}
	re, err := regexp.Compile(s.Value)
	if err != nil {
		if what := javaregex.Unsupported(err); what != "" {
			return nil, fmt.Errorf("%s: %q uses %s, which Go's RE2 regular expressions do not support; rewrite the pattern without it (%v)", fn, s.Value, what, err)
		}
		return nil, fmt.Errorf("%s: %q is not a valid regular expression (Go RE2 syntax): %v", fn, s.Value, err)
	}
	return re, nil
}

// checkGroup checks a constant group of regexExtract against its pattern.
func (p *patcher) checkGroup(n *ast.CallNode) {
	c, ok := n.Arguments[1].(*ast.ConstantNode)
	if !ok {
		return
	}
	re := c.Value.(*regexp.Regexp)
	switch g := n.Arguments[2].(type) {
	case *ast.IntegerNode:
		if g.Value < 0 || g.Value > re.NumSubexp() {
			p.errorf(g, "regexExtract: the pattern %q has %d group(s); there is no group %d", re, re.NumSubexp(), g.Value)
		}
	case *ast.StringNode:
		if re.SubexpIndex(g.Value) < 0 {
			p.errorf(g, "regexExtract: the pattern %q has no group named %q", re, g.Value)
		}
	}
}

// member folds a constant member access on json(...) into the path the
// json path functions read.
func (p *patcher) member(node *ast.Node, n *ast.MemberNode) {
	if n.Optional || n.Method {
		return
	}
	var key ast.Node
	switch k := n.Property.(type) {
	case *ast.StringNode:
		key = &ast.StringNode{Value: k.Value}
	case *ast.IntegerNode:
		key = &ast.IntegerNode{Value: k.Value}
	default:
		return
	}
	call, ok := n.Node.(*ast.CallNode)
	if !ok {
		return
	}
	id, ok := call.Callee.(*ast.IdentifierNode)
	if !ok {
		return
	}
	var repl *ast.CallNode
	switch id.Value {
	case jsonBodyFn:
		repl = &ast.CallNode{Callee: ident(jsonBodyPathFn), Arguments: []ast.Node{ident(stateVar), key}}
	case jsonBodyPathFn, jsonPathFn:
		args := append(append([]ast.Node(nil), call.Arguments...), key)
		repl = &ast.CallNode{Callee: ident(id.Value), Arguments: args}
	case "json":
		// json(ev·, x), already given its State.
		if len(call.Arguments) != 2 || p.shadowed {
			return
		}
		repl = &ast.CallNode{Callee: ident(jsonPathFn), Arguments: []ast.Node{call.Arguments[0], call.Arguments[1], key}}
	default:
		return
	}
	ast.Patch(node, repl)
}

// budgetPatcher makes loops and string concatenation spend the per-event
// budget. It runs after patcher, on a checked tree, so that it sees the
// types of the operands of +.
type budgetPatcher struct{}

func (budgetPatcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.PredicateNode:
		if c, ok := n.Node.(*ast.CallNode); ok {
			if id, ok := c.Callee.(*ast.IdentifierNode); ok && id.Value == stepFn {
				return // already counted
			}
		}
		step := &ast.CallNode{Callee: ident(stepFn), Arguments: []ast.Node{ident(stateVar), n.Node}}
		step.SetLocation(n.Node.Location())
		n.Node = step
	case *ast.BinaryNode:
		if n.Operator != "+" {
			return
		}
		if _, ok := n.Left.(*ast.StringNode); ok {
			if _, ok := n.Right.(*ast.StringNode); ok {
				return // folded by the optimizer
			}
		}
		ls, lu := kindOf(n.Left)
		rs, ru := kindOf(n.Right)
		var fn string
		switch {
		case ls && rs:
			fn = concatFn
		case (ls || lu) && (rs || ru):
			fn = addFn
		default:
			return
		}
		loc := n.Location()
		c := &ast.CallNode{Callee: ident(fn), Arguments: []ast.Node{ident(stateVar), n.Left, n.Right}}
		*node = c
		c.SetLocation(loc)
	}
}

// kindOf reports whether n is known to be a string, or of unknown type.
func kindOf(n ast.Node) (isString, unknown bool) {
	t := n.Type()
	if t == nil {
		return false, true
	}
	switch t.Kind() {
	case reflect.String:
		return true, false
	case reflect.Interface:
		return false, true
	}
	return false, false
}
