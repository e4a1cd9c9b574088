package otlpconv

import (
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/sluicehq/sluice/internal/event"
)

// kv is one header.
type kv struct{ k, v string }

// toEvents is the state of one Events call: the headers every record of the
// current resource and scope shares, and the type fragments of their
// non-string attributes.
type toEvents struct {
	m          Mapping
	prefix     string
	arena      []byte // the string and bytes bodies, one allocation
	res, scope []kv
	resTypes   []byte // `"name":"int",` fragments
	scopeTypes []byte
	recTypes   []byte
	buf        []byte
	interned   map[string]string // otel.types values, shared by the events that have the same
}

// Events appends one event per log record of ld to dst, in order, each
// received at receivedAt (Unix nanoseconds), and returns dst. The events
// share no memory with ld.
func (m Mapping) Events(dst []event.Event, ld plog.Logs, receivedAt int64) []event.Event {
	c := toEvents{m: m, prefix: m.prefix()}
	total, n := 0, 0
	rls := ld.ResourceLogs()
	for i := range rls.Len() {
		sls := rls.At(i).ScopeLogs()
		for j := range sls.Len() {
			lrs := sls.At(j).LogRecords()
			n += lrs.Len()
			for k := range lrs.Len() {
				switch b := lrs.At(k).Body(); b.Type() {
				case pcommon.ValueTypeStr:
					total += len(b.Str())
				case pcommon.ValueTypeBytes:
					total += b.Bytes().Len()
				}
			}
		}
	}
	if cap(dst)-len(dst) < n {
		grown := make([]event.Event, len(dst), len(dst)+n)
		copy(grown, dst)
		dst = grown
	}
	c.arena = make([]byte, 0, total)
	for i := range rls.Len() {
		rl := rls.At(i)
		c.res, c.resTypes = c.res[:0], c.resTypes[:0]
		for k, v := range rl.Resource().Attributes().All() {
			c.res, c.resTypes = shared(c.res, c.resTypes, c.prefix+k, v)
		}
		if u := rl.SchemaUrl(); u != "" {
			c.res = append(c.res, kv{HeaderSchemaURL, u})
		}
		sls := rl.ScopeLogs()
		for j := range sls.Len() {
			sl := sls.At(j)
			c.scope, c.scopeTypes = c.scope[:0], c.scopeTypes[:0]
			sc := sl.Scope()
			if v := sc.Name(); v != "" {
				c.scope = append(c.scope, kv{HeaderScopeName, v})
			}
			if v := sc.Version(); v != "" {
				c.scope = append(c.scope, kv{HeaderScopeVersion, v})
			}
			if v := sl.SchemaUrl(); v != "" {
				c.scope = append(c.scope, kv{HeaderScopeSchemaURL, v})
			}
			for k, v := range sc.Attributes().All() {
				c.scope, c.scopeTypes = shared(c.scope, c.scopeTypes, PrefixScopeAttribute+k, v)
			}
			lrs := sl.LogRecords()
			for k := range lrs.Len() {
				dst = append(dst, c.event(lrs.At(k), receivedAt))
			}
		}
	}
	return dst
}

// shared adds the header of a resource or scope attribute.
func shared(hs []kv, types []byte, name string, v pcommon.Value) ([]kv, []byte) {
	s, typ := text(v)
	hs = append(hs, kv{name, s})
	if typ != "" {
		types = appendType(types, name, typ)
	}
	return hs, types
}

func appendType(b []byte, name, typ string) []byte {
	b = appendJSONString(b, name)
	b = append(b, ':', '"')
	b = append(b, typ...)
	return append(b, '"', ',')
}

func (c *toEvents) event(lr plog.LogRecord, receivedAt int64) event.Event {
	attrs := lr.Attributes()
	h := make(map[string]string, len(c.res)+len(c.scope)+attrs.Len()+6)
	for _, e := range c.res {
		h[e.k] = e.v
	}
	for _, e := range c.scope {
		h[e.k] = e.v
	}
	t, o := uint64(lr.Timestamp()), uint64(lr.ObservedTimestamp())
	switch {
	case t != 0:
		h[HeaderTimestamp] = strconv.FormatUint(t/1e6, 10)
		if t%1e6 != 0 || o != 0 {
			h[HeaderTime] = strconv.FormatUint(t, 10)
		}
	case o != 0:
		h[HeaderTimestamp] = strconv.FormatUint(o/1e6, 10)
	}
	if o != 0 {
		h[HeaderObservedTime] = strconv.FormatUint(o, 10)
	}
	if v := lr.SeverityText(); v != "" {
		h[HeaderSeverityText] = v
	}
	if v := lr.SeverityNumber(); v != 0 {
		h[HeaderSeverityNumber] = strconv.Itoa(int(v))
	}
	if id := lr.TraceID(); !id.IsEmpty() {
		h[HeaderTraceID] = id.String()
	}
	if id := lr.SpanID(); !id.IsEmpty() {
		h[HeaderSpanID] = id.String()
	}
	if v := lr.Flags(); v != 0 {
		h[HeaderTraceFlags] = strconv.FormatUint(uint64(v), 10)
	}
	if v := lr.EventName(); v != "" {
		h[HeaderEventName] = v
	}
	if v := lr.DroppedAttributesCount(); v != 0 {
		h[HeaderDroppedAttributes] = strconv.FormatUint(uint64(v), 10)
	}

	var body []byte
	var btype string
	switch b := lr.Body(); b.Type() {
	case pcommon.ValueTypeStr, pcommon.ValueTypeBytes:
		start := len(c.arena)
		c.arena, btype = bodyBytes(c.arena, b)
		// Capped, so that an interceptor appending to one body cannot
		// write into the next.
		body = c.arena[start:len(c.arena):len(c.arena)]
	default:
		body, btype = bodyBytes(nil, b)
	}
	if btype != "" {
		h[HeaderBodyType] = btype
	}

	c.recTypes = c.recTypes[:0]
	for k, v := range attrs.All() {
		name := k
		if c.m.escapes(k) {
			name = PrefixEscaped + k
		}
		s, typ := text(v)
		h[name] = s
		if typ != "" {
			c.recTypes = appendType(c.recTypes, name, typ)
		}
	}
	if len(c.resTypes)+len(c.scopeTypes)+len(c.recTypes) > 0 {
		h[HeaderTypes] = c.types()
	}
	return event.Event{Headers: h, Body: body, ReceivedAt: receivedAt}
}

// types returns the otel.types value of the current event, the same string
// for every event with the same types.
func (c *toEvents) types() string {
	b := append(c.buf[:0], '{')
	b = append(b, c.resTypes...)
	b = append(b, c.scopeTypes...)
	b = append(b, c.recTypes...)
	b[len(b)-1] = '}' // over the last fragment's comma
	c.buf = b
	if s, ok := c.interned[string(b)]; ok {
		return s
	}
	if c.interned == nil {
		c.interned = map[string]string{}
	}
	s := string(b)
	c.interned[s] = s
	return s
}
