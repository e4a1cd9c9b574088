// Package otlpsource is the otlp source: an OpenTelemetry (OTLP) logs
// receiver over gRPC and HTTP (protobuf or JSON, optionally compressed), as
// OpenTelemetry SDKs, agents and Collectors export. Each log record becomes
// one event (see internal/otlpconv for the mapping), and each request is put
// into the channels in one transaction: the sender is answered success
// only once every required channel committed it. A request the agent cannot
// take now (a full channel, the agent stopping, too many requests in
// progress) is answered the way OTLP exporters retry: gRPC UNAVAILABLE with
// a RetryInfo, HTTP 503 with Retry-After. A request that can never be taken
// (unreadable, too large) is answered so that it is not retried: gRPC
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED, HTTP 400 or 413. Records larger
// than maxEventBytes, when set, are refused alone with OTLP's partial
// success, the rest of the request taken.
//
// Both listeners go through internal/listener: one connection limit and
// idle and progress timeouts for both, and one budget of bytes in flight
// that every request takes its bytes from before it is read and decoded.
package otlpsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/otlpconv"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Defaults.
const (
	DefaultGRPCPort = 4317
	DefaultHTTPPort = 4318
	DefaultHTTPPath = "/v1/logs"
	// DefaultMaxRequestBytes is the OpenTelemetry Collector's gRPC default
	// (max_recv_msg_size_mib 4): far above an SDK's batch (512 records).
	DefaultMaxRequestBytes = 4 << 20
	// DefaultMaxInFlight bounds what every request being read and decoded
	// holds at once. Decoding a request and making its events takes 1.5 to
	// 15 times its size, by the size of its records (see estimate.go): a
	// request of the largest size fits, and a few dozen of an SDK's.
	DefaultMaxInFlight = 64 << 20
	// minInFlightFactor is the least maxBytesInFlight / maxRequestBytes:
	// a compressed request, its bytes decompressed, and the decoding of
	// large records.
	minInFlightFactor = 4
	// retryDelay is the pause a refused sender is asked to take.
	retryDelay = time.Second
)

// Reasons the source refuses a request, each logged (throttled) with the
// peer and counted in the source's metrics.
var (
	reasonTooLarge = listener.Reason{Counter: "RequestTooLargeCount", Level: slog.LevelWarn,
		Msg: "otlp source refused a request too large (over maxRequestBytes); answered gRPC RESOURCE_EXHAUSTED or HTTP 413"}
	reasonOverBudget = listener.Reason{Counter: "OverBudgetCount", Level: slog.LevelWarn,
		Msg: "otlp source refused a request: the requests in progress hold maxBytesInFlight; answered gRPC UNAVAILABLE or HTTP 503, retry shortly"}
	reasonBadRequest = listener.Reason{Counter: "BadRequestCount", Level: slog.LevelWarn,
		Msg: "otlp source refused a request it could not read; answered gRPC INVALID_ARGUMENT or HTTP 400"}
	reasonMediaType = listener.Reason{Counter: "UnsupportedMediaTypeCount", Level: slog.LevelWarn,
		Msg: "otlp source refused an HTTP request whose Content-Type is neither application/x-protobuf nor application/json; answered 415"}
	reasonNotFound = listener.Reason{Counter: "NotFoundCount", Level: slog.LevelWarn,
		Msg: "otlp source refused an HTTP request to a path other than its logs path (or a method other than POST); answered 404 or 405"}
	reasonProtocol = listener.Reason{Counter: "ProtocolErrorCount", Level: slog.LevelWarn,
		Msg: "otlp source: a connection failed at the HTTP, HTTP/2 or TLS level"}
	reasonEventTooLarge = listener.Reason{Counter: "EventTooLargeCount", Level: slog.LevelWarn,
		Msg: "otlp source refused log records larger than maxEventBytes; the rest of the request was taken and the sender told (partial success)"}
	reasonChannelFull = listener.Reason{Level: slog.LevelWarn,
		Msg: "otlp source could not put a request's records; answered gRPC UNAVAILABLE or HTTP 503, the sender retries. Consider a bigger channel or faster sinks"}
	reasonStopping = listener.Reason{Level: slog.LevelInfo,
		Msg: "otlp source refused a request: the agent is stopping; answered gRPC UNAVAILABLE or HTTP 503, the sender retries"}
	reasonPutFailed = listener.Reason{Level: slog.LevelWarn,
		Msg: "otlp source failed to put a request's records; answered gRPC UNAVAILABLE or HTTP 503, the sender retries"}
)

