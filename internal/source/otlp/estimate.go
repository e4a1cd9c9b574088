package otlpsource

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// What decoding a request (pdata's structures) and making its events
// (bodies, header maps, header values) allocate, as a function of the
// request's shape: per byte, per log record, and per value (an attribute, a
// body, an element of an array or map). A record or value costs far more
// than its bytes on the wire (an empty record is two bytes of protobuf and
// a few hundred of Go structures and header map), so a request's bytes
// alone cannot bound what it takes. TestEstimateBoundsAllocation checks
// these against what is really allocated, for ordinary and degenerate
// requests.
const (
	costPerByte   = 3
	costPerRecord = 640
	costPerValue  = 240
	// maxDepth bounds how deeply values nest (arrays and maps in maps): the
	// decoders recurse once per level (pdata's protobuf decoder stops at
	// 100 nested messages itself: 33 levels of maps, 50 of arrays).
	maxDepth = 32
	// jsonLevels is the fewest brackets a level of values takes in
	// OTLP/JSON ({"arrayValue":{"values":[...]}}; a map takes 4), and
	// jsonRequestLevels the request's own brackets above the first value.
	jsonLevels, jsonRequestLevels = 3, 12
)

// shape is what a request holds.
type shape struct {
	records, values int
}

func (sh shape) cost(wire int) int64 {
	return int64(wire)*costPerByte + int64(sh.records)*costPerRecord + int64(sh.values)*costPerValue
}

// errTooDeep is a request whose values nest deeper than maxDepth.
var errTooDeep = fmt.Errorf("values nest deeper than %d levels", maxDepth)

// The OTLP messages a logs request holds, as scanProto walks them.
type msg int

const (
	mRequest msg = iota // ExportLogsServiceRequest
	mResourceLogs
	mResource
	mScopeLogs
	mScope
	mRecord
	mKeyValue
	mAnyValue
	mArray
	mKVList
)

// fields maps a message's fields that are messages themselves to their
// types; other fields are skipped.
var fields = [...]map[protowire.Number]msg{
	mRequest:      {1: mResourceLogs},
	mResourceLogs: {1: mResource, 2: mScopeLogs},
	mResource:     {1: mKeyValue},
	mScopeLogs:    {1: mScope, 2: mRecord},
	mScope:        {3: mKeyValue},
	mRecord:       {5: mAnyValue, 6: mKeyValue},
	mKeyValue:     {2: mAnyValue},
	mAnyValue:     {5: mArray, 6: mKVList},
	mArray:        {1: mAnyValue},
	mKVList:       {1: mKeyValue},
}

// scanProto counts the records and values of a protobuf
// ExportLogsServiceRequest without decoding it. It fails for bytes that are
// not protobuf, and for values nested deeper than maxDepth.
func scanProto(b []byte) (shape, error) {
	var sh shape
	err := walk(b, mRequest, 0, &sh)
	return sh, err
}

// walk scans message b of type m; depth is how many values enclose it.
func walk(b []byte, m msg, depth int, sh *shape) error {
	if m == mAnyValue {
		if depth++; depth > maxDepth {
			return errTooDeep
		}
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		sub, isMsg := fields[m][num]
		if !isMsg || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch sub {
		case mRecord:
			sh.records++
		case mKeyValue, mAnyValue:
			sh.values++
		}
		if err := walk(v, sub, depth, sh); err != nil {
			return err
		}
	}
	return nil
}

// scanJSON bounds the shape of an OTLP/JSON request without decoding it:
// the objects at the top level of a logRecords (or log_records) array are
// records, every other object a value (an upper bound: a resource or scope
// is counted as a value too). It fails for objects and arrays nested deeper
// than maxDepth (beyond the request's own levels) or brackets that do not
// balance.
func scanJSON(b []byte) (shape, error) {
	var sh shape
	depth, recDepth := 0, -1
	key := false // the last token was the key logRecords, maybe followed by ':'
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch c {
		case '"':
			start := i + 1
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			s := b[start:min(i, len(b))]
			key = string(s) == "logRecords" || string(s) == "log_records"
			continue
		case ' ', '\t', '\n', '\r', ':':
			continue
		case '[':
			depth++
			if key && recDepth < 0 {
				recDepth = depth
			}
		case '{':
			if depth == recDepth {
				sh.records++
			} else {
				sh.values++
			}
			depth++
		case ']', '}':
			if depth == recDepth && c == ']' {
				recDepth = -1
			}
			if depth--; depth < 0 {
				return sh, errors.New("unbalanced brackets")
			}
		}
		key = false
		if depth > jsonLevels*maxDepth+jsonRequestLevels {
			return sh, errTooDeep
		}
	}
	return sh, nil
}
