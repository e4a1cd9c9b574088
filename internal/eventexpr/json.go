package eventexpr

import (
	"errors"
	"fmt"
	"math"
	"strings"
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
	ptr    *byte
	n      int
	p      *fastjson.Parser
	root   *fastjson.Value // nil: not JSON
	valid  bool
	err    error // over budget
	whole  any   // the materialized root, once asked for
	wholed bool
	// lo and hi bound the addresses of the strings handed out, which all
	// lie in the parser's copy of the input.
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
		d := &c.docs[i]
		if d.p != nil {
			if d.n <= bigParse {
				parserPool.Put(d.p)
			}
		}
		*d = jsonDoc{}
	}
	c.n, c.next = 0, 0
}

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

// parse returns the document of s, parsing it on first use.
func (s *State) parse(str string) *jsonDoc {
	c := &s.json
	ptr := unsafe.StringData(str)
	for i := range c.docs[:c.n] {
		if d := &c.docs[i]; d.ptr == ptr && d.n == len(str) {
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
		if d.p != nil && d.n <= bigParse {
			parserPool.Put(d.p)
		}
		*d = jsonDoc{}
	}
	d.ptr, d.n = ptr, len(str)
	if len(str) > s.c.limits.JSONBytes {
		d.err = fmt.Errorf("json: the string is %d bytes, over the limit of %d (jsonMaxBytes)", len(str), s.c.limits.JSONBytes)
		return d
	}
	if tooManyValues(str, int(s.c.limits.Budget)) {
		d.err = fmt.Errorf("json: the string holds more than %d values, over the budget", s.c.limits.Budget)
		return d
	}
	d.p = parserPool.Get()
	root, err := d.p.Parse(str)
	if err != nil {
		if strings.Contains(err.Error(), "too big depth") {
			d.err = fmt.Errorf("json: nested deeper than %d levels, over the limit", MaxJSONDepth)
		}
		return d
	}
	// fastjson is lenient (it takes 1.2.3 for a number, NaN, raw
	// control characters); json() answers nil for what is not JSON.
	// Depth is bounded by the parse above, so the validator's recursion is.
	if fastjson.Validate(str) != nil {
		return d
	}
	d.root, d.valid = root, true
	return d
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
		v, err := s.jsonValue(d, d.root)
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
	v := d.root
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

// tooManyValues reports whether the JSON text s holds more than limit
// values (a parse takes memory in proportion to its values: a megabyte of
// "[0,0,0,..." would take over a hundred). Separators and openers bound
// the values from above; only when that bound is over the limit are those
// inside strings told apart.
func tooManyValues(s string, limit int) bool {
	if strings.Count(s, ",")+strings.Count(s, "[")+strings.Count(s, "{")+1 <= limit {
		return false
	}
	n, in, esc := 1, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case in:
			switch c {
			case '\\':
				esc = true
			case '"':
				in = false
			}
		case c == '"':
			in = true
		case c == ',' || c == '[' || c == '{':
			n++
			if n > limit {
				return true
			}
		}
	}
	return false
}
