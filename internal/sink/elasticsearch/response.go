package elasticsearchsink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// itemResult is the outcome of one bulk item as the server reported it.
type itemResult struct {
	Status int
	Error  json.RawMessage // the item's "error" value; nil on success
}

// errorType returns the "type" of an item error ("mapper_parsing_exception"),
// or the error itself when it is a plain string.
func (r itemResult) errorType() string {
	var e struct {
		Type string `json:"type"`
	}
	if len(r.Error) > 0 && r.Error[0] == '{' && json.Unmarshal(r.Error, &e) == nil {
		return e.Type
	}
	var s string
	if json.Unmarshal(r.Error, &s) == nil {
		return s
	}
	return ""
}

// errorText is the error's type and reason for logs.
func (r itemResult) errorText() string {
	var e struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	}
	if len(r.Error) > 0 && r.Error[0] == '{' && json.Unmarshal(r.Error, &e) == nil {
		return e.Type + ": " + e.Reason
	}
	return string(r.Error)
}

var errorsFalse = []byte(`"errors"`)

// quickSuccess reports whether the response body starts (within its first
// 512 bytes, where Elasticsearch, OpenSearch and VictoriaLogs put it) with
// "errors": false, so the items need not be decoded.
func quickSuccess(body []byte) bool {
	head := body[:min(len(body), 512)]
	i := bytes.Index(head, errorsFalse)
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(head[i+len(errorsFalse):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	return bytes.HasPrefix(rest, []byte("false"))
}

// parseBulkResponse decodes a bulk response body that should hold n items.
// It returns nil results when every item succeeded ("errors": false).
func parseBulkResponse(body []byte, n int) ([]itemResult, error) {
	if quickSuccess(body) {
		return nil, nil
	}
	var resp struct {
		Errors *bool                        `json:"errors"`
		Items  []map[string]json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("bad bulk response: %w", err)
	}
	if resp.Errors == nil {
		return nil, errors.New(`bad bulk response: no "errors" field`)
	}
	if !*resp.Errors {
		return nil, nil
	}
	if len(resp.Items) != n {
		return nil, fmt.Errorf("bad bulk response: %d items for %d documents", len(resp.Items), n)
	}
	out := make([]itemResult, n)
	for i, m := range resp.Items {
		if len(m) != 1 {
			return nil, fmt.Errorf("bad bulk response: item %d has %d actions", i, len(m))
		}
		for _, raw := range m {
			var it struct {
				Status int             `json:"status"`
				Error  json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(raw, &it); err != nil {
				return nil, fmt.Errorf("bad bulk response: item %d: %w", i, err)
			}
			if it.Status == 0 {
				return nil, fmt.Errorf("bad bulk response: item %d has no status", i)
			}
			if len(it.Error) > 0 && string(it.Error) == "null" {
				it.Error = nil
			}
			out[i] = itemResult{Status: it.Status, Error: it.Error}
		}
	}
	return out, nil
}

// Item outcome classes, also the reasons counted per failed item.
const (
	classOK          = iota
	classConflict    // 409 on create with a document id: it is already there
	classRejected    // 429: retry
	classUnavailable // 502, 503, 504: retry
	classMapping     // the document does not fit the mapping: dead letter
	classOther       // any other failure: dead letter
)

// classify sorts an item result. create409 tells whether a 409 means the
// document is already indexed (op_type create with ids from a header).
func classify(r itemResult, create409 bool) int {
	switch s := r.Status; {
	case s >= 200 && s < 300:
		return classOK
	case s == 409 && create409:
		return classConflict
	case s == 429:
		return classRejected
	case s == 502 || s == 503 || s == 504:
		return classUnavailable
	}
	t := r.errorType()
	if strings.Contains(t, "mapp") || strings.Contains(t, "pars") || t == "illegal_argument_exception" {
		return classMapping
	}
	return classOther
}
