// Package otlptest holds the independent OTLP peers of the otlp source's
// and sink's tests: log records made by the OpenTelemetry Go SDK (for its
// exporters, otlploggrpc and otlploghttp, to send), and an OTLP receiver
// built from pdata's own server side (plogotlp's gRPC registration and
// request decoding) to stand downstream of the sink. Only tests import it,
// so none of it reaches the agent binary.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // the sink may compress
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// collector is a Processor that keeps the records the SDK emits.
type collector struct {
	mu   sync.Mutex
	recs []sdklog.Record
}

func (c *collector) OnEmit(_ context.Context, r *sdklog.Record) error {
	c.mu.Lock()
	c.recs = append(c.recs, r.Clone())
	c.mu.Unlock()
	return nil
}
func (c *collector) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (c *collector) Shutdown(context.Context) error                         { return nil }
func (c *collector) ForceFlush(context.Context) error                       { return nil }

// Records returns the records emit makes through the OpenTelemetry SDK's
// logger named scope, under resource res: records as the SDK's exporters
// receive them, for a test to Export.
func Records(res *resource.Resource, scope string, emit func(ctx context.Context, l log.Logger)) []sdklog.Record {
	c := &collector{}
	lp := sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(c))
	emit(context.Background(), lp.Logger(scope))
	_ = lp.Shutdown(context.Background())
	return c.recs
}

// Exporter is what the SDK's otlploggrpc and otlploghttp exporters have in
// common.
type Exporter interface {
	Export(ctx context.Context, records []sdklog.Record) error
	Shutdown(ctx context.Context) error
}

// Request is one request the Receiver took.
type Request struct {
	Logs     plog.Logs
	Metadata map[string]string // gRPC metadata or HTTP headers (lower-case names, first values)
	JSON     bool              // HTTP: the body was JSON
	Gzip     bool              // the body was gzip-compressed (HTTP), or the call was (gRPC)
}

// Answer decides a Receiver's answer to a request; nil accepts it.
type Answer func(ld plog.Logs) (plogotlp.ExportResponse, error)

// Receiver is an OTLP logs receiver over gRPC or HTTP, made of pdata's
// server side, that records what it takes. It can be stopped and started
// again on the same address, to play a downstream that goes away.
type Receiver struct {
	t    testing.TB
	http bool
	addr string
	tls  *tls.Config
	plogotlp.UnimplementedGRPCServer

	mu      sync.Mutex
	reqs    []Request
	answer  Answer
	records int
	grpcSrv *grpc.Server
	httpSrv *http.Server
	ln      net.Listener
	served  sync.WaitGroup
	arrived chan struct{} // signalled after each request taken
}

// NewGRPCReceiver starts a gRPC receiver on 127.0.0.1 (a free port), with
// TLS when conf is not nil; it stops at the end of the test.
func NewGRPCReceiver(t testing.TB, conf *tls.Config) *Receiver {
	return newReceiver(t, false, conf)
}

// NewHTTPReceiver starts an HTTP receiver (/v1/logs) likewise.
func NewHTTPReceiver(t testing.TB, conf *tls.Config) *Receiver {
	return newReceiver(t, true, conf)
}

func newReceiver(t testing.TB, isHTTP bool, conf *tls.Config) *Receiver {
	t.Helper()
	r := &Receiver{t: t, http: isHTTP, addr: "127.0.0.1:0", tls: conf, arrived: make(chan struct{}, 1)}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// Addr is the receiver's host:port.
func (r *Receiver) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// Start listens (again) on the receiver's address.
func (r *Receiver) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		return nil
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // a port just closed may take a moment to be free again
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	r.ln, r.addr = ln, ln.Addr().String()
	r.served.Add(1)
	if r.http {
		srv := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
		if r.tls != nil {
			ln = tls.NewListener(ln, r.tls)
		}
		r.httpSrv = srv
		go func() { defer r.served.Done(); _ = srv.Serve(ln) }()
		return nil
	}
	opts := []grpc.ServerOption{grpc.StatsHandler(compressionSeen{})}
	if r.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(r.tls)))
	}
	srv := grpc.NewServer(opts...)
	plogotlp.RegisterGRPCServer(srv, r)
	r.grpcSrv = srv
	go func() { defer r.served.Done(); _ = srv.Serve(ln) }()
	return nil
}

