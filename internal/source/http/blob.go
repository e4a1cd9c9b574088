package httpsource

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
)

// Flume's two handlers that take a request's whole body as one event, its
// query parameters as headers.
const (
	// MorphlineBlobHandler also puts the request's Content-Type in a
	// header, and bounds the body (handler.maxBlobLength).
	MorphlineBlobHandler = "org.apache.flume.sink.solr.morphline.BlobHandler"
	// CoreBlobHandler may require parameters (handler.mandatoryParameters).
	CoreBlobHandler = "org.apache.flume.source.http.BLOBHandler"
)

// blobHandler is one of Flume's BLOB handlers; nil means the JSON handler.
type blobHandler struct {
	contentType bool     // the morphline handler's Content-Type header
	maxBlob     int64    // 0: no bound of its own (maxRequestBytes still holds)
	mandatory   []string // parameters a request must have
}

// readBlobHandler reads the handler.* keys of the BLOB handler named h.
func readBlobHandler(p *config.Props, h string) *blobHandler {
	b := &blobHandler{}
	switch h {
	case MorphlineBlobHandler:
		b.contentType = true
		b.maxBlob = p.Int64("handler.maxBlobLength", 100000000)
		if b.maxBlob <= 0 {
			p.Errorf("handler.maxBlobLength", "%d is not a positive number of bytes", b.maxBlob)
			b.maxBlob = 100000000
		}
	case CoreBlobHandler:
		// Flume splits its default "" into one empty name, which no request
		// has; here no list means no mandatory parameter.
		b.mandatory = p.Split("handler.mandatoryParameters", ",")
	}
	return b
}

// event builds the request's event: the body as it came, the first value of
// each query parameter as a header. A body longer than maxBlobLength is
// refused (Flume cuts it and answers OK, which loses its end without a word);
// a missing mandatory parameter is a bad request.
func (b *blobHandler) event(r *http.Request, body []byte) ([]event.Event, error) {
	if b.maxBlob > 0 && int64(len(body)) > b.maxBlob {
		return nil, &tooLongBlobError{limit: b.maxBlob}
	}
	headers := map[string]string{}
	for k, v := range r.URL.Query() {
		if len(v) > 0 {
			headers[k] = v[0]
		}
	}
	if ct := r.Header.Get("Content-Type"); b.contentType && ct != "" {
		headers["Content-Type"] = ct
	}
	for _, m := range b.mandatory {
		if _, ok := headers[m]; !ok {
			return nil, &BadRequestError{Msg: fmt.Sprintf("Please specify %s parameter in the request.", m)}
		}
	}
	return []event.Event{{Headers: event.HeadersOf(headers), Body: body}}, nil
}

// tooLongBlobError is a body over handler.maxBlobLength.
type tooLongBlobError struct{ limit int64 }

func (e *tooLongBlobError) Error() string {
	return fmt.Sprintf("request body exceeds %d bytes (handler.maxBlobLength); send a smaller object", e.limit)
}
