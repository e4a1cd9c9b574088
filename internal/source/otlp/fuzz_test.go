package otlpsource

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// countingProcessor takes every batch and counts its events.
type countingProcessor struct {
	mu     sync.Mutex
	events int
}

func (p *countingProcessor) Process(_ context.Context, events []event.Event) error {
	p.mu.Lock()
	p.events += len(events)
	p.mu.Unlock()
	return nil
}

// FuzzHTTPProtobuf and FuzzHTTPJSON feed the HTTP path (decompression,
// decoding, the mapping to events, the answer) any body: the source must
// answer 200 with one event per record, or 400/413 having put nothing, and
// give back every byte it took from its budget. Seeds: testdata/fuzz.
func FuzzHTTPProtobuf(f *testing.F) { fuzzHTTP(f, typeProtobuf) }

// FuzzHTTPJSON: see FuzzHTTPProtobuf.
func FuzzHTTPJSON(f *testing.F) { fuzzHTTP(f, typeJSON) }

func fuzzHTTP(f *testing.F, contentType string) {
	p := config.FromMap("a1.sources.r1.", map[string]string{"maxRequestBytes": "65536", "maxEventBytes": "4096"})
	src, err := New(sourcetest.Env("r1", "otlp"), p)
	if err != nil || p.Err() != nil {
		f.Fatal(err, p.Err())
	}
	s := src.(*Source)
	proc := &countingProcessor{}
	s.budget, s.proc = listener.NewBudget(s.maxInFlight), proc

	seed := pdataLogs(3, "seed", 10)
	seed.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(1).Body().SetEmptyMap().PutInt("n", 1)
	req := plogotlp.NewExportRequestFromLogs(seed)
	var b []byte
	if contentType == typeJSON {
		b, _ = req.MarshalJSON()
	} else {
		b, _ = req.MarshalProto()
	}
	f.Add(b, false)
	f.Add(b, true)
	f.Add([]byte{}, false)

	f.Fuzz(func(t *testing.T, body []byte, compress bool) {
		sent := body
		if compress {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(body)
			zw.Close()
			sent = buf.Bytes()
		}
		hr := httptest.NewRequest(http.MethodPost, "/v1/logs", bytes.NewReader(sent))
		hr.Header.Set("Content-Type", contentType)
		if compress {
			hr.Header.Set("Content-Encoding", "gzip")
		}
		proc.mu.Lock()
		before := proc.events
		proc.mu.Unlock()
		w := httptest.NewRecorder()
		s.ServeHTTP(w, hr)
		proc.mu.Lock()
		put := proc.events - before
		proc.mu.Unlock()
		switch w.Code {
		case http.StatusOK:
			// The answer decodes, and every record was put or refused alone.
			resp := plogotlp.NewExportResponse()
			var err error
			if contentType == typeJSON {
				err = resp.UnmarshalJSON(w.Body.Bytes())
			} else {
				err = resp.UnmarshalProto(w.Body.Bytes())
			}
			if err != nil {
				t.Fatalf("answer %q does not decode: %v", w.Body.Bytes(), err)
			}
			again := plogotlp.NewExportRequest()
			if contentType == typeJSON {
				err = again.UnmarshalJSON(body)
			} else {
				err = again.UnmarshalProto(body)
			}
			if err != nil {
				t.Fatalf("accepted a body that does not decode: %v", err)
			}
			if n := again.Logs().LogRecordCount(); int64(put)+resp.PartialSuccess().RejectedLogRecords() != int64(n) {
				t.Fatalf("%d records: %d put, %d refused", n, put, resp.PartialSuccess().RejectedLogRecords())
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if put != 0 {
				t.Fatalf("answered %d but put %d events", w.Code, put)
			}
		default:
			t.Fatalf("answered %d %q", w.Code, w.Body.Bytes())
		}
		if n := s.budget.InUse(); n != 0 {
			t.Fatalf("%d bytes still taken from the budget", n)
		}
	})
}
