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

// field returns the type of field num of message m when it is a message
// itself; false for other fields, which are skipped. A switch rather than
// a map per message: the scan looks up every field of every request.
func field(m msg, num protowire.Number) (msg, bool) {
	switch m {
	case mRequest:
		if num == 1 {
			return mResourceLogs, true
		}
	case mResourceLogs:
		switch num {
		case 1:
			return mResource, true
		case 2:
			return mScopeLogs, true
		}
	case mResource:
		if num == 1 {
			return mKeyValue, true
		}
	case mScopeLogs:
		switch num {
		case 1:
			return mScope, true
		case 2:
			return mRecord, true
		}
	case mScope:
		if num == 3 {
			return mKeyValue, true
		}
	case mRecord:
		switch num {
		case 5:
			return mAnyValue, true
		case 6:
			return mKeyValue, true
		}
	case mKeyValue:
		if num == 2 {
			return mAnyValue, true
		}
	case mAnyValue:
		switch num {
		case 5:
			return mArray, true
		case 6:
			return mKVList, true
		}
	case mArray, mKVList:
		if num == 1 {
			if m == mArray {
				return mAnyValue, true
			}
			return mKeyValue, true
		}
	}
	return 0, false
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
		sub, isMsg := field(m, num)
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