// Source is the otlp source. Build it with New.
type Source struct {
	env          flow.Env
	bind         string
	grpcPort     int // -1: off
	httpPort     int // -1: off
	httpPath     string
	mapping      otlpconv.Mapping
	maxBody      int64
	maxInFlight  int64
	budget       *listener.Budget // the bytes in flight allowed; what it holds is BytesInFlight
	maxEvent     int64            // 0: no limit
	hygiene      listener.Config
	tls          tlsconf.Settings
	counters     *metrics.SourceCounters
	rejects      *listener.Rejects
	droppedLarge prometheus.Counter // records refused for maxEventBytes

	mu       sync.Mutex // guards the fields below
	group    *listener.Group
	grpcSrv  *grpc.Server
	httpSrv  *http.Server
	grpcAddr net.Addr
	httpAddr net.Addr
	proc     flow.Processor
	serving  sync.WaitGroup // the Serve goroutines
}

// New builds an otlp source from its properties: bind (0.0.0.0), grpcPort
// (4317) and httpPort (4318), either -1 to turn that listener off, httpPath
// (/v1/logs), resourcePrefix (resource.), maxRequestBytes (4 MiB, a
// request after decompression), maxBytesInFlight (64 MiB), maxEventBytes
// (0, no limit: a record's body and headers), the connection limits of
// internal/listener (maxConnections 1024 over both listeners, idleTimeout
// 600000 ms, progressTimeout 10000 ms, minBytesPerSecond 1024) and the SSL
// keys of Flume's sources (ssl, keystore, keystore-password, keystore-type,
// include-/exclude-protocols, include-/exclude-cipher-suites), which apply
// to both listeners.
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	s.bind = p.String("bind", "0.0.0.0")
	if strings.TrimSpace(s.bind) == "" {
		p.Errorf("bind", "is empty; set an address to listen on, such as 0.0.0.0")
	}
	s.grpcPort = p.IntRange("grpcPort", DefaultGRPCPort, -1, 65535)
	s.httpPort = p.IntRange("httpPort", DefaultHTTPPort, -1, 65535)
	if s.grpcPort == -1 && s.httpPort == -1 {
		p.Errorf("grpcPort", "and httpPort are both -1, so the source would listen nowhere; leave one of them on")
	}
	if s.grpcPort > 0 && s.grpcPort == s.httpPort {
		p.Errorf("httpPort", "is %d, the same as grpcPort; give the two listeners different ports", s.httpPort)
	}
	s.httpPath = p.String("httpPath", DefaultHTTPPath)
	if !strings.HasPrefix(s.httpPath, "/") {
		p.Errorf("httpPath", "%q does not start with /; use a path such as %s", s.httpPath, DefaultHTTPPath)
	}
	s.mapping.ResourcePrefix = p.String("resourcePrefix", otlpconv.DefaultResourcePrefix)
	if msg := otlpconv.CheckPrefix(s.mapping.ResourcePrefix); msg != "" {
		p.Errorf("resourcePrefix", "%q %s", s.mapping.ResourcePrefix, msg)
	}
	s.maxBody = p.Int64("maxRequestBytes", DefaultMaxRequestBytes)
	if s.maxBody <= 0 || s.maxBody > math.MaxInt32 {
		p.Errorf("maxRequestBytes", "%d is out of range; use a number of bytes from 1 to %d", s.maxBody, math.MaxInt32)
		s.maxBody = DefaultMaxRequestBytes
	}
	s.maxEvent = p.Int64("maxEventBytes", 0)
	if s.maxEvent < 0 {
		p.Errorf("maxEventBytes", "%d is negative; use a number of bytes, or 0 for no limit", s.maxEvent)
	}
	s.hygiene = listener.ReadConfig(p, listener.CamelNames, listener.DefaultConfig)
	s.maxInFlight = listener.ReadBudget(p, listener.CamelNames, DefaultMaxInFlight, 1<<20)
	if need := s.maxBody * minInFlightFactor; s.maxInFlight < need {
		p.Errorf(listener.CamelNames.MaxBytesInFlight, "%d is less than %d × maxRequestBytes (%d: a compressed request, its decompressed bytes, then its records and events), so the largest requests could never be taken; raise it to %d or lower maxRequestBytes",
			s.maxInFlight, minInFlightFactor, s.maxBody, need)
	}
	s.tls = tlsconf.ReadServer(p)
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.rejects = listener.NewRejects(env.Name, env.Log(), s.counters.Set,
		append([]listener.Reason{reasonTooLarge, reasonOverBudget, reasonBadRequest, reasonMediaType, reasonNotFound,
			reasonProtocol, reasonEventTooLarge}, listener.ConnReasons...)...)
	s.budget = listener.NewBudget(s.maxInFlight)
	s.counters.Gauge("BytesInFlight", func() string { return strconv.FormatInt(s.inFlight(), 10) })
	s.droppedLarge = env.Registry().Dropped(env.Name, "event_too_large")
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// inFlight is what the source's budget holds now (its BytesInFlight).
func (s *Source) inFlight() int64 { return s.budget.InUse() }

