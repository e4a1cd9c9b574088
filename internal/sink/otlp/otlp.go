// Package otlpsink is the otlp sink: it sends batches of events as
// OpenTelemetry log records (OTLP) over gRPC or HTTP (protobuf or JSON) to
// a Collector, a backend or another sluice, and commits its take only once
// the downstream accepted the batch. The mapping is internal/otlpconv's,
// the reverse of the otlp source's: headers become attributes, timestamp the
// time, the resource headers group records into resources.
//
// What the downstream answers decides (as the OpenTelemetry Collector's
// exporters, except where noted):
//
//   - Accepted: committed. Records a partial success says were rejected are
//     counted as dropped (sluice_events_dropped_total{reason="otlp_rejected"})
//     and logged with the downstream's message.
//   - Retryable (gRPC UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED,
//     ABORTED, CANCELLED, OUT_OF_RANGE, DATA_LOSS; HTTP 429, 502, 503, 504;
//     no answer at all): rolled back and sent again after the runner's
//     backoff (100 ms doubling to 5 s), and not before the pause the
//     downstream asked for (RetryInfo, Retry-After).
//   - Too large (HTTP 413; gRPC RESOURCE_EXHAUSTED about the message size):
//     the batch is split in halves, each sent on its own; a single record
//     still too large is dropped and counted (reason="otlp_too_large").
//   - The data is invalid (gRPC INVALID_ARGUMENT, HTTP 400): resending it
//     cannot help; the batch is committed and counted as dropped
//     (reason="otlp_rejected"), logged with the downstream's message.
//   - Anything else (authentication, permission, unknown path or service,
//     a server error): the Collector drops such a batch; sluice keeps it in
//     the channel and retries, since each of these is fixed on the
//     downstream's side or in this config, and logs the status.
//
// /healthz reports the sink once it has failed (or had every batch
// rejected) for 30 s without a delivery in between.
package otlpsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/otlpconv"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Protocols, named as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
	ProtocolHTTPJSON     = "http/json"
)

// Defaults.
const (
	// DefaultBatchSize fits the default transactionCapacity of a memory
	// channel (100); raise both for throughput.
	DefaultBatchSize      = 100
	DefaultRequestTimeout = 10 * time.Second // OTEL_EXPORTER_OTLP_TIMEOUT's default
	DefaultConnectTimeout = 5 * time.Second
	logsPath              = "/v1/logs"
)

// Options configure a Writer.
type Options struct {
	Protocol string
	// Endpoint is host:port for gRPC (or an http:// or https:// URL, whose
	// scheme says whether to use TLS), a URL for HTTP (/v1/logs appended
	// unless it ends so).
	Endpoint       string
	Headers        map[string]string
	Gzip           bool
	RequestTimeout time.Duration
	ConnectTimeout time.Duration
	TLS            tlsconf.Settings
	Mapping        otlpconv.Mapping
}

// outcome is what the downstream said about one request.
type outcome struct {
	kind     int
	rejected int64         // kindOK: records a partial success rejected
	message  string        // the downstream's words, for logs
	delay    time.Duration // kindRetry: the pause it asked for
	err      error
}

const (
	kindOK        = iota
	kindRetry     // roll back, send again later
	kindTooLarge  // split
	kindRejected  // invalid data: drop, count
	kindKeepRetry // a status the Collector drops; sluice keeps the batch and retries
)

// exporter sends one request of log records: over gRPC or HTTP.
type exporter interface {
	start() error
	export(ctx context.Context, ev []event.Event) outcome
	stop()
}

// Writer delivers batches for flow.BatchSink.
type Writer struct {
	opt      Options
	exp      exporter
	log      *slog.Logger
	throttle *logthrottle.Throttle
	rejected prometheus.Counter // reason otlp_rejected
	tooLarge prometheus.Counter // reason otlp_too_large

	undelivered int       // events of the last Write committed without delivery
	notBefore   time.Time // the downstream asked not to be sent to before this

	hmu          sync.Mutex
	failingSince time.Time // first failure or rejection since the last delivery
	failures     int
	dropping     bool // the streak is of rejections (dropped), not failures (kept)
	lastErr      string
}

// Sink is the otlp sink: the shared batch loop over a Writer, which also
// reports the Writer's health.
type Sink struct {
	*flow.BatchSink
	w *Writer
}

// Health reports a sink whose every batch failed, or was rejected, for 30 s
// (see flow.HealthReporter).
func (s *Sink) Health() error { return s.w.Health() }

