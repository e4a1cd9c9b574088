package otlpsource

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/panics"
)

// The media types of OTLP/HTTP.
const (
	typeProtobuf = "application/x-protobuf"
	typeJSON     = "application/json"
)

const readChunk = 64 << 10

// connKey finds the request's connection in its context.
type connKey struct{}

// writerFunc turns net/http's error log into rejects.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func tlsListener(ln net.Listener, conf *tls.Config) net.Listener { return tls.NewListener(ln, conf) }

func (s *Source) newHTTPServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// A body is bounded by the progress rule, not a total time; a put
		// may wait for channel space (keep-alive) before the answer.
		WriteTimeout:   90 * time.Second,
		IdleTimeout:    s.hygiene.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ConnState: func(c net.Conn, st http.ConnState) {
			if lc := listener.Of(c); lc != nil && st == http.StateIdle {
				lc.Idle()
			}
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, listener.Of(c))
		},
		ErrorLog: log.New(writerFunc(func(b []byte) (int, error) {
			s.rejects.Add(reasonProtocol, "", "err", strings.TrimSpace(string(b)))
			return len(b), nil
		}), "", 0),
	}
}

// httpAnswer writes a google.rpc.Status in the request's encoding, as
// OTLP/HTTP answers failures.
func httpAnswer(w http.ResponseWriter, contentType string, code int, st *status.Status) {
	var body []byte
	var err error
	if contentType == typeJSON {
		body, err = protojson.Marshal(st.Proto())
	} else {
		contentType = typeProtobuf
		body, err = proto.Marshal(st.Proto())
	}
	if err != nil {
		http.Error(w, st.Message(), code)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// ServeHTTP takes one OTLP/HTTP logs request: one transaction.
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// net/http would recover a panic and serve on; the agent's rule is
	// to exit (package panics).
	defer panics.Guard("otlp source " + s.env.Name + ": HTTP request")
	peer := r.RemoteAddr
	c := s.counters
	if r.URL.Path != s.httpPath {
		s.rejects.Add(reasonNotFound, peer, "path", r.URL.Path)
		http.Error(w, fmt.Sprintf("404 page not found; OTLP logs go to %s", s.httpPath), http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		s.rejects.Add(reasonNotFound, peer, "method", r.Method)
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed; send OTLP logs with POST", http.StatusMethodNotAllowed)
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != typeProtobuf && mt != typeJSON {
		c.EventReadFail.Add(1)
		s.rejects.Add(reasonMediaType, peer, "content_type", r.Header.Get("Content-Type"))
		httpAnswer(w, typeProtobuf, http.StatusUnsupportedMediaType, status.Newf(codes.InvalidArgument,
			"unsupported Content-Type %q; send %s or %s", r.Header.Get("Content-Type"), typeProtobuf, typeJSON))
		return
	}
	encoding := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	switch encoding {
	case "", "identity", "gzip", "x-gzip", "deflate", "zstd":
	default:
		c.EventReadFail.Add(1)
		s.rejects.Add(reasonBadRequest, peer, "content_encoding", encoding)
		httpAnswer(w, mt, http.StatusBadRequest, status.Newf(codes.InvalidArgument,
			"unsupported Content-Encoding %q; send gzip, deflate, zstd or none", encoding))
		return
	}

	s.mu.Lock()
	budget := s.budget
	s.mu.Unlock()
	hold := listener.NewHold(budget)
	defer hold.Release()
	refuse := func(err error) {
		var tl *tooLargeError
		var rt *requestTooLargeError
		var pe *putError
		switch {
		case errors.As(err, &tl) || errors.As(err, &rt):
			c.EventReadFail.Add(1)
			s.rejects.Add(reasonTooLarge, peer, "err", err)
			httpAnswer(w, mt, http.StatusRequestEntityTooLarge, status.New(codes.ResourceExhausted, err.Error()))
		case errors.Is(err, errBusy):
			s.rejects.Add(reasonOverBudget, peer, "maxBytesInFlight", budget.Limit())
			w.Header().Set("Retry-After", strconv.Itoa(int(retryDelay/time.Second)))
			httpAnswer(w, mt, http.StatusServiceUnavailable, status.New(codes.Unavailable, err.Error()))
		case errors.As(err, &pe):
			w.Header().Set("Retry-After", strconv.Itoa(int(retryDelay/time.Second)))
			if pe.stopping {
				w.Header().Set("Connection", "close")
			}
			httpAnswer(w, mt, http.StatusServiceUnavailable, status.New(codes.Unavailable, pe.Error()))
		default: // unreadable: a bad body, a bad encoding
			c.EventReadFail.Add(1)
			s.rejects.Add(reasonBadRequest, peer, "err", err)
			httpAnswer(w, mt, http.StatusBadRequest, status.New(codes.InvalidArgument, err.Error()))
		}
	}

	if r.ContentLength > s.maxBody {
		refuse(s.tooLarge(r.ContentLength))
		return
	}
	lc, _ := r.Context().Value(connKey{}).(*listener.Conn)
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.maxBody), r.ContentLength, s.maxBody, &hold, budget)
	if err == nil && encoding != "" && encoding != "identity" {
		var plain []byte
		plain, err = decompress(encoding, body, s.maxBody, &hold, budget)
		hold.Shrink(int64(cap(body))) // the compressed body is done with
		body = plain
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case lc != nil && lc.ClosedBy() != "":
			// The source closed the connection (too slow, to admit
			// another, stopping) and said so already.
			c.EventReadFail.Add(1)
		case errors.As(err, &tooBig):
			refuse(s.tooLarge(tooBig.Limit + 1))
		default:
			refuse(err)
		}
		return
	}
	if lc != nil {
		lc.Busy() // the request has arrived; what follows is the agent's work
	}
	acc, err := s.export(r.Context(), body, mt == typeJSON, &hold, peer)
	if err != nil {
		refuse(err)
		return
	}
	resp := plogotlp.NewExportResponse()
	if acc.rejected > 0 {
		ps := resp.PartialSuccess()
		ps.SetRejectedLogRecords(acc.rejected)
		ps.SetErrorMessage(acc.message)
	}
	var out []byte
	if mt == typeJSON {
		out, err = resp.MarshalJSON()
	} else {
		out, err = resp.MarshalProto()
	}
	if err != nil {
		// Cannot happen for a response this simple; the records are in.
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", mt)
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

func (s *Source) tooLarge(n int64) error {
	return &requestTooLargeError{size: n, limit: s.maxBody}
}

// requestTooLargeError is a body over maxRequestBytes.
type requestTooLargeError struct{ size, limit int64 }

func (e *requestTooLargeError) Error() string {
	return fmt.Sprintf("the request is larger than this source's maxRequestBytes (%d bytes); send smaller batches", e.limit)
}

// readBody reads the request body (at most maxBody bytes, rd enforcing
// it) into a buffer whose bytes were taken from the budget before it was
// allocated: all of a declared Content-Length at once, else 64 KiB at a
// time.
func readBody(rd io.Reader, contentLength, maxBody int64, hold *listener.Hold, budget *listener.Budget) ([]byte, error) {
	if contentLength >= 0 {
		if err := reserve(hold, budget, contentLength); err != nil {
			return nil, err
		}
		buf := make([]byte, contentLength)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return readAll(rd, maxBody, hold, budget)
}

// readAll reads rd to its end into a buffer that grows by reservations
// from the budget, failing once it would hold more than limit bytes.
func readAll(rd io.Reader, limit int64, hold *listener.Hold, budget *listener.Budget) ([]byte, error) {
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, &requestTooLargeError{size: int64(len(buf)), limit: limit}
			}
			size := min(int64(max(2*cap(buf), readChunk)), limit+1)
			if err := reserve(hold, budget, size); err != nil {
				return nil, err
			}
			nb := make([]byte, len(buf), size)
			copy(nb, buf)
			hold.Shrink(int64(cap(buf)))
			buf = nb
		}
		m, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) > limit {
				return nil, &requestTooLargeError{size: int64(len(buf)), limit: limit}
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// badEncodingError is a body that does not decompress.
type badEncodingError struct {
	encoding string
	err      error
}

func (e *badEncodingError) Error() string {
	return fmt.Sprintf("the body is not valid %s: %v", e.encoding, e.err)
}

// decompress returns body decompressed, at most limit bytes, its buffer
// taken from the budget as it grows.
func decompress(encoding string, body []byte, limit int64, hold *listener.Hold, budget *listener.Budget) ([]byte, error) {
	var rd io.Reader
	switch encoding {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, &badEncodingError{encoding, err}
		}
		defer zr.Close()
		rd = zr
	case "deflate":
		zr, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, &badEncodingError{encoding, err}
		}
		defer zr.Close()
		rd = zr
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)+1))
		if err != nil {
			return nil, &badEncodingError{encoding, err}
		}
		defer zr.Close()
		rd = zr
	}
	out, err := readAll(rd, limit, hold, budget)
	if err != nil {
		var tl *tooLargeError
		var rt *requestTooLargeError
		if errors.Is(err, errBusy) || errors.As(err, &tl) || errors.As(err, &rt) {
			return nil, err
		}
		return nil, &badEncodingError{encoding, err}
	}
	return out, nil
}