// Stop closes the listener and every connection at once.
func (r *Receiver) Stop() {
	r.mu.Lock()
	gs, hs := r.grpcSrv, r.httpSrv
	r.grpcSrv, r.httpSrv, r.ln = nil, nil, nil
	r.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
	if hs != nil {
		_ = hs.Close()
	}
	r.served.Wait()
}

// SetAnswer makes a decide every later answer (nil: accept).
func (r *Receiver) SetAnswer(a Answer) {
	r.mu.Lock()
	r.answer = a
	r.mu.Unlock()
}

// Requests returns the requests taken so far.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Count is how many records were taken so far.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records
}

// Records returns every record taken so far with its resource's and
// scope's attributes, in arrival order.
func (r *Receiver) Records() []plog.LogRecord {
	var out []plog.LogRecord
	for _, q := range r.Requests() {
		for _, rl := range q.Logs.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					out = append(out, lr)
				}
			}
		}
	}
	return out
}

// WaitCount waits up to d for n records in all.
func (r *Receiver) WaitCount(n int, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for r.Count() < n {
		select {
		case <-r.arrived:
		case <-t.C:
			return r.Count() >= n
		}
	}
	return true
}

func (r *Receiver) take(ld plog.Logs, q Request) (plogotlp.ExportResponse, error) {
	r.mu.Lock()
	a := r.answer
	r.mu.Unlock()
	if a != nil {
		resp, err := a(ld)
		if err != nil {
			return resp, err
		}
		if resp.PartialSuccess().RejectedLogRecords() != 0 || resp.PartialSuccess().ErrorMessage() != "" {
			return resp, nil // not recorded: the test looks at what it answered
		}
	}
	kept := plog.NewLogs()
	ld.CopyTo(kept)
	q.Logs = kept
	r.mu.Lock()
	r.reqs = append(r.reqs, q)
	r.records += kept.LogRecordCount()
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	return plogotlp.NewExportResponse(), nil
}

// Export is the gRPC side.
func (r *Receiver) Export(ctx context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	q := Request{Metadata: map[string]string{}}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, v := range md {
			if len(v) > 0 {
				q.Metadata[k] = v[0]
			}
		}
	}
	if c, ok := ctx.Value(compressedKey{}).(*bool); ok {
		q.Gzip = *c
	}
	return r.take(req.Logs(), q)
}

// serveHTTP is the HTTP side, decoding with plogotlp's request type.
func (r *Receiver) serveHTTP(w http.ResponseWriter, hr *http.Request) {
	if hr.URL.Path != "/v1/logs" || hr.Method != http.MethodPost {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	q := Request{Metadata: map[string]string{}}
	for k, v := range hr.Header {
		q.Metadata[http.CanonicalHeaderKey(k)] = v[0]
	}
	var body io.Reader = hr.Body
	if hr.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(hr.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body, q.Gzip = zr, true
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	mt, _, _ := mime.ParseMediaType(hr.Header.Get("Content-Type"))
	req := plogotlp.NewExportRequest()
	switch mt {
	case "application/json":
		q.JSON = true
		err = req.UnmarshalJSON(data)
	case "application/x-protobuf":
		err = req.UnmarshalProto(data)
	default:
		err = errors.New("unsupported content type " + mt)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := r.take(req.Logs(), q)
	if err != nil {
		var he *HTTPError
		if errors.As(err, &he) {
			for k, v := range he.Header {
				w.Header().Set(k, v)
			}
			http.Error(w, he.Msg, he.Code)
			return
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	var out []byte
	if q.JSON {
		out, _ = resp.MarshalJSON()
	} else {
		out, _ = resp.MarshalProto()
	}
	w.Header().Set("Content-Type", mt)
	_, _ = io.Copy(w, bytes.NewReader(out))
}

// HTTPError is what an Answer returns to make the HTTP receiver answer
// with a status code and headers.
type HTTPError struct {
	Code   int
	Msg    string
	Header map[string]string
}

func (e *HTTPError) Error() string { return e.Msg }

// compressionSeen notes in each call's context whether its request came
// compressed (gRPC does not show the grpc-encoding header as metadata).
type compressionSeen struct{}

type compressedKey struct{}

func (compressionSeen) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, compressedKey{}, new(bool))
}

func (compressionSeen) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		if c, ok := ctx.Value(compressedKey{}).(*bool); ok {
			*c = in.CompressedLength != in.Length
		}
	}
}

func (compressionSeen) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (compressionSeen) HandleConn(context.Context, stats.ConnStats)                       {}
