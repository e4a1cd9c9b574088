package elasticsearchsink

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	memorychannel "github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newChannel(t testing.TB) flow.Channel {
	t.Helper()
	ch, err := memorychannel.New(flow.Env{Name: "c1", Type: "memory"},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "1000000", "transactionCapacity": "10000"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop(context.Background()) })
	return ch
}

// newSink builds a started sink on ch from props (hostNames included).
// Unless props name a serializer, it is sluice's: these tests were written
// for its document shape.
func newSink(t testing.TB, ch flow.Channel, props map[string]string) (*flow.BatchSink, *Writer) {
	t.Helper()
	if _, ok := props["serializer"]; !ok {
		props = maps.Clone(props)
		props["serializer"] = "sluice"
	}
	return newSinkAsIs(t, ch, props)
}

// newSinkAsIs is newSink with props as given (the serializer's default too).
func newSinkAsIs(t testing.TB, ch flow.Channel, props map[string]string) (*flow.BatchSink, *Writer) {
	t.Helper()
	p := config.FromMap("a1.sinks.k1.", props)
	s, w := build(flow.Env{Name: "k1", Type: "elasticsearch", Logger: quiet, Channel: ch}, p)
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s, w
}

// seqEvents returns n events whose JSON bodies carry "seq" (from first) and
// the header id; those for which bad is true carry "bad": true.
func seqEvents(first, n int, bad func(int) bool) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		seq := first + i
		body := fmt.Sprintf(`{"seq":%d,"msg":"event %d"}`, seq, seq)
		if bad != nil && bad(seq) {
			body = fmt.Sprintf(`{"seq":%d,"bad":true}`, seq)
		}
		evs[i] = event.Event{Headers: event.HeadersOf(map[string]string{"id": "doc-" + strconv.Itoa(seq)}), Body: []byte(body)}
	}
	return evs
}

// drain runs Process until ch is empty; it fails after more than maxErrs
// errors.
func drain(t testing.TB, s flow.Sink, ch flow.Channel, maxErrs int) (errs int) {
	t.Helper()
	for ch.Len() > 0 {
		if _, err := s.Process(context.Background()); err != nil {
			errs++
			if errs > maxErrs {
				t.Fatalf("Process failed %d times, last: %v", errs, err)
			}
		}
	}
	return errs
}

func isBad(seq int) bool { return seq%10 == 7 }

