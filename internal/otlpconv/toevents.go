package otlpconv

import (
	"encoding/hex"
	"strconv"
	"unsafe"

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
	texts      texts  // the header values written as text (times, ids)
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
	c.texts.chunk = min(n*textsPerRecord, maxTextsChunk)
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
	t, o := uint64(lr.Timestamp()), uint64(lr.ObservedTimestamp())
	sevText, sevNum := lr.SeverityText(), lr.SeverityNumber()
	traceID, spanID := lr.TraceID(), lr.SpanID()
	flags, eventName, dropped := lr.Flags(), lr.EventName(), lr.DroppedAttributesCount()

	// The exact number of headers, so that they are allocated once.
	n := len(c.res) + len(c.scope) + attrs.Len()
	if t != 0 || o != 0 {
		n++ // timestamp
	}
	if t != 0 && (t%1e6 != 0 || o != 0) {
		n++ // otel.time_unix_nano
	}
	n += count(o != 0) + count(sevText != "") + count(sevNum != 0) + count(!traceID.IsEmpty()) +
		count(!spanID.IsEmpty()) + count(flags != 0) + count(eventName != "") + count(dropped != 0)
	body := lr.Body()
	if body.Type() != pcommon.ValueTypeStr {
		n++ // otel.body_type, for most types
	}
	if len(c.resTypes)+len(c.scopeTypes) > 0 {
		n++ // otel.types; a record's own typed attribute may add it below
	}
	// One spare: a record's own typed attribute adds otel.types, which
	// is not counted above unless the resource or scope has one.
	h := make(event.Headers, 0, n+1)
	for _, e := range c.res {
		h.Set(e.k, e.v)
	}
	for _, e := range c.scope {
		h.Set(e.k, e.v)
	}
	switch {
	case t >= 1e6 && (t%1e6 != 0 || o != 0):
		// The milliseconds are the nanoseconds' digits but the last six:
		// one number written, not two.
		ns := c.texts.uint(t)
		h.Set(HeaderTime, ns)
		h.Set(HeaderTimestamp, ns[:len(ns)-6])
	case t != 0:
		h.Set(HeaderTimestamp, c.texts.uint(t/1e6))
		if t%1e6 != 0 || o != 0 {
			h.Set(HeaderTime, c.texts.uint(t))
		}
	case o != 0:
		h.Set(HeaderTimestamp, c.texts.uint(o/1e6))
	}
	if o != 0 {
		h.Set(HeaderObservedTime, c.texts.uint(o))
	}
	if sevText != "" {
		h.Set(HeaderSeverityText, sevText)
	}
	if sevNum != 0 {
		h.Set(HeaderSeverityNumber, strconv.Itoa(int(sevNum)))
	}
	if !traceID.IsEmpty() {
		h.Set(HeaderTraceID, c.texts.hex(traceID[:]))
	}
	if !spanID.IsEmpty() {
		h.Set(HeaderSpanID, c.texts.hex(spanID[:]))
	}
	if flags != 0 {
		h.Set(HeaderTraceFlags, c.texts.uint(uint64(flags)))
	}
	if eventName != "" {
		h.Set(HeaderEventName, eventName)
	}
	if dropped != 0 {
		h.Set(HeaderDroppedAttributes, c.texts.uint(uint64(dropped)))
	}

	var data []byte
	var btype string
	switch body.Type() {
	case pcommon.ValueTypeStr, pcommon.ValueTypeBytes:
		start := len(c.arena)
		c.arena, btype = bodyBytes(c.arena, body)
		// Capped, so that an interceptor appending to one body cannot
		// write into the next.
		data = c.arena[start:len(c.arena):len(c.arena)]
	default:
		data, btype = bodyBytes(nil, body)
	}
	if btype != "" {
		h.Set(HeaderBodyType, btype)
	}

	c.recTypes = c.recTypes[:0]
	for k, v := range attrs.All() {
		name := k
		if c.m.escapes(k) {
			name = PrefixEscaped + k
		}
		s, typ := c.text(v)
		h.Set(name, s)
		if typ != "" {
			c.recTypes = appendType(c.recTypes, name, typ)
		}
	}
	if len(c.resTypes)+len(c.scopeTypes)+len(c.recTypes) > 0 {
		h.Set(HeaderTypes, c.types())
	}
	return event.Event{Headers: h, Body: data, ReceivedAt: receivedAt}
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// text is the package's text, with the numbers of a record's attributes
// written into c.texts.
func (c *toEvents) text(v pcommon.Value) (string, string) {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return c.texts.int(v.Int()), TypeInt
	case pcommon.ValueTypeDouble:
		return c.texts.float(v.Double()), TypeDouble
	}
	return text(v)
}

// Sizes of the texts' chunks: a chunk per request for records with a time
// (timestamp and otel.time_unix_nano: 32 bytes), more for those with more,
// and at most 64 KiB, so that an event kept alone (a channel may hold a few
// of a request's events longer than the rest) keeps little besides itself.
const (
	textsPerRecord = 40
	maxTextsChunk  = 64 << 10
	minTextsChunk  = 256
)

// texts is where the header values the mapping writes as text (times, ids,
// numbers) are written: chunks of bytes, each value a string over its
// bytes, so that an Events call allocates a chunk rather than a string per
// value. A chunk's bytes are never written again once a string is made
// over them, which is what makes the strings immutable, as strings must
// be.
type texts struct {
	buf   []byte
	chunk int // the size of the next chunk
}

// room makes sure that n more bytes fit in the current chunk.
func (t *texts) room(n int) {
	if cap(t.buf)-len(t.buf) < n {
		t.buf = make([]byte, 0, max(n, t.chunk, minTextsChunk))
	}
}

// since returns the bytes written from start as a string.
func (t *texts) since(start int) string {
	if len(t.buf) == start {
		return ""
	}
	return unsafe.String(&t.buf[start], len(t.buf)-start)
}

func (t *texts) uint(v uint64) string {
	t.room(20)
	start := len(t.buf)
	t.buf = strconv.AppendUint(t.buf, v, 10)
	return t.since(start)
}

func (t *texts) int(v int64) string {
	t.room(20)
	start := len(t.buf)
	t.buf = strconv.AppendInt(t.buf, v, 10)
	return t.since(start)
}

func (t *texts) float(v float64) string {
	t.room(24)
	start := len(t.buf)
	t.buf = strconv.AppendFloat(t.buf, v, 'g', -1, 64)
	return t.since(start)
}

// hex writes b in lower-case hex digits, as pdata's TraceID.String does.
func (t *texts) hex(b []byte) string {
	t.room(2 * len(b))
	start := len(t.buf)
	t.buf = hex.AppendEncode(t.buf, b)
	return t.since(start)
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
