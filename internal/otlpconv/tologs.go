package otlpconv

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/sluicehq/sluice/internal/event"
)

// toLogs is the state of one Logs call.
type toLogs struct {
	m      Mapping
	prefix string
	ld     plog.Logs
	// The resources and scopes made so far, by their keys (a scope's key
	// starts with its resource's).
	resources map[string]plog.ResourceLogs
	scopes    map[string]plog.LogRecordSlice
	types     map[string]map[string]string // parsed otel.types values
	res       []kv                         // scratch of one event: resource headers
	scope     []kv                         // scope attribute headers
	attrs     []kv                         // record attribute headers
	// The grouping key of this event and of the one before, and the
	// records of that one's scope: consecutive events mostly share their
	// resource and scope, so that a comparison saves the lookup.
	key, lastKey []byte
	lastLrs      plog.LogRecordSlice
}

// fields are the headers of one event the mapping reads as record,
// resource or scope fields.
type fields struct {
	timestamp, time, observed, sevText, sevNum, traceID, spanID, flags string
	eventName, dropped, schemaURL, bodyType                            string
	scopeName, scopeVersion, scopeSchemaURL, types                     string
	has                                                                uint32 // bit per field present (see set)
}

const (
	hasTimestamp = 1 << iota
	hasTime
	hasObserved
	hasTypes
)

// Logs returns the OTLP logs for events, in their order within each scope.
// The logs hold the events' bodies without a copy: they are to be used (sent)
// before the events' bodies change.
// Events go to one ResourceLogs per distinct set of resource headers (the
// headers behind the resource prefix, with their types, and
// otel.schema_url), in the order of each set's first event, and within it
// to one ScopeLogs per distinct scope (otel.scope.name, .version,
// .schema_url and the otel.scope.attr.* headers). An event without any such
// header goes to a resource (or scope) without attributes.
func (m Mapping) Logs(events []event.Event) plog.Logs {
	c := toLogs{m: m, prefix: m.prefix(), ld: plog.NewLogs(),
		resources: map[string]plog.ResourceLogs{}, scopes: map[string]plog.LogRecordSlice{}}
	for i := range events {
		c.add(&events[i])
	}
	return c.ld
}

func (c *toLogs) add(e *event.Event) {
	c.res, c.scope, c.attrs = c.res[:0], c.scope[:0], c.attrs[:0]
	var f fields
	for k, v := range e.Headers.All() {
		switch {
		case strings.HasPrefix(k, c.prefix):
			c.res = append(c.res, kv{k, v})
		case strings.HasPrefix(k, "otel."):
			c.otel(&f, k, v)
		case k == HeaderTimestamp:
			f.timestamp, f.has = v, f.has|hasTimestamp
		default:
			c.attrs = append(c.attrs, kv{k, v})
		}
	}
	var types map[string]string
	if f.has&hasTypes != 0 {
		var valid bool
		types, valid = c.parseTypes(f.types)
		if !valid {
			c.attrs = append(c.attrs, kv{HeaderTypes, f.types})
		}
	}

	// The resource, and the scope within it.
	slices.SortFunc(c.res, byKey)
	slices.SortFunc(c.scope, byKey)
	k := c.key[:0]
	for _, h := range c.res {
		k = appendKey(k, h.k, h.v, types[h.k])
	}
	k = appendKey(k, HeaderSchemaURL, f.schemaURL, "")
	resEnd := len(k)
	k = append(k, 1)
	for _, h := range c.scope {
		k = appendKey(k, h.k, h.v, types[h.k])
	}
	k = appendKey(k, HeaderScopeName, f.scopeName, "")
	k = appendKey(k, HeaderScopeVersion, f.scopeVersion, "")
	k = appendKey(k, HeaderScopeSchemaURL, f.scopeSchemaURL, "")
	lrs, ok := c.lastLrs, c.lastKey != nil && bytes.Equal(k, c.lastKey)
	if !ok {
		lrs, ok = c.scopes[string(k)]
	}
	if !ok {
		rl, ok := c.resources[string(k[:resEnd])]
		if !ok {
			rl = c.ld.ResourceLogs().AppendEmpty()
			rl.SetSchemaUrl(f.schemaURL)
			attrs := rl.Resource().Attributes()
			attrs.EnsureCapacity(len(c.res))
			for _, h := range c.res {
				putAttr(attrs, h.k[len(c.prefix):], h.v, types[h.k])
			}
			c.resources[string(k[:resEnd])] = rl
		}
		sl := rl.ScopeLogs().AppendEmpty()
		sl.SetSchemaUrl(f.scopeSchemaURL)
		sc := sl.Scope()
		sc.SetName(f.scopeName)
		sc.SetVersion(f.scopeVersion)
		attrs := sc.Attributes()
		attrs.EnsureCapacity(len(c.scope))
		for _, h := range c.scope {
			putAttr(attrs, h.k[len(PrefixScopeAttribute):], h.v, types[h.k])
		}
		lrs = sl.LogRecords()
		c.scopes[string(k)] = lrs
	}
	// This key is the next event's last one; the last one's buffer is the
	// next event's to build in.
	c.key, c.lastKey, c.lastLrs = c.lastKey, k, lrs

	lr := lrs.AppendEmpty()
	c.record(lr, &f)
	switch {
	case f.bodyType == TypeBytes:
		lr.Body().SetEmptyBytes().FromRaw(e.Body)
	case f.bodyType != "":
		setText(lr.Body(), string(e.Body), f.bodyType)
	case utf8.Valid(e.Body):
		// The body's bytes as they are, not a copy: the logs are sent
		// before the event changes (see Logs), and nothing writes to a
		// string's bytes.
		lr.Body().SetStr(unsafe.String(unsafe.SliceData(e.Body), len(e.Body)))
	default:
		lr.Body().SetEmptyBytes().FromRaw(e.Body)
	}
	attrs := lr.Attributes()
	attrs.EnsureCapacity(len(c.attrs))
	for _, h := range c.attrs {
		name := strings.TrimPrefix(h.k, PrefixEscaped)
		putAttr(attrs, name, h.v, types[h.k])
	}
}

