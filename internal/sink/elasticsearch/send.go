package elasticsearchsink

// Sending bulk requests, up to MaxInFlight at a time, and sorting each
// item's result: indexed, to retry, or dead.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/panics"
)

// round sends the items of todo in requests of at most limit bytes, up to
// MaxInFlight at a time. It marks indexed items done and rejected ones dead
// and returns the items to retry, the longest Retry-After, the size of a
// request refused as too large (0 if none) and the last whole-request error.
func (w *Writer) round(ctx context.Context, todo []int, limit int) (retry []int, hint time.Duration, tooLarge int, err error) {
	reqs := w.split(todo, limit)
	if len(reqs) == 1 || w.opt.MaxInFlight == 1 {
		for _, r := range reqs {
			o := w.send(ctx, r)
			retry = append(retry, o.retry...)
			hint, err = max(hint, o.hint), cmpErr(err, o.err)
			tooLarge = max(tooLarge, o.tooLarge)
		}
		return retry, hint, tooLarge, err
	}
	outs := make([]outcome, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			defer panics.Guard(w.guard)
			outs[i] = w.send(ctx, r)
		})
	}
	wg.Wait()
	for _, o := range outs {
		retry = append(retry, o.retry...)
		hint, err = max(hint, o.hint), cmpErr(err, o.err)
		tooLarge = max(tooLarge, o.tooLarge)
	}
	return retry, hint, tooLarge, err
}

func cmpErr(a, b error) error {
	if b != nil {
		return b
	}
	return a
}

// outcome is what one request left to do.
type outcome struct {
	retry    []int
	hint     time.Duration
	tooLarge int
	err      error
}

// send makes one bulk request for items and sorts their results.
func (w *Writer) send(ctx context.Context, items []int) outcome {
	s := <-w.slots
	defer func() { w.slots <- s }()
	body, raw, err := w.body(s, items)
	if err != nil {
		return outcome{retry: items, err: err}
	}
	url := w.opt.BulkURLs[int(w.next.Add(1))%len(w.opt.BulkURLs)]
	rctx, cancel := context.WithTimeout(ctx, w.opt.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return outcome{retry: items, err: err}
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if w.opt.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	switch {
	case w.opt.APIKey != "":
		req.Header.Set("Authorization", "ApiKey "+w.opt.APIKey)
	case w.opt.Username != "":
		req.SetBasicAuth(w.opt.Username, w.opt.Password)
	}
	w.m.requests.Add(1)
	w.m.bytes.Add(int64(len(body)))
	w.m.uncompressed.Add(int64(raw))
	start := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			w.m.requestFails.Add(1)
		}
		return outcome{retry: items, err: fmt.Errorf("bulk request to %s: %w", redact(url), err)}
	}
	s.resp.Reset()
	_, err = s.resp.ReadFrom(resp.Body)
	_ = resp.Body.Close() // read to the end above
	w.latency.Observe(time.Since(start))
	if err != nil {
		w.m.requestFails.Add(1)
		return outcome{retry: items, err: fmt.Errorf("bulk request to %s: read response: %w", redact(url), err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		w.m.requestFails.Add(1)
		o := outcome{retry: items, hint: retryAfter(resp.Header.Get("Retry-After"), w.opt.MaxBackoff),
			err: fmt.Errorf("bulk request to %s: %s: %s", redact(url), resp.Status, snippet(s.resp.Bytes()))}
		if resp.StatusCode == http.StatusRequestEntityTooLarge {
			if len(items) == 1 {
				w.results[items[0]] = itemResult{Status: resp.StatusCode, Error: appendJSONString(nil, "request entity too large: "+strconv.Itoa(raw)+" bytes")}
				w.state[items[0]] = stDead
				w.m.other.Add(1)
				return outcome{}
			}
			o.tooLarge = raw
		}
		return o
	}
	results, err := parseBulkResponse(s.resp.Bytes(), len(items))
	if err != nil {
		w.m.requestFails.Add(1)
		return outcome{retry: items, err: fmt.Errorf("bulk request to %s: %w", redact(url), err)}
	}
	if results == nil {
		for _, i := range items {
			w.state[i] = stDone
		}
		return outcome{}
	}
	var o outcome
	create409 := w.opt.OpType == "create" && w.opt.IDHeader != ""
	for k, i := range items {
		r := results[k]
		switch classify(r, create409) {
		case classOK:
			w.state[i] = stDone
		case classConflict:
			w.m.conflicts.Add(1)
			w.state[i] = stDone
		case classRejected:
			w.m.rejected.Add(1)
			o.retry = append(o.retry, i)
		case classUnavailable:
			w.m.unavailable.Add(1)
			o.retry = append(o.retry, i)
		case classMapping:
			w.m.mapping.Add(1)
			w.state[i], w.results[i] = stDead, r
		default:
			w.m.other.Add(1)
			w.state[i], w.results[i] = stDead, r
		}
	}
	return o
}

func retryAfter(v string, ceiling time.Duration) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return min(time.Duration(n)*time.Second, ceiling)
	}
	return 0
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// redact drops the query from a bulk URL for messages.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}
