package elasticsearchsink

// Dead letters: the documents the server refused for good, written to the
// dead-letter file or logged and counted as dropped.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/event"
)

// deadLetter writes the events marked dead to the dead-letter file (one
// JSON line each, then fsync) or, without one, logs and counts them as
// dropped. On success they are done.
func (w *Writer) deadLetter(events []event.Event) error {
	var buf []byte
	count := 0
	var first string
	for i, st := range w.state {
		if st != stDead {
			continue
		}
		count++
		r := w.results[i]
		if first == "" {
			first = r.errorText()
		}
		if w.dlq != nil {
			buf = w.appendDeadLetter(buf, &events[i], r)
		}
	}
	if count == 0 {
		return nil
	}
	if w.dlq != nil {
		if _, err := w.dlq.Write(buf); err != nil {
			return fmt.Errorf("elasticsearch sink %s: write dead-letter file: %w", w.opt.Name, err)
		}
		if err := w.dlq.Sync(); err != nil {
			return fmt.Errorf("elasticsearch sink %s: sync dead-letter file: %w", w.opt.Name, err)
		}
		w.log.Warn("elasticsearch sink: documents rejected by the server were written to the dead-letter file",
			"sink", w.opt.Name, "count", count, "file", w.opt.DeadLetterFile, "first_error", first)
	} else {
		w.dropped.Add(float64(count))
		w.log.Error("elasticsearch sink: documents rejected by the server were dropped (set deadLetter.file to keep them)",
			"sink", w.opt.Name, "count", count, "first_error", first)
	}
	w.m.dead.Add(int64(count))
	for i, st := range w.state {
		if st == stDead {
			w.state[i] = stDone
			w.results[i] = itemResult{}
		}
	}
	return nil
}

// appendDeadLetter appends one dead-letter line: time, sink, index, HTTP
// status, the server's error, the event's headers and its body (a string
// when it is UTF-8, else "body_base64").
func (w *Writer) appendDeadLetter(dst []byte, e *event.Event, r itemResult) []byte {
	ms, _ := eventTime(e, event.Now())
	dst = append(dst, `{"time":"`...)
	dst = time.Now().UTC().AppendFormat(dst, timestampLayout)
	dst = append(dst, `","sink":`...)
	dst = appendJSONString(dst, w.opt.Name)
	dst = append(dst, `,"index":`...)
	dst = appendJSONString(dst, string(w.opt.Index.appendName(nil, e.Headers, ms)))
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, `,"error":`...)
	if len(r.Error) > 0 {
		dst = append(dst, compact(r.Error)...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"headers":{`...)
	w.keys = e.Headers.AppendSorted(w.keys[:0])
	for j, kv := range w.keys {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, kv.Key)
		dst = append(dst, ':')
		dst = appendJSONString(dst, kv.Value)
	}
	dst = append(dst, '}')
	if utf8.Valid(e.Body) {
		dst = append(dst, `,"body":`...)
		dst = appendJSONBytes(dst, e.Body)
	} else {
		dst = append(dst, `,"body_base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, e.Body)
		dst = append(dst, '"')
	}
	return append(dst, "}\n"...)
}

// compact returns raw JSON on one line.
func compact(raw []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return appendJSONBytes(nil, raw)
	}
	return b.Bytes()
}