// TestFailurePaths runs the sink against a server that misbehaves as an
// overloaded or broken cluster does, with and without document ids, and
// checks that the stored documents are exactly the events sent minus the
// dead-lettered ones: no loss, and no duplicate except, without ids, from a
// request whose response was lost.
func TestFailurePaths(t *testing.T) {
	const total, batch = 300, 100
	tests := []struct {
		name   string
		props  map[string]string
		script func(n int, req fakeRequest) fakeAction
		dead   func(seq int) bool // dead-lettered for good
		// lostResponse: a request was indexed but its answer lost, so
		// without ids its documents may be stored twice.
		lostResponse bool
		errs         int // Process errors allowed
		check        func(t *testing.T, f *fakeES, w *Writer)
	}{
		{name: "whole 429", script: func(n int, _ fakeRequest) fakeAction {
			if n <= 2 {
				return fakeAction{Status: 429}
			}
			return fakeAction{}
		}, check: func(t *testing.T, f *fakeES, w *Writer) {
			if got := w.m.requestFails.Load(); got != 2 {
				t.Errorf("BulkRequestFailCount = %d, want 2", got)
			}
			if got := w.m.retries.Load(); got != 2 {
				t.Errorf("BulkRetryCount = %d, want 2", got)
			}
		}},
		{name: "whole 503", script: func(n int, _ fakeRequest) fakeAction {
			if n%2 == 1 && n < 6 {
				return fakeAction{Status: 503}
			}
			return fakeAction{}
		}},
		{name: "per-item rejections", script: func(n int, req fakeRequest) fakeAction {
			switch n {
			case 1:
				return fakeAction{Item: func(i int, _ fakeItem) (int, string) {
					if i%3 == 0 {
						return 429, "es_rejected_execution_exception"
					}
					return 0, ""
				}}
			case 2:
				return fakeAction{Item: func(i int, _ fakeItem) (int, string) {
					if i%2 == 0 {
						return 503, "unavailable_shards_exception"
					}
					return 0, ""
				}}
			}
			return fakeAction{}
		}, check: func(t *testing.T, f *fakeES, w *Writer) {
			reqs := f.requestLog()
			// Only the failed items go again: 34 of 100, then 17 of 34.
			if len(reqs) < 3 || len(reqs[1].Items) != 34 || len(reqs[2].Items) != 17 {
				t.Errorf("retries sent %v items, want 34 then 17", itemCounts(reqs))
			}
			if got := w.m.rejected.Load(); got != 34 {
				t.Errorf("BulkItemRejectedCount = %d, want 34", got)
			}
			if got := w.m.unavailable.Load(); got != 17 {
				t.Errorf("BulkItemUnavailableCount = %d, want 17", got)
			}
		}},
		{name: "mapping errors", dead: isBad, script: func(int, fakeRequest) fakeAction {
			return fakeAction{Item: func(_ int, it fakeItem) (int, string) {
				if strings.Contains(string(it.Doc), `"bad":true`) {
					return 400, "mapper_parsing_exception"
				}
				return 0, ""
			}}
		}, check: func(t *testing.T, f *fakeES, w *Writer) {
			if got := len(f.requestLog()); got != 3 {
				t.Errorf("%d requests, want 3: dead letters are not retried", got)
			}
			if got := w.m.mapping.Load(); got != 30 {
				t.Errorf("BulkItemMappingFailCount = %d, want 30", got)
			}
		}},
		{name: "other 4xx", dead: func(seq int) bool { return seq%50 == 3 }, script: func(int, fakeRequest) fakeAction {
			return fakeAction{Item: func(_ int, it fakeItem) (int, string) {
				var d struct{ Seq int }
				if err := json.Unmarshal(it.Doc, &d); err != nil {
					return 400, "mapper_parsing_exception"
				}
				if d.Seq%50 == 3 {
					return 403, "security_exception"
				}
				return 0, ""
			}}
		}, check: func(t *testing.T, f *fakeES, w *Writer) {
			if got := w.m.other.Load(); got != 6 {
				t.Errorf("BulkItemOtherFailCount = %d, want 6", got)
			}
		}},
		{name: "rejections outlast the retry budget", props: map[string]string{"retry.maxAttempts": "2"}, errs: 1,
			script: func(n int, req fakeRequest) fakeAction {
				switch n {
				case 1: // half indexed, half rejected
					return fakeAction{Item: func(i int, _ fakeItem) (int, string) {
						if i%2 == 1 {
							return 429, "es_rejected_execution_exception"
						}
						return 0, ""
					}}
				case 2: // the retry is rejected too: the batch rolls back
					return fakeAction{Status: 429}
				}
				return fakeAction{}
			}, check: func(t *testing.T, f *fakeES, w *Writer) {
				reqs := f.requestLog()
				// When the batch comes back, only the 50 rejected events go.
				if len(reqs) < 3 || len(reqs[2].Items) != 50 {
					t.Errorf("requests carried %v items, want 100, 50, 50, ...", itemCounts(reqs))
				}
			}},
		{name: "request too large", script: func(n int, req fakeRequest) fakeAction {
			if len(req.Items) > 50 {
				return fakeAction{Status: 413}
			}
			return fakeAction{}
		}},
		{name: "slow response", props: map[string]string{"requestTimeout": "5000"}, script: func(n int, _ fakeRequest) fakeAction {
			if n == 1 {
				return fakeAction{After: func(http.ResponseWriter) bool { time.Sleep(200 * time.Millisecond); return false }}
			}
			return fakeAction{}
		}, check: func(t *testing.T, f *fakeES, w *Writer) {
			if got := len(f.requestLog()); got != 3 {
				t.Errorf("%d requests, want 3 (a slow answer within the timeout is no failure)", got)
			}
		}},
		{name: "response slower than the timeout", props: map[string]string{"requestTimeout": "200"}, lostResponse: true,
			script: func(n int, _ fakeRequest) fakeAction {
				if n == 1 {
					return fakeAction{After: func(http.ResponseWriter) bool { time.Sleep(600 * time.Millisecond); return false }}
				}
				return fakeAction{}
			}},
		{name: "connection dropped before indexing", script: func(n int, _ fakeRequest) fakeAction {
			if n == 1 || n == 3 {
				return fakeAction{Before: hijackClose}
			}
			return fakeAction{}
		}},
		{name: "connection dropped after indexing", lostResponse: true, script: func(n int, _ fakeRequest) fakeAction {
			if n == 1 {
				return fakeAction{After: hijackClose}
			}
			return fakeAction{}
		}},
	}
	for _, tc := range tests {
		for _, ids := range []bool{true, false} {
			for _, op := range []string{"index", "create"} {
				if op == "create" && !ids {
					continue
				}
				name := fmt.Sprintf("%s/ids=%v/op=%s", tc.name, ids, op)
				t.Run(name, func(t *testing.T) {
					f := newFakeES(t)
					f.script = tc.script
					dlq := filepath.Join(t.TempDir(), "dead.jsonl")
					props := map[string]string{
						"hostNames": f.srv.URL, "batchSize": strconv.Itoa(batch), "opType": op,
						"retry.initialBackoff": "5", "retry.maxBackoff": "20", "deadLetter.file": dlq,
						"indexNameBuilder": "simple",
					}
					if ids {
						props["idHeader"] = "id"
					}
					maps.Copy(props, tc.props)
					ch := newChannel(t)
					s, w := newSink(t, ch, props)
					var bad func(int) bool
					if tc.dead != nil {
						bad = tc.dead
					}
					if err := testutil.PutCommit(ch, seqEvents(0, total, bad)); err != nil {
						t.Fatal(err)
					}
					drain(t, s, ch, tc.errs)

					var want []int
					for i := range total {
						if tc.dead == nil || !tc.dead(i) {
							want = append(want, i)
						}
					}
					got := f.stored()
					slices.Sort(got)
					if tc.lostResponse && !ids {
						// Each document at least once, and duplicates only
						// from the request whose answer was lost.
						uniq := slices.Compact(slices.Clone(got))
						if !slices.Equal(uniq, want) {
							t.Fatalf("stored %d distinct documents, want %d", len(uniq), len(want))
						}
						if dups := len(got) - len(uniq); dups > batch {
							t.Fatalf("%d duplicates, more than the one lost request of %d", dups, batch)
						}
					} else if !slices.Equal(got, want) {
						t.Fatalf("stored %d documents (%v...), want exactly the %d sent minus dead letters", len(got), head(got), len(want))
					}
					deadSeqs := readDeadLetters(t, dlq)
					var wantDead []int
					for i := range total {
						if tc.dead != nil && tc.dead(i) {
							wantDead = append(wantDead, i)
						}
					}
					if !slices.Equal(deadSeqs, wantDead) {
						t.Fatalf("dead letters %v, want %v", deadSeqs, wantDead)
					}
					if got := w.m.dead.Load(); got != int64(len(wantDead)) {
						t.Errorf("DeadLetterCount = %d, want %d", got, len(wantDead))
					}
					if tc.lostResponse && op == "create" {
						// The retry of the lost request found its documents.
						if got := w.m.conflicts.Load(); got == 0 {
							t.Errorf("BulkItemConflictCount = 0; the retry after a lost response should meet 409s")
						}
					}
					if tc.check != nil {
						tc.check(t, f, w)
					}
				})
			}
		}
	}
}

