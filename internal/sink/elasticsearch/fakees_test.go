package elasticsearchsink

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// fakeES is an httptest server that answers the _bulk API the way
// Elasticsearch does, with a store of documents (by id: index overwrites,
// create conflicts with 409; without an id each document gets a new one)
// and a script that decides, per request, how the server misbehaves. A real
// cluster cannot be made to reject chosen items or drop a connection at a
// chosen moment, so these fault tests need it; the VictoriaLogs tests cover
// a real implementation of the API.
type fakeES struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	docs     map[string][]byte // by _id
	order    []string          // ids in indexing order
	nextID   int
	requests []fakeRequest // every request received, in order

	// script decides what request number n (from 1) gets; nil answers
	// normally.
	script func(n int, req fakeRequest) fakeAction
}

type fakeItem struct {
	Op, Index, ID string
	Doc           []byte
}

type fakeRequest struct {
	Items   []fakeItem
	Header  http.Header
	Path    string
	Query   string
	Gzipped bool
}

// fakeAction is the server's behaviour for one request.
type fakeAction struct {
	Status int // whole-request status other than 200 (nothing is indexed)
	// Item returns the status and error type for item i, or 0 to index it.
	Item func(i int, it fakeItem) (int, string)
	// Before runs before indexing (a slow server); After runs after
	// indexing, before the response (a slow response). Either may hijack
	// the connection and close it by returning true.
	Before, After func(w http.ResponseWriter) (dropped bool)
}

func newFakeES(t *testing.T) *fakeES {
	f := &fakeES{t: t, docs: map[string][]byte{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeES) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/_bulk" || r.Method != http.MethodPost {
		http.Error(w, `{"error":"no handler"}`, http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	gz := r.Header.Get("Content-Encoding") == "gzip"
	if gz {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	req, err := parseBulkRequest(body)
	if err != nil {
		http.Error(w, fmt.Sprintf(`{"error":{"type":"illegal_argument_exception","reason":%q},"status":400}`, err), http.StatusBadRequest)
		return
	}
	req.Header, req.Path, req.Query, req.Gzipped = r.Header.Clone(), r.URL.Path, r.URL.RawQuery, gz
	f.mu.Lock()
	f.requests = append(f.requests, req)
	n := len(f.requests)
	script := f.script
	f.mu.Unlock()
	var act fakeAction
	if script != nil {
		act = script(n, req)
	}
	if act.Before != nil && act.Before(w) {
		return
	}
	if act.Status != 0 {
		w.WriteHeader(act.Status)
		fmt.Fprintf(w, `{"error":{"type":"es_rejected_execution_exception","reason":"rejected"},"status":%d}`, act.Status)
		return
	}
	type itemResp struct {
		Status int             `json:"status"`
		Error  json.RawMessage `json:"error,omitempty"`
	}
	items := make([]map[string]itemResp, len(req.Items))
	errorsSeen := false
	f.mu.Lock()
	for i, it := range req.Items {
		status, typ := 0, ""
		if act.Item != nil {
			status, typ = act.Item(i, it)
		}
		if status == 0 {
			status = f.index(it)
			if status == 409 {
				typ = "version_conflict_engine_exception"
			}
		}
		ir := itemResp{Status: status}
		if status >= 300 {
			errorsSeen = true
			ir.Error = json.RawMessage(fmt.Sprintf(`{"type":%q,"reason":"%s for item %d"}`, typ, typ, i))
		}
		items[i] = map[string]itemResp{it.Op: ir}
	}
	f.mu.Unlock()
	if act.After != nil && act.After(w) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"took": 1, "errors": errorsSeen, "items": items})
}

// index stores it and returns its status. Caller holds mu.
func (f *fakeES) index(it fakeItem) int {
	id := it.ID
	if id == "" {
		f.nextID++
		id = "auto-" + strconv.Itoa(f.nextID)
	}
	if _, ok := f.docs[id]; ok {
		if it.Op == "create" {
			return 409
		}
		f.docs[id] = it.Doc
		return 200
	}
	f.docs[id] = it.Doc
	f.order = append(f.order, id)
	return 201
}

// hijackClose closes the connection without a response.
func hijackClose(w http.ResponseWriter) bool {
	c, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		c.Close()
	}
	return true
}

func parseBulkRequest(r io.Reader) (fakeRequest, error) {
	var req fakeRequest
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var action map[string]struct {
			Index string `json:"_index"`
			ID    string `json:"_id"`
		}
		if err := json.Unmarshal(line, &action); err != nil || len(action) != 1 {
			return req, fmt.Errorf("bad action line %q: %v", line, err)
		}
		var it fakeItem
		for op, a := range action {
			it = fakeItem{Op: op, Index: a.Index, ID: a.ID}
		}
		if !sc.Scan() {
			return req, fmt.Errorf("no document after action %q", line)
		}
		doc := bytes.Clone(sc.Bytes())
		if !json.Valid(doc) || doc[0] != '{' {
			return req, fmt.Errorf("document is not a JSON object: %q", doc)
		}
		it.Doc = doc
		req.Items = append(req.Items, it)
	}
	return req, sc.Err()
}

// stored returns the "seq" field of every stored document, in indexing
// order (a document without one is a test failure).
func (f *fakeES) stored() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int, 0, len(f.order))
	for _, id := range f.order {
		var d struct {
			Seq *int `json:"seq"`
		}
		if err := json.Unmarshal(f.docs[id], &d); err != nil || d.Seq == nil {
			f.t.Errorf("stored document %s has no seq: %s", id, f.docs[id])
			continue
		}
		out = append(out, *d.Seq)
	}
	return out
}

func (f *fakeES) requestLog() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.requests...)
}