// otel files a header in the otel. namespace.
func (c *toLogs) otel(f *fields, k, v string) {
	switch k {
	case HeaderTime:
		f.time, f.has = v, f.has|hasTime
	case HeaderObservedTime:
		f.observed, f.has = v, f.has|hasObserved
	case HeaderSeverityText:
		f.sevText = v
	case HeaderSeverityNumber:
		f.sevNum = v
	case HeaderTraceID:
		f.traceID = v
	case HeaderSpanID:
		f.spanID = v
	case HeaderTraceFlags:
		f.flags = v
	case HeaderEventName:
		f.eventName = v
	case HeaderDroppedAttributes:
		f.dropped = v
	case HeaderSchemaURL:
		f.schemaURL = v
	case HeaderBodyType:
		f.bodyType = v
	case HeaderTypes:
		f.types, f.has = v, f.has|hasTypes
	case HeaderScopeName:
		f.scopeName = v
	case HeaderScopeVersion:
		f.scopeVersion = v
	case HeaderScopeSchemaURL:
		f.scopeSchemaURL = v
	default:
		if strings.HasPrefix(k, PrefixScopeAttribute) {
			c.scope = append(c.scope, kv{k, v})
		} else {
			c.attrs = append(c.attrs, kv{k, v})
		}
	}
}