// GRPCAddr and HTTPAddr return the addresses the listeners listen on, once
// started; nil for a listener that is off.
func (s *Source) GRPCAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grpcAddr
}

// HTTPAddr is GRPCAddr for the HTTP listener.
func (s *Source) HTTPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpAddr
}

// Start loads the TLS key material (when ssl is set) and listens.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	s.mu.Lock()
	started := s.group != nil
	s.mu.Unlock()
	if started {
		return fmt.Errorf("otlp %s: already started", s.env.Name)
	}
	tlsConf, err := s.tls.ServerConfig()
	if err != nil {
		return fmt.Errorf("otlp %s: %w", s.env.Name, err)
	}
	g := listener.NewGroup(s.hygiene, listener.Options{Source: s.env.Name, Log: s.env.Log(), Rejects: s.rejects, Open: s.counters.OpenConnection})
	fail := func(err error) error {
		_ = g.Shutdown(context.Background())
		return fmt.Errorf("otlp %s: %w", s.env.Name, err)
	}
	var grpcLn, httpLn *listener.Listener
	if s.grpcPort >= 0 {
		addr := net.JoinHostPort(s.bind, strconv.Itoa(s.grpcPort))
		if grpcLn, err = g.Listen(addr); err != nil {
			return fail(fmt.Errorf("listen for gRPC on %s: %w", addr, err))
		}
	}
	if s.httpPort >= 0 {
		addr := net.JoinHostPort(s.bind, strconv.Itoa(s.httpPort))
		if httpLn, err = g.Listen(addr); err != nil {
			return fail(fmt.Errorf("listen for HTTP on %s: %w", addr, err))
		}
	}
	s.mu.Lock()
	s.group, s.proc = g, p
	s.mu.Unlock()
	s.counters.Started()
	if grpcLn != nil {
		srv := s.newGRPCServer(tlsConf)
		s.mu.Lock()
		s.grpcSrv, s.grpcAddr = srv, grpcLn.Addr()
		s.mu.Unlock()
		s.serving.Add(1)
		panics.Go("otlp source "+s.env.Name+": gRPC server", func() {
			defer s.serving.Done()
			if err := srv.Serve(explicitListener{grpcLn}); err != nil && !g.Stopping() {
				s.env.Log().Error("otlp source stopped serving gRPC", "source", s.env.Name, "err", err)
			}
		})
		s.env.Log().Info("otlp source listening for OTLP/gRPC", "source", s.env.Name, "addr", grpcLn.Addr().String(), "tls", tlsConf != nil)
	}
	if httpLn != nil {
		srv := s.newHTTPServer()
		var ln net.Listener = httpLn
		if tlsConf != nil {
			ln = tlsListener(httpLn, tlsConf)
		}
		s.mu.Lock()
		s.httpSrv, s.httpAddr = srv, httpLn.Addr()
		s.mu.Unlock()
		s.serving.Add(1)
		panics.Go("otlp source "+s.env.Name+": HTTP server", func() {
			defer s.serving.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !g.Stopping() {
				s.env.Log().Error("otlp source stopped serving HTTP", "source", s.env.Name, "err", err)
			}
		})
		s.env.Log().Info("otlp source listening for OTLP/HTTP", "source", s.env.Name, "addr", httpLn.Addr().String(), "path", s.httpPath, "tls", tlsConf != nil)
	}
	return nil
}

