package elasticsearchsink

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

// VictoriaLogs serves a real implementation of the _bulk API at
// /insert/elasticsearch/_bulk. .ci/run installs it with
//
//	go install github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@v1.52.1
//
// The tests look for it in $SLUICE_VICTORIALOGS, then on PATH, then in
// $(go env GOPATH)/bin. Outside CI a missing binary skips them.

func victoriaLogsBinary(t testing.TB) string {
	t.Helper()
	return testutil.PeerBinary(t, "victoria-logs", "SLUICE_VICTORIALOGS", "go install github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@v1.52.1")
}

var startedRE = regexp.MustCompile(`started server at (http://127\.0\.0\.1:\d+)/`)

// startVictoriaLogs runs VictoriaLogs on 127.0.0.1 with a random port and
// its data in a temporary directory, and returns its base URL.
func startVictoriaLogs(t testing.TB) string {
	t.Helper()
	bin := victoriaLogsBinary(t)
	cmd := exec.Command(bin,
		"-httpListenAddr=127.0.0.1:0",
		"-storageDataPath="+filepath.Join(t.TempDir(), "vl"),
		"-retentionPeriod=1y",
		"-loggerLevel=INFO",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	addr := make(chan string, 1)
	var logTail []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if m := startedRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
			if len(logTail) < 50 {
				logTail = append(logTail, line)
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case u := <-addr:
		return u
	case <-exited:
		t.Fatalf("victoria-logs exited before listening:\n%s", strings.Join(logTail, "\n"))
	case <-time.After(20 * time.Second):
		t.Fatal("victoria-logs did not start listening within 20 s")
	}
	return ""
}

// vlQuery flushes VictoriaLogs' in-memory data and returns the rows that
// match the LogsQL query.
func vlQuery(t testing.TB, base, query string) []map[string]string {
	t.Helper()
	resp, err := http.Get(base + "/internal/force_flush")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.PostForm(base+"/select/logsql/query", url.Values{"query": {query}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("query %q: %s: %s", query, resp.Status, b)
	}
	var rows []map[string]string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var row map[string]string
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("query row %q: %v", sc.Bytes(), err)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// vlEvents returns n events for run: even ones with a JSON body, odd ones
// with a text body and headers; every fifth with a timestamp header an
// hour ago.
func vlEvents(run string, n int, hourAgo int64) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		h := map[string]string{"run": run, "seq": strconv.Itoa(i), "host": "web-1"}
		var body string
		if i%2 == 0 {
			body = fmt.Sprintf(`{"run":%q,"seq":"%d","message":"json event %d","level":"info"}`, run, i, i)
		} else {
			body = fmt.Sprintf("text event %d: \"quoted\" and ünïcode", i)
		}
		if i%5 == 0 {
			h["timestamp"] = strconv.FormatInt(hourAgo, 10)
		}
		evs[i] = event.Event{Headers: event.HeadersOf(h), Body: []byte(body)}
	}
	return evs
}

// TestVictoriaLogsEveryEventArrives indexes events into VictoriaLogs through
// its _bulk API, plain and gzipped, in one request per batch and split over
// parallel requests, and checks with a query that each arrived once, with
// its message, fields and time.
func TestVictoriaLogsEveryEventArrives(t *testing.T) {
	base := startVictoriaLogs(t)
	hourAgo := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UnixMilli()
	for _, tc := range []struct {
		name  string
		props map[string]string
	}{
		{"plain", map[string]string{}},
		{"gzip", map[string]string{"compression": "gzip"}},
		{"gzip split in flight", map[string]string{"compression": "gzip", "maxInFlight": "3", "bulk.maxBytes": "4096"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2000
			run := strings.ReplaceAll(tc.name, " ", "_")
			props := map[string]string{
				"hostNames":                   base + "/insert/elasticsearch/",
				"batchSize":                   "500",
				"query._msg_field":            "message",
				"query._time_field":           "@timestamp",
				"query._stream_fields":        "host",
				"indexName":                   "logs-%{host}",
				"retry.initialBackoff":        "10",
				"deadLetter.file":             filepath.Join(t.TempDir(), "dead.jsonl"),
				"indexNameBuilder.dateFormat": "yyyy.MM.dd",
			}
			for k, v := range tc.props {
				props[k] = v
			}
			ch := newChannel(t)
			s, w := newSink(t, ch, props)
			if err := testutil.PutCommit(ch, vlEvents(run, n, hourAgo)); err != nil {
				t.Fatal(err)
			}
			drain(t, s, ch, 0)

			rows := vlQuery(t, base, fmt.Sprintf("run:=%q", run))
			seen := make([]int, n)
			for _, r := range rows {
				i, err := strconv.Atoi(r["seq"])
				if err != nil || i < 0 || i >= n {
					t.Fatalf("row without a valid seq: %v", r)
				}
				seen[i]++
				wantMsg := fmt.Sprintf("text event %d: \"quoted\" and ünïcode", i)
				if i%2 == 0 {
					wantMsg = fmt.Sprintf("json event %d", i)
				}
				if r["_msg"] != wantMsg {
					t.Errorf("event %d: _msg %q, want %q", i, r["_msg"], wantMsg)
				}
				if i%2 == 1 && r["host"] != "web-1" {
					t.Errorf("event %d: the host header is not a field: %v", i, r)
				}
				if i%5 == 0 {
					ts, err := time.Parse(time.RFC3339Nano, r["_time"])
					if err != nil || ts.UnixMilli() != hourAgo {
						t.Errorf("event %d: _time %q, want the timestamp header %d", i, r["_time"], hourAgo)
					}
				}
			}
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("event %d stored %d times (%d rows for %d events)", i, c, len(rows), n)
				}
			}
			if w.m.requests.Load() == 0 || w.m.dead.Load() != 0 || w.m.requestFails.Load() != 0 {
				t.Errorf("requests %d, failed %d, dead letters %d", w.m.requests.Load(), w.m.requestFails.Load(), w.m.dead.Load())
			}
			if tc.props["maxInFlight"] != "" && w.m.requests.Load() < 50 {
				t.Errorf("only %d requests with bulk.maxBytes 4096", w.m.requests.Load())
			}
		})
	}
}