// record sets lr's fields from f. A field whose header does not parse is
// sent as an attribute named as the header, so that nothing is lost.
func (c *toLogs) record(lr plog.LogRecord, f *fields) {
	keep := func(k, v string) { c.attrs = append(c.attrs, kv{k, v}) }
	var tsMillis uint64
	tsOK := false
	if f.has&hasTimestamp != 0 {
		if n, ok := parseUint(f.timestamp); ok && n <= math.MaxInt64/1_000_000 {
			tsMillis, tsOK = n, true
		} else {
			keep(HeaderTimestamp, f.timestamp)
		}
	}
	var observed uint64
	if f.has&hasObserved != 0 {
		if n, ok := parseUint(f.observed); ok {
			observed = n
			lr.SetObservedTimestamp(pcommon.Timestamp(n))
		} else {
			keep(HeaderObservedTime, f.observed)
		}
	}
	timeSet := false
	if f.has&hasTime != 0 {
		n, ok := parseUint(f.time)
		switch {
		case !ok:
			keep(HeaderTime, f.time)
		case !tsOK || n/1e6 == tsMillis:
			// The exact time, unless timestamp was changed since (an
			// interceptor's): then timestamp wins.
			lr.SetTimestamp(pcommon.Timestamp(n))
			timeSet = true
		}
	}
	if !timeSet && tsOK {
		// timestamp is the observed time's when the record had no time of
		// its own (otel.time_unix_nano absent, the observed time present
		// and of the same millisecond): then the time stays unset.
		if f.has&hasTime != 0 || f.has&hasObserved == 0 || observed/1e6 != tsMillis {
			lr.SetTimestamp(pcommon.Timestamp(tsMillis * 1e6))
		}
	}
	if f.sevText != "" {
		lr.SetSeverityText(f.sevText)
	}
	if f.sevNum != "" {
		if n, err := strconv.ParseInt(f.sevNum, 10, 32); err == nil {
			lr.SetSeverityNumber(plog.SeverityNumber(n))
		} else {
			keep(HeaderSeverityNumber, f.sevNum)
		}
	}
	if f.traceID != "" {
		var id [16]byte
		if n, err := hex.Decode(id[:], []byte(f.traceID)); err == nil && n == 16 && len(f.traceID) == 32 {
			lr.SetTraceID(id)
		} else {
			keep(HeaderTraceID, f.traceID)
		}
	}
	if f.spanID != "" {
		var id [8]byte
		if n, err := hex.Decode(id[:], []byte(f.spanID)); err == nil && n == 8 && len(f.spanID) == 16 {
			lr.SetSpanID(id)
		} else {
			keep(HeaderSpanID, f.spanID)
		}
	}
	if f.flags != "" {
		if n, err := strconv.ParseUint(f.flags, 10, 32); err == nil {
			lr.SetFlags(plog.LogRecordFlags(n))
		} else {
			keep(HeaderTraceFlags, f.flags)
		}
	}
	if f.eventName != "" {
		lr.SetEventName(f.eventName)
	}
	if f.dropped != "" {
		if n, err := strconv.ParseUint(f.dropped, 10, 32); err == nil {
			lr.SetDroppedAttributesCount(uint32(n))
		} else {
			keep(HeaderDroppedAttributes, f.dropped)
		}
	}
}

// putAttr puts the attribute name with the value text v of type typ. A
// name that is not valid UTF-8 (a Flume header may be any bytes) has its
// bad bytes replaced; a string value that is not valid UTF-8 is sent as
// bytes, which OTLP allows to be anything.
func putAttr(m pcommon.Map, name, v, typ string) {
	if !utf8.ValidString(name) {
		name = strings.ToValidUTF8(name, "\uFFFD")
	}
	if typ == "" && !utf8.ValidString(v) {
		typ = TypeBytes
	}
	if typ == "" {
		m.PutStr(name, v)
		return
	}
	setText(m.PutEmpty(name), v, typ)
}

// parseTypes returns the types an otel.types value names, and whether it
// was valid; the same value is parsed once per Logs call.
func (c *toLogs) parseTypes(s string) (map[string]string, bool) {
	if t, ok := c.types[s]; ok {
		return t, t != nil
	}
	if c.types == nil {
		c.types = map[string]map[string]string{}
	}
	var t map[string]string
	if err := json.Unmarshal([]byte(s), &t); err != nil || t == nil {
		c.types[s] = nil
		return nil, false
	}
	c.types[s] = t
	return t, true
}

// parseUint is strconv.ParseUint(s, 10, 64) without the cost of its error:
// the sink reads two or three times per event. Up to 19 digits cannot
// overflow; longer or empty texts go to strconv.
func parseUint(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 19 {
		n, err := strconv.ParseUint(s, 10, 64)
		return n, err == nil
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + uint64(d)
	}
	return n, true
}

func byKey(a, b kv) int { return strings.Compare(a.k, b.k) }

// appendKey appends one header to a grouping key; the zero bytes keep
// ("ab","c") apart from ("a","bc").
func appendKey(b []byte, k, v, typ string) []byte {
	b = append(b, k...)
	b = append(b, 0)
	b = append(b, v...)
	b = append(b, 0)
	b = append(b, typ...)
	return append(b, 0)
}
