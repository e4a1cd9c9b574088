package httpsource

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// The User Guide's BlobHandler: the whole body is one event, as it came
// (binary, newlines and all), the query parameters and the Content-Type are
// headers; a body over maxBlobLength is refused whole (413), not cut.
func TestMorphlineBlobHandler(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, map[string]string{"handler": MorphlineBlobHandler, "handler.maxBlobLength": "16"})
	start(t, s, pl.Processor)
	url := "http://" + s.Addr().String() + "/?file=a.pdf&host=web1&host=web2"

	body := "%PDF\x00\xff\nline2\n"
	if code, msg := send(t, http.DefaultClient, "POST", url, "application/pdf", body); code != 200 {
		t.Fatalf("status %d %q", code, msg)
	}
	got := pl.Drain(t, 1, 5*time.Second)
	if string(got[0].Body) != body {
		t.Errorf("body %q, want %q", got[0].Body, body)
	}
	h := got[0].Headers
	if len(h) != 3 || h.Value("file") != "a.pdf" || h.Value("host") != "web1" || h.Value("Content-Type") != "application/pdf" {
		t.Errorf("headers %v, want file, the first host and Content-Type", h)
	}

	code, msg := send(t, http.DefaultClient, "POST", url, "", strings.Repeat("x", 17))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "handler.maxBlobLength") {
		t.Fatalf("17 bytes over a maxBlobLength of 16: %d %q, want 413 naming the key", code, msg)
	}
	if extra := pl.Take(t, 10, 50*time.Millisecond); len(extra) != 0 {
		t.Fatalf("the refused body made %d events", len(extra))
	}
}

// Flume core's BLOBHandler: parameters as headers (no Content-Type), and a
// request without a mandatory parameter is a bad request.
func TestCoreBlobHandler(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, map[string]string{"handler": CoreBlobHandler, "handler.mandatoryParameters": "tenant, stream"})
	start(t, s, pl.Processor)
	base := "http://" + s.Addr().String() + "/"

	if code, msg := send(t, http.DefaultClient, "POST", base+"?tenant=t1", "text/plain", "x"); code != 400 || !strings.Contains(msg, "Please specify stream parameter") {
		t.Fatalf("without stream: %d %q, want 400", code, msg)
	}
	if code, msg := send(t, http.DefaultClient, "POST", base+"?tenant=t1&stream=s", "text/plain", "payload"); code != 200 {
		t.Fatalf("status %d %q", code, msg)
	}
	got := pl.Drain(t, 1, 5*time.Second)
	if h := got[0].Headers; string(got[0].Body) != "payload" || len(h) != 2 || h.Value("tenant") != "t1" || h.Value("stream") != "s" {
		t.Fatalf("event %q headers %v", got[0].Body, h)
	}
}