// Stop stops both listeners. Requests being put finish and are answered
// (refused, once the agent closed intake); gRPC senders are told to go
// away (GOAWAY) before their connections close; a request still arriving is
// cut and its sender, never answered, sends it again. Within ctx; then what
// is left is closed.
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	g, gsrv, hsrv := s.group, s.grpcSrv, s.httpSrv
	s.group, s.grpcSrv, s.httpSrv, s.grpcAddr, s.httpAddr = nil, nil, nil, nil, nil
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	defer s.counters.Stopped()
	var errs []error
	if gsrv != nil {
		// GracefulStop lets the calls in progress answer before their
		// connections close; the group's Shutdown would close them at once.
		done := make(chan struct{})
		panics.Go("otlp source "+s.env.Name+": gRPC graceful stop", func() { gsrv.GracefulStop(); close(done) })
		select {
		case <-done:
		case <-ctx.Done():
			gsrv.Stop()
			<-done
			errs = append(errs, fmt.Errorf("gRPC calls still in progress: %w", ctx.Err()))
		}
	}
	herr := make(chan error, 1)
	if hsrv != nil {
		panics.Go("otlp source "+s.env.Name+": HTTP shutdown", func() { herr <- hsrv.Shutdown(ctx) })
	} else {
		herr <- nil
	}
	gerr := g.Shutdown(ctx)
	if err := <-herr; err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	if gerr != nil {
		errs = append(errs, gerr)
	}
	if len(errs) > 0 {
		if hsrv != nil {
			_ = hsrv.Close() // the error that made us close is in errs
		}
		g.CloseAll()
	}
	s.serving.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("otlp %s: stop: %w", s.env.Name, errors.Join(errs...))
	}
	return nil
}

// Errors of a request's handling, which each protocol answers its way.
var (
	// errBusy: the budget has no room now; retry shortly.
	errBusy = errors.New("the source is busy with other requests (maxBytesInFlight reached); retry shortly")
)

// tooLargeError is a request that the budget can never hold.
type tooLargeError struct{ need, limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("reading and decoding this request takes about %d bytes, more than maxBytesInFlight (%d); send smaller batches", e.need, e.limit)
}

// putError is a put that failed: the sender is to retry.
type putError struct {
	stopping bool
	err      error
}

func (e *putError) Error() string {
	if e.stopping {
		return "the agent is stopping; nothing of this request was kept; send it again, here once the agent is back or elsewhere"
	}
	return "the agent could not take the records now (" + e.err.Error() + "); nothing of this request was kept; send it again later"
}

func (e *putError) Unwrap() error { return e.err }

// reserve takes n more bytes for hold, or says why not.
func reserve(hold *listener.Hold, budget *listener.Budget, n int64) error {
	if !hold.Fits(n) {
		return &tooLargeError{need: hold.Bytes() + n, limit: budget.Limit()}
	}
	if !hold.Try(n) {
		return errBusy
	}
	return nil
}

// accepted is what a request's export answers: how many records were
// refused alone (partial success) and why.
type accepted struct {
	rejected int64
	message  string
}

