package elasticsearchsink

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// TestSinkSuite runs the sink contract against VictoriaLogs' _bulk API,
// through a proxy that a real server cannot replace: it answers 429 (a
// cluster whose write queue is full) while refusing and holds requests
// while stalled; otherwise it passes them on and records, in order, the
// documents VictoriaLogs took. At the end of each test the documents
// VictoriaLogs stores must be the ones the proxy recorded.
func TestSinkSuite(t *testing.T) {
	base := startVictoriaLogs(t)
	var seq atomic.Int64
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		run := strconv.FormatInt(seq.Add(1), 10)
		gate := sinktest.NewGate()
		var taken sinktest.Bodies
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			if !gate.Admit(r.Context()) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"error":{"type":"es_rejected_execution_exception","reason":"the test downstream refuses"},"status":429}`)
				return
			}
			req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header = r.Header.Clone()
			req.Header.Del("Accept-Encoding") // the proxy reads the answer
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == http.StatusOK && !bytes.Contains(out, []byte(`"errors":true`)) {
				taken.Add(bulkMessages(t, body)...)
			}
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(resp.StatusCode)
			w.Write(out)
		}))
		t.Cleanup(proxy.Close)
		t.Cleanup(func() {
			// Registered before the suite's own cleanup, so it runs after
			// the sink stopped: nothing is in flight any more.
			var stored []string
			for _, row := range vlQuery(t, base, "suite_run:="+run) {
				stored = append(stored, row["_msg"])
			}
			// As sets: a request the proxy passed on but could not answer
			// (its own hop to VictoriaLogs cut after the documents were
			// stored) is sent again by the sink, at least once being the
			// contract, so VictoriaLogs may hold a document twice that the
			// proxy recorded once.
			want := taken.Get()
			slices.Sort(stored)
			slices.Sort(want)
			stored, want = slices.Compact(stored), slices.Compact(want)
			if !slices.Equal(stored, want) {
				t.Errorf("VictoriaLogs stores %d distinct documents, the proxy saw %d taken", len(stored), len(want))
			}
		})
		p := config.FromMap("a1.sinks.k1.", map[string]string{
			"hostNames":            proxy.URL + "/insert/elasticsearch/",
			"batchSize":            "100",
			"query._msg_field":     "@message",
			"query._time_field":    "@timestamp",
			"query.extra_fields":   "suite_run=" + run,
			"retry.initialBackoff": "10",
			"retry.maxBackoff":     "100",
			"retry.maxAttempts":    "3",
			"requestTimeout":       "20000",
		})
		env.Type, env.Logger = "elasticsearch", quiet
		s, err := New(env, p)
		if err != nil || p.Err() != nil {
			t.Fatal(err, p.Err())
		}
		return s, gate.Downstream(taken.Get)
	})
}

// bulkMessages returns the @message of each document of a _bulk body, in
// order.
func bulkMessages(t *testing.T, body []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 64<<20)
	for doc := false; sc.Scan(); doc = !doc {
		if !doc {
			continue // the action line
		}
		var d struct {
			Message string `json:"@message"`
		}
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Errorf("bulk document %q: %v", sc.Bytes(), err)
		}
		out = append(out, d.Message)
	}
	return out
}
