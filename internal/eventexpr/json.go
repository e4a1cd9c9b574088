package eventexpr

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/expr-lang/expr/vm/runtime"
	"github.com/valyala/fastjson"
)

// jsonCache holds the JSON documents parsed for one event, so that every
// json(x) of the component's expressions on the same string parses it once.
// A document is keyed by the address and length of the string parsed.
type jsonCache struct {
	docs [maxDocs]jsonDoc
	n    int
	next int // slot to reuse when all are taken
}

// maxDocs is how many distinct strings one event's expressions may parse
// before the oldest parse is redone.
const maxDocs = 4

type jsonDoc struct {
	src   string // the text, keyed by its address and length
	valid bool
	err   error // over budget
	// scan has the root object's members; p and root are the tree,
	// parsed the first time something asks more than a member's value.
	scan   jsonScan
	p      *fastjson.Parser
	root   *fastjson.Value
	whole  any // the materialized root, once asked for
	wholed bool
	// lo and hi bound the addresses of the strings handed out from the
	// parser's copy of the input.
	lo, hi uintptr
}

// note records that b, in the parser's buffer, is handed out.
func (d *jsonDoc) note(b []byte) {
	if len(b) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if d.lo == 0 || p < d.lo {
		d.lo = p
	}
	if e := p + uintptr(len(b)); e > d.hi {
		d.hi = e
	}
}

// parserPool holds fastjson parsers; a parser keeps its buffers between
// parses, so a warm one parses without allocating.
var parserPool = fastjson.ParserPool{}

// bigParse is the size of input after which a parser is not pooled: its
// buffers would hold on to that much memory.
const bigParse = 64 << 10

func (c *jsonCache) reset() {
	for i := range c.docs[:c.n] {
		c.docs[i].clear()
	}
	c.n, c.next = 0, 0
}

// clear empties d for another text, keeping the scan's buffers and
// giving back the parser.
func (d *jsonDoc) clear() {
	if d.p != nil && len(d.src) <= bigParse {
		parserPool.Put(d.p)
	}
	members := d.scan.members[:0]
	if cap(members) > maxKeptMembers {
		members = nil // a text of a hundred thousand members: not kept in the pool for the next
	}
	*d = jsonDoc{scan: jsonScan{stack: d.scan.stack[:0], members: members}}
}

// maxKeptMembers bounds the members' buffer a document keeps for the next
// text (20 bytes each).
const maxKeptMembers = 1024

// owns reports whether address p lies in a string handed out from a
// parser's buffer.
func (c *jsonCache) owns(p uintptr) bool {
	for i := range c.docs[:c.n] {
		if d := &c.docs[i]; p >= d.lo && p < d.hi {
			return true
		}
	}
	return false
}

// parse returns the document of str, checking it on first use.
func (s *State) parse(str string) *jsonDoc {
	c := &s.json
	ptr := unsafe.StringData(str)
	for i := range c.docs[:c.n] {
		if d := &c.docs[i]; unsafe.StringData(d.src) == ptr && len(d.src) == len(str) {
			return d
		}
	}
	var d *jsonDoc
	if c.n < maxDocs {
		d = &c.docs[c.n]
		c.n++
	} else {
		d = &c.docs[c.next]
		c.next = (c.next + 1) % maxDocs
		d.clear()
	}
	d.src = str
	if len(str) > s.c.limits.JSONBytes {
		d.err = fmt.Errorf("json: the string is %d bytes, over the limit of %d (jsonMaxBytes)", len(str), s.c.limits.JSONBytes)
		return d
	}
	switch d.scan.scan(str, int(s.c.limits.Budget)) {
	case scanTooDeep:
		d.err = fmt.Errorf("json: nested deeper than %d levels, over the limit", MaxJSONDepth)
	case scanTooLarge:
		d.err = fmt.Errorf("json: the string holds more than %d values, over the budget", s.c.limits.Budget)
	case scanValid:
		d.valid = true
	}
	return d
}

// tree returns the root of d, a valid document, parsing it on first use.
func (d *jsonDoc) tree() (*fastjson.Value, error) {
	if d.root != nil {
		return d.root, nil
	}
	if d.p == nil {
		d.p = parserPool.Get()
	}
	root, err := d.p.Parse(d.src)
	if err != nil {
		// The scan let through what fastjson refuses: a bug, said as one.
		return nil, fmt.Errorf("json: the text passed the check but fastjson refused it: %w", err)
	}
	d.root = root
	return root, nil
}

// member returns the value of the root object's member named key when the
// scan can answer it alone: a string without escapes, a number, a
// boolean, or null or absent (nil). ok is false when the tree must.
func (d *jsonDoc) member(key string) (v dval, ok bool) {
	if !d.scan.rootObject {
		return dval{}, false
	}
	// The first member of the name answers, as fastjson's Get does.
	for i := range d.scan.members {
		m := &d.scan.members[i]
		if m.keyEscaped {
			return dval{}, false
		}
		if m.key(d.src) != key {
			continue
		}
		switch m.kind {
		case '"':
			return dval{k: dStr, s: d.src[m.valFrom+1 : m.valTo-1]}, true
		case 'n':
			return dval{}, true
		case 't':
			return dval{k: dAny, a: true}, true
		case 'f':
			return dval{k: dAny, a: false}, true
		case '{', '[', '\\':
			return dval{}, false
		}
		n, err := numberValue(m.val(d.src))
		if err != nil {
			return dval{}, false
		}
		return dval{k: dAny, a: n}, true
	}
	return dval{}, true
}