// badRequestError is a request that cannot be read: not OTLP, or values
// nested too deeply.
type badRequestError struct{ err error }

func (e *badRequestError) Error() string { return e.err.Error() }
func (e *badRequestError) Unwrap() error { return e.err }

// export puts the records of body (an ExportLogsServiceRequest, in JSON
// when isJSON, else protobuf; already held by hold) into the channels: one
// event per record, one transaction. Before decoding it takes from the
// budget what decoding and the events will hold, as a scan of body bounds
// it.
func (s *Source) export(ctx context.Context, body []byte, isJSON bool, hold *listener.Hold, peer string) (accepted, error) {
	c := s.counters
	s.mu.Lock()
	p, budget := s.proc, s.budget
	s.mu.Unlock()
	if p == nil {
		return accepted{}, &putError{stopping: true, err: flow.ErrStopping}
	}
	var sh shape
	var err error
	enc := "protobuf"
	if isJSON {
		sh, err = scanJSON(body)
		enc = "JSON"
	} else {
		sh, err = scanProto(body)
	}
	if err != nil {
		return accepted{}, &badRequestError{fmt.Errorf("the body is not an OTLP ExportLogsServiceRequest in %s: %w", enc, err)}
	}
	if err := reserve(hold, budget, sh.cost(len(body))); err != nil {
		return accepted{}, err
	}
	req := plogotlp.NewExportRequest()
	if isJSON {
		err = req.UnmarshalJSON(body)
	} else {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		return accepted{}, &badRequestError{fmt.Errorf("the body is not an OTLP ExportLogsServiceRequest in %s: %w", enc, err)}
	}
	ld := req.Logs()
	n := ld.LogRecordCount()
	if n == 0 {
		return accepted{}, nil
	}
	events := s.mapping.Events(make([]event.Event, 0, n), ld, event.Now())
	var acc accepted
	if s.maxEvent > 0 {
		events, acc = s.dropLarge(events, peer)
	}
	c.AppendBatchReceived.Add(1)
	c.EventReceived.Add(int64(len(events)))
	if len(events) == 0 {
		c.AppendBatchAccepted.Add(1)
		return acc, nil
	}
	if err := p.Process(ctx, events); err != nil {
		c.ChannelWriteFail.Add(1)
		switch {
		case errors.Is(err, flow.ErrStopping):
			s.rejects.Add(reasonStopping, peer, "records", len(events))
			return accepted{}, &putError{stopping: true, err: err}
		case errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed):
			s.rejects.Add(reasonChannelFull, peer, "records", len(events), "err", err)
		default:
			c.ChannelWriteFail.Add(-1)
			c.GenericProcessingFail.Add(1)
			s.rejects.Add(reasonPutFailed, peer, "records", len(events), "err", err)
		}
		return accepted{}, &putError{err: err}
	}
	c.AppendBatchAccepted.Add(1)
	c.EventAccepted.Add(int64(len(events)))
	return acc, nil
}

// dropLarge removes the events larger than maxEventBytes.
func (s *Source) dropLarge(events []event.Event, peer string) ([]event.Event, accepted) {
	kept := events[:0]
	var rejected, largest int64
	for _, e := range events {
		size := int64(len(e.Body))
		for k, v := range e.Headers.All() {
			size += int64(len(k) + len(v))
		}
		if size > s.maxEvent {
			rejected++
			largest = max(largest, size)
			continue
		}
		kept = append(kept, e)
	}
	clear(events[len(kept):])
	if rejected == 0 {
		return kept, accepted{}
	}
	s.droppedLarge.Add(float64(rejected))
	s.rejects.Add(reasonEventTooLarge, peer, "records", rejected, "largest_bytes", largest, "maxEventBytes", s.maxEvent)
	return kept, accepted{rejected: rejected, message: fmt.Sprintf(
		"%d log records were larger than this source's maxEventBytes (%d bytes; the largest was %d) and were not accepted; the others were",
		rejected, s.maxEvent, largest)}
}