func itemCounts(reqs []fakeRequest) []int {
	out := make([]int, len(reqs))
	for i, r := range reqs {
		out[i] = len(r.Items)
	}
	return out
}

func head(s []int) []int { return s[:min(len(s), 10)] }

// readDeadLetters returns the seq of every dead-letter line, sorted, and
// checks each line's fields.
func readDeadLetters(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var dl struct {
			Sink, Index, Body string
			Status            int
			Error             struct{ Type, Reason string }
			Headers           map[string]string
		}
		if err := json.Unmarshal(sc.Bytes(), &dl); err != nil {
			t.Fatalf("dead letter %q: %v", sc.Bytes(), err)
		}
		var d struct{ Seq int }
		if err := json.Unmarshal([]byte(dl.Body), &d); err != nil {
			t.Fatalf("dead letter body %q: %v", dl.Body, err)
		}
		if dl.Sink != "k1" || dl.Index != "flume" || dl.Status < 400 || dl.Error.Type == "" || dl.Headers["id"] != "doc-"+strconv.Itoa(d.Seq) {
			t.Errorf("dead letter lacks its context: %s", sc.Bytes())
		}
		out = append(out, d.Seq)
	}
	slices.Sort(out)
	return out
}

func TestSplit(t *testing.T) {
	f := func(sizes []int, limit, inFlight int, want []int) {
		t.Helper()
		w := &Writer{opt: Options{MaxInFlight: inFlight}, off: []int{0}}
		todo := make([]int, len(sizes))
		for i, s := range sizes {
			w.off = append(w.off, w.off[i]+s)
			todo[i] = i
		}
		var got []int
		for _, r := range w.split(todo, limit) {
			got = append(got, len(r))
		}
		if !slices.Equal(got, want) {
			t.Errorf("split(%v, limit %d, inFlight %d) = %v, want %v", sizes, limit, inFlight, got, want)
		}
	}
	k := 1 << 10
	f([]int{k, k, k, k}, 10*k, 1, []int{4})
	f([]int{k, k, k, k}, 2*k, 1, []int{2, 2})
	f([]int{k, 5 * k, k}, 2*k, 1, []int{1, 1, 1})
	f(slices.Repeat([]int{k}, 1000), 10<<20, 2, []int{500, 500})
	f(slices.Repeat([]int{k}, 1000), 10<<20, 3, []int{334, 333, 333})
	f(slices.Repeat([]int{k}, 100), 10<<20, 4, []int{100}) // 100 KiB: under minSplit
	f(slices.Repeat([]int{k}, 1000), 300*k, 2, []int{300, 200, 300, 200})
}

// quiet discards the sink's logs in tests.
var quiet = slog.New(slog.DiscardHandler)
