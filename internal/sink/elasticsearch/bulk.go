package elasticsearchsink

// Building bulk requests: a batch is encoded once into action and document
// lines, then cut into request bodies of at most MaxBytes (gzipped when set).

import (
	"bytes"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"

	"github.com/sluicehq/sluice/internal/event"
)

// minSplit is the smallest request a batch is split into for the sake of
// parallelism (with maxInFlight > 1).
const minSplit = 256 << 10

// slot holds the buffers of one in-flight request.
type slot struct {
	raw  bytes.Buffer // items that are not consecutive, concatenated
	zip  bytes.Buffer // the compressed body
	gz   *gzip.Writer
	resp bytes.Buffer
}

// encode fills enc and off with the bulk lines of events and resets state.
func (w *Writer) encode(events []event.Event) {
	now := event.Now()
	enc := w.enc[:0]
	off := append(w.off[:0], 0)
	for i := range events {
		e := &events[i]
		ms, text := eventTime(e, now)
		enc = append(enc, `{"`...)
		enc = append(enc, w.opt.OpType...)
		enc = append(enc, `":{"_index":"`...)
		name := len(enc)
		enc = w.opt.Index.appendName(enc, e.Headers, ms)
		if needsEscape(enc[name:]) {
			s := string(enc[name:])
			enc = appendJSONString(enc[:name-1], s)
		} else {
			enc = append(enc, '"')
		}
		if w.opt.IDHeader != "" {
			if id, ok := e.Headers.Get(w.opt.IDHeader); ok && id != "" {
				enc = append(enc, `,"_id":`...)
				enc = appendJSONString(enc, id)
			}
		}
		enc = append(enc, "}}\n"...)
		switch w.opt.Serializer {
		case LogStash:
			enc, w.keys = appendLogStash(enc, e, ms, text, w.keys)
		case Dynamic:
			enc, w.keys = appendDynamic(enc, e, w.keys)
		default:
			enc, w.keys = appendDocument(enc, e, ms, text, w.keys)
		}
		enc = append(enc, '\n')
		off = append(off, len(enc))
	}
	w.enc, w.off = enc, off
	if cap(w.state) < len(events) {
		w.state = make([]uint8, len(events))
		w.results = make([]itemResult, len(events))
	}
	w.state = w.state[:len(events)]
	w.results = w.results[:len(events)]
	clear(w.state)
	clear(w.results)
}

func needsEscape(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// split cuts todo into requests of at most limit bytes (a larger single
// item goes alone) and, with MaxInFlight > 1, into up to MaxInFlight parts
// of about equal size and at least minSplit bytes.
func (w *Writer) split(todo []int, limit int) [][]int {
	size := func(i int) int { return w.off[i+1] - w.off[i] }
	total := 0
	for _, i := range todo {
		total += size(i)
	}
	parts := 1
	if w.opt.MaxInFlight > 1 {
		parts = max(1, min(w.opt.MaxInFlight, total/minSplit))
	}
	var out [][]int
	start, cur, cum, next := 0, 0, 0, 1
	for k, i := range todo {
		sz := size(i)
		if k > start && cur+sz > limit {
			out = append(out, todo[start:k])
			start, cur = k, 0
		}
		cur += sz
		cum += sz
		if next < parts && cum >= next*total/parts && k+1 < len(todo) {
			out = append(out, todo[start:k+1])
			start, cur = k+1, 0
			next++
		}
	}
	if start < len(todo) {
		out = append(out, todo[start:])
	}
	return out
}

// body builds the request body of items in s and returns it with its
// uncompressed size. Consecutive items are taken from the encode buffer
// without a copy.
func (w *Writer) body(s *slot, items []int) ([]byte, int, error) {
	first, last := items[0], items[len(items)-1]
	var raw []byte
	if last-first == len(items)-1 {
		raw = w.enc[w.off[first]:w.off[last+1]]
	} else {
		s.raw.Reset()
		for _, i := range items {
			s.raw.Write(w.enc[w.off[i]:w.off[i+1]])
		}
		raw = s.raw.Bytes()
	}
	if !w.opt.Gzip {
		return raw, len(raw), nil
	}
	s.zip.Reset()
	if s.gz == nil {
		gz, err := gzip.NewWriterLevel(&s.zip, w.opt.GzipLevel)
		if err != nil {
			return nil, 0, err
		}
		s.gz = gz
	} else {
		s.gz.Reset(&s.zip)
	}
	if _, err := s.gz.Write(raw); err != nil {
		return nil, 0, err
	}
	if err := s.gz.Close(); err != nil {
		return nil, 0, err
	}
	return s.zip.Bytes(), len(raw), nil
}
