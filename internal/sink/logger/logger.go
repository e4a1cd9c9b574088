// Package loggersink implements Flume's logger sink: it logs every event at
// INFO, with its headers and a hex dump of the first maxBytesToLog bytes of
// its body, in the layout of Flume's LoggerSink, so the quickstart reads the
// same as Flume's:
//
//	Event: { headers:{host=web1} body: 68 65 6C 6C 6F 20 77 6F 72 6C 64       hello world }
//
// It is meant for trying things out and debugging, not for production volume.
package loggersink

import (
	"context"
	"log/slog"
	"math"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

const (
	// DefaultMaxBytesToLog is Flume's default maxBytesToLog.
	DefaultMaxBytesToLog = 16
	// DefaultBatchSize is how many events one transaction takes; Flume's
	// logger sink has no batchSize property and takes up to 100 events.
	DefaultBatchSize = 100
)

// Writer logs each event it is given with Dump and never fails.
type Writer struct {
	log      *slog.Logger
	maxBytes int
	buf      []byte
}

// NewWriter returns a Writer that logs to log, dumping at most maxBytes body
// bytes per event.
func NewWriter(log *slog.Logger, maxBytes int) *Writer {
	return &Writer{log: log, maxBytes: maxBytes}
}

// Write logs events at INFO, one record per event. It skips the formatting
// when the logger does not print INFO.
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	if !w.log.Enabled(ctx, slog.LevelInfo) {
		return nil
	}
	for i := range events {
		w.buf = append(w.buf[:0], "Event: "...)
		w.buf = AppendDump(w.buf, &events[i], w.maxBytes)
		w.log.LogAttrs(ctx, slog.LevelInfo, string(w.buf))
	}
	return nil
}

// New builds a logger sink from its properties: maxBytesToLog (16).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	maxBytes := p.IntRange("maxBytesToLog", DefaultMaxBytesToLog, 0, math.MaxInt32)
	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, NewWriter(env.Log(), maxBytes), DefaultBatchSize, c), nil
}

const hexDigits = "0123456789ABCDEF"

// AppendDump appends to dst the description of e that Flume's
// EventHelper.dumpEvent gives: "{ headers:{k=v, ...} body: <dump> }", where
// the dump shows the first maxBytes bytes of the body as lines of 16 bytes,
// each byte as two upper-case hex digits followed by a space (missing bytes
// as three spaces), then the bytes as characters with anything outside
// printable ASCII shown as '.'. Every line but the first starts with its
// offset as 8 hex digits, and lines are separated by '\n'. Headers are
// sorted by key (Java's HashMap order is arbitrary).
func AppendDump(dst []byte, e *event.Event, maxBytes int) []byte {
	dst = append(dst, "{ headers:{"...)
	if len(e.Headers) > 0 {
		var scratch [16]event.Header
		for i, kv := range e.Headers.AppendSorted(scratch[:0]) {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = append(dst, kv.Key...)
			dst = append(dst, '=')
			dst = append(dst, kv.Value...)
		}
	}
	dst = append(dst, "} body:"...)
	body := e.Body
	if len(body) > maxBytes {
		body = body[:maxBytes]
	}
	for off := 0; off < len(body); off += 16 {
		line := body[off:min(off+16, len(body))]
		if off > 0 {
			dst = append(dst, '\n')
			for shift := 28; shift >= 0; shift -= 4 {
				dst = append(dst, hexDigits[(off>>shift)&0xF])
			}
		}
		dst = append(dst, ' ')
		for k := range 16 {
			if k < len(line) {
				dst = append(dst, hexDigits[line[k]>>4], hexDigits[line[k]&0xF], ' ')
			} else {
				dst = append(dst, "   "...)
			}
		}
		for _, b := range line {
			if b < ' ' || b >= 127 {
				b = '.'
			}
			dst = append(dst, b)
		}
	}
	return append(dst, " }"...)
}