// jsonValue converts v to an expression value: objects to map[string]any,
// arrays to []any, numbers to int when whole and in range, else float64.
// Strings share the parser's buffer (own copies what escapes).
func (s *State) jsonValue(d *jsonDoc, v *fastjson.Value) (any, error) {
	switch v.Type() {
	case fastjson.TypeNull:
		return nil, nil
	case fastjson.TypeTrue:
		return true, nil
	case fastjson.TypeFalse:
		return false, nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		d.note(b)
		return bytesString(b), nil
	case fastjson.TypeNumber:
		return jsonNumber(v)
	case fastjson.TypeArray:
		a, _ := v.Array()
		if err := s.charge(uint(len(a)) + 1); err != nil {
			return nil, err
		}
		out := make([]any, len(a))
		for i, e := range a {
			x, err := s.jsonValue(d, e)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case fastjson.TypeObject:
		o, _ := v.Object()
		if err := s.charge(uint(o.Len()) + 1); err != nil {
			return nil, err
		}
		out := make(map[string]any, o.Len())
		var err error
		o.Visit(func(k []byte, e *fastjson.Value) {
			if err != nil {
				return
			}
			var x any
			x, err = s.jsonValue(d, e)
			out[string(k)] = x
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, nil
}

func jsonNumber(v *fastjson.Value) (any, error) {
	if i, err := v.Int64(); err == nil && i >= math.MinInt && i <= math.MaxInt {
		return int(i), nil
	}
	f, err := v.Float64()
	if err != nil {
		return nil, err
	}
	return f, nil
}

// numberValue is jsonNumber of a number's text.
func numberValue(text string) (any, error) {
	if i, err := strconv.ParseInt(text, 10, 64); err == nil && i >= math.MinInt && i <= math.MaxInt {
		return int(i), nil
	}
	return strconv.ParseFloat(text, 64)
}

// whole returns the materialized document of str, or nil if it is not
// JSON.
func (s *State) whole(str string) (any, error) {
	d := s.parse(str)
	if d.err != nil {
		return nil, d.err
	}
	if !d.valid {
		return nil, nil
	}
	if !d.wholed {
		root, err := d.tree()
		if err != nil {
			return nil, err
		}
		v, err := s.jsonValue(d, root)
		if err != nil {
			return nil, err
		}
		d.whole, d.wholed = v, true
	}
	return d.whole, nil
}

// errPath marks a path step that expr's member access would fail on; the
// message follows expr's.
var errPath = errors.New("cannot fetch")

// path returns json(str) followed by the member accesses keys (strings
// for object keys, ints for array indexes), as expr would give them on the
// materialized document, without materializing what is not asked for.
func (s *State) path(str string, keys []any) (any, error) {
	v, err := s.pathRaw(str, keys)
	if err != nil {
		return nil, err
	}
	return v.value(s)
}

// pathRaw is path, leaving the value found in the parse.
func (s *State) pathRaw(str string, keys []any) (dval, error) {
	d := s.parse(str)
	if d.err != nil {
		return dval{}, d.err
	}
	if !d.valid {
		return dval{}, fmt.Errorf("%w %v from <nil> (json() gave nil: not JSON)", errPath, keys[0])
	}
	if k, ok := keys[0].(string); ok && len(keys) == 1 {
		if v, ok := d.member(k); ok {
			return v, nil
		}
	}
	v, err := d.tree()
	if err != nil {
		return dval{}, err
	}
	for i, k := range keys {
		switch v.Type() {
		case fastjson.TypeObject:
			key, ok := k.(string)
			if !ok {
				return dval{}, fmt.Errorf("%w %v from map[string]interface {}: a map's keys are strings", errPath, k)
			}
			o, _ := v.Object()
			next := o.Get(key)
			if next == nil {
				if i == len(keys)-1 {
					return dval{}, nil
				}
				return dval{}, fmt.Errorf("%w %v from <nil> (no %q in the JSON object)", errPath, keys[i+1], key)
			}
			v = next
		case fastjson.TypeArray:
			idx, ok := k.(int)
			if !ok {
				return dval{}, fmt.Errorf("%w %v from []interface {}: a list's indexes are numbers", errPath, k)
			}
			a, _ := v.Array()
			if idx < 0 {
				idx += len(a)
			}
			if idx < 0 || idx >= len(a) {
				return dval{}, fmt.Errorf("index out of range: %v (array length is %d)", k, len(a))
			}
			v = a[idx]
		case fastjson.TypeNull:
			return dval{}, fmt.Errorf("%w %v from <nil>", errPath, k)
		default:
			// A scalar: let expr say what fetching from it gives.
			x, err := s.jsonValue(d, v)
			if err != nil {
				return dval{}, err
			}
			r, err := fetchRest(x, keys[i:])
			return dval{k: dAny, a: r}, err
		}
	}
	if v.Type() == fastjson.TypeNull {
		return dval{}, nil
	}
	return dval{k: dJSON, j: v, doc: d}, nil
}

// fetchRest applies expr's own member access to a scalar.
func fetchRest(x any, keys []any) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("%v", r)
		}
	}()
	for _, k := range keys {
		x = runtime.Fetch(x, k)
	}
	return x, nil
}