// New builds an otlp sink from its properties: endpoint (required),
// protocol (grpc | http/protobuf | http/json; grpc), headers.NAME (sent
// with every request: gRPC metadata or HTTP headers), compression (gzip |
// none; gzip), batchSize (100), requestTimeout (10000 ms), connectTimeout
// (5000 ms), resourcePrefix (resource.), and the client SSL keys of Flume's
// sinks (ssl, truststore, truststore-password, truststore-type,
// trust-all-certs, verify-hostname, include-/exclude-protocols,
// include-/exclude-cipher-suites).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	opt := Options{Headers: map[string]string{}}
	opt.Protocol = p.Enum("protocol", ProtocolGRPC, ProtocolGRPC, ProtocolHTTPProtobuf, ProtocolHTTPJSON)
	opt.Endpoint = strings.TrimSpace(p.Required("endpoint"))
	for _, k := range p.Keys("headers.") {
		name := strings.TrimPrefix(k, "headers.")
		v := p.String(k, "")
		if name == "" || strings.ContainsAny(name, " \t\r\n:") || strings.ContainsAny(v, "\r\n") {
			p.Errorf(k, "is not a valid header: the name must be a token (no spaces or colons) and the value one line")
			continue
		}
		opt.Headers[name] = v
	}
	opt.Gzip = p.Enum("compression", "gzip", "gzip", "none") == "gzip"
	batch := p.IntRange("batchSize", DefaultBatchSize, 1, math.MaxInt32)
	ms := func(key string, def time.Duration) time.Duration {
		return time.Duration(p.IntRange(key, int(def/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	}
	opt.RequestTimeout = ms("requestTimeout", DefaultRequestTimeout)
	opt.ConnectTimeout = ms("connectTimeout", DefaultConnectTimeout)
	opt.Mapping.ResourcePrefix = p.String("resourcePrefix", otlpconv.DefaultResourcePrefix)
	if msg := otlpconv.CheckPrefix(opt.Mapping.ResourcePrefix); msg != "" {
		p.Errorf("resourcePrefix", "%q %s", opt.Mapping.ResourcePrefix, msg)
	}
	opt.TLS = tlsconf.ReadClient(p)
	if opt.Endpoint != "" {
		if err := checkEndpoint(&opt); err != nil {
			p.Errorf("endpoint", "%v", err)
		}
	}
	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	w := NewWriter(opt, env)
	return &Sink{BatchSink: flow.NewBatchSink(env, w, batch, c), w: w}, nil
}

// checkEndpoint checks opt.Endpoint for opt.Protocol and settles whether
// TLS is on: ssl = true, or an https:// endpoint.
func checkEndpoint(opt *Options) error {
	ep := opt.Endpoint
	if opt.Protocol == ProtocolGRPC {
		if strings.Contains(ep, "://") {
			u, err := url.Parse(ep)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
				return fmt.Errorf("%q is not a gRPC endpoint; use host:port (such as collector:4317), or http://host:port or https://host:port", ep)
			}
			if u.Scheme == "https" {
				opt.TLS.Enabled = true
			} else if opt.TLS.Enabled {
				return fmt.Errorf("%q is http:// but ssl is true; use https:// or set ssl = false", ep)
			}
			ep = u.Host
		}
		if _, port, err := net.SplitHostPort(ep); err != nil || port == "" {
			ep = net.JoinHostPort(strings.Trim(ep, "[]"), "4317")
		}
		opt.Endpoint = ep
		return nil
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL with a host, such as http://collector:4318", ep)
	}
	if u.Scheme == "https" {
		opt.TLS.Enabled = true
	} else if opt.TLS.Enabled {
		return fmt.Errorf("%q is http:// but ssl is true; use https:// or set ssl = false", ep)
	}
	if !strings.HasSuffix(u.Path, logsPath) {
		u.Path = strings.TrimSuffix(u.Path, "/") + logsPath
	}
	opt.Endpoint = u.String()
	return nil
}

// NewWriter returns a Writer for opt (its endpoint checked by New).
func NewWriter(opt Options, env flow.Env) *Writer {
	w := &Writer{
		opt:      opt,
		log:      env.Log().With("sink", env.Name),
		throttle: logthrottle.New(10*time.Second, 1),
		rejected: env.Registry().Dropped(env.Name, "otlp_rejected"),
		tooLarge: env.Registry().Dropped(env.Name, "otlp_too_large"),
	}
	if opt.Protocol == ProtocolGRPC {
		w.exp = &grpcExporter{opt: opt}
	} else {
		w.exp = &httpExporter{opt: opt, json: opt.Protocol == ProtocolHTTPJSON}
	}
	return w
}

// Start loads the TLS material and prepares the client; it does not
// connect, so a downstream that is down does not stop the agent.
func (w *Writer) Start(context.Context) error {
	if err := w.exp.start(); err != nil {
		return fmt.Errorf("otlp sink: %w", err)
	}
	return nil
}

// Stop closes the connections and writes the log summaries held back.
func (w *Writer) Stop(context.Context) error {
	w.exp.stop()
	w.throttle.Flush()
	return nil
}

// Undelivered is how many events of the last successful Write were taken
// from the channel without being delivered (rejected by the downstream).
func (w *Writer) Undelivered() int { return w.undelivered }

// healthGrace is how long the sink may fail before Health says so (a
// variable for tests).
var healthGrace = flow.DefaultSinkHealthGrace

// errWait is a Write refused at once because the downstream asked for a
// pause that has not passed.
var errWait = errors.New("the downstream asked for a pause before the next request")

// Write sends events and returns nil once the downstream took them (or
// rejected them for good: see the package comment).
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	w.undelivered = 0
	if d := time.Until(w.notBefore); d > 0 {
		// Fail at once (a sink group can turn to its other sinks); the
		// runner's backoff brings the batch back.
		return fmt.Errorf("otlp sink: %w (%v left)", errWait, d.Round(time.Millisecond))
	}
	delivered, err := w.send(ctx, events)
	switch {
	case err != nil:
		w.note(false, err.Error())
	case delivered == 0 && len(events) > 0:
		w.note(true, "the downstream rejected every record of the batch")
	default:
		w.note(true, "")
	}
	return err
}

// send exports events, splitting on "too large", and returns how many the
// downstream accepted.
func (w *Writer) send(ctx context.Context, events []event.Event) (int, error) {
	o := w.exp.export(ctx, events)
	switch o.kind {
	case kindOK:
		if o.rejected <= 0 {
			return len(events), nil
		}
		n := int(min(o.rejected, int64(len(events))))
		w.undelivered += n
		w.rejected.Add(float64(n))
		w.throttle.Log(w.log, slog.LevelWarn, "partial", "otlp sink: the downstream accepted a batch but rejected some of its records (partial success); they are dropped",
			"endpoint", w.opt.Endpoint, "records", len(events), "rejected", n, "message", o.message)
		return len(events) - n, nil
	case kindTooLarge:
		if len(events) == 1 {
			w.undelivered++
			w.tooLarge.Add(1)
			w.throttle.Log(w.log, slog.LevelWarn, "too_large", "otlp sink: the downstream refused a single record as too large; it is dropped",
				"endpoint", w.opt.Endpoint, "body_bytes", len(events[0].Body), "message", o.message)
			return 0, nil
		}
		half := len(events) / 2
		a, err := w.send(ctx, events[:half])
		if err != nil {
			return 0, err
		}
		b, err := w.send(ctx, events[half:])
		return a + b, err
	case kindRejected:
		w.undelivered += len(events)
		w.rejected.Add(float64(len(events)))
		w.throttle.Log(w.log, slog.LevelWarn, "rejected", "otlp sink: the downstream rejected a batch as invalid; resending cannot help, so it is dropped",
			"endpoint", w.opt.Endpoint, "records", len(events), "message", o.message)
		return 0, nil
	case kindRetry:
		if o.delay > 0 {
			w.notBefore = time.Now().Add(min(o.delay, time.Minute))
		}
	}
	return 0, o.err
}

// note records the outcome of a Write for Health: ok a delivery (or, with
// msg, a batch rejected for good), else a failure.
func (w *Writer) note(ok bool, msg string) {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	if ok && msg == "" {
		w.failingSince, w.failures, w.lastErr = time.Time{}, 0, ""
		return
	}
	if w.failingSince.IsZero() {
		w.failingSince = time.Now()
	}
	w.failures++
	w.dropping = ok
	w.lastErr = msg
}

// Health reports a sink that has not delivered for flow.DefaultSinkHealthGrace
// while trying: every batch failed (kept) or was rejected (dropped).
func (w *Writer) Health() error {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	if w.failingSince.IsZero() {
		return nil
	}
	d := time.Since(w.failingSince)
	if d < healthGrace {
		return nil
	}
	if w.dropping {
		return fmt.Errorf("the downstream %s has rejected every batch for %s (%d in a row); the records are dropped and counted in sluice_events_dropped_total{reason=\"otlp_rejected\"}; last: %s",
			w.opt.Endpoint, d.Round(time.Second), w.failures, w.lastErr)
	}
	return fmt.Errorf("cannot deliver to %s: every attempt failed for %s (%d in a row); the events stay in the channel; last error: %s",
		w.opt.Endpoint, d.Round(time.Second), w.failures, w.lastErr)
}
