// Package httpsink is Flume's HTTP sink (org.apache.flume.sink.http.HttpSink):
// each event's body is POSTed on its own to an endpoint, and the response's
// status code decides, per code or per class of codes, whether the event is
// taken from the channel (commit) or left there to be sent again
// (rollback), and whether it counts as delivered.
//
// As Flume: one request per event, its body as the request body, with the
// configured Content-Type and Accept headers; an event with an empty body is
// taken without a request; a connection failure, a timeout or a response
// without a status leaves the event in the channel. rollback.CODE,
// backoff.CODE and incrementMetrics.CODE take a code (503) or a class (5XX),
// the code winning over its class.
//
// backoff.CODE and defaultBackoff are read for compatibility, but the pause
// is the runner's: after an event left in the channel it waits before
// trying again (100 ms, doubling up to 5 s), after a taken one it does not.
//
// One deliberate difference: Flume's defaults (defaultRollback = true,
// defaultIncrementMetrics = false) apply to 2XX too, so a Flume config that
// does not override them for 2XX sends every event again forever and
// counts none. Here a 2XX response means delivered (committed, counted)
// unless the config says otherwise for that code or class. An event that
// a non-2XX code commits without rollback is dropped on purpose: it is
// counted (sluice_events_dropped_total{reason="http_status"}) and logged.
package httpsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Flume's defaults.
const (
	DefaultTimeout     = 5000 * time.Millisecond
	DefaultContentType = "text/plain"
	DefaultAccept      = "text/plain"
	// DefaultBatchSize is one event per transaction, as Flume takes them:
	// an event refused mid-batch then never makes the batch's earlier events
	// go out again.
	DefaultBatchSize = 1
)

// maxResponseBody is how much of a response is read (and discarded) so
// that the connection can serve the next request.
const maxResponseBody = 64 << 10

// rule is what a status code (or class) decides.
type rule struct{ rollback, backoff, count bool }

// Writer POSTs events one by one.
type Writer struct {
	endpoint    string
	contentType string
	accept      string
	client      *http.Client
	def         rule                       // codes that are not 2XX, without an override
	overrides   map[string]map[string]bool // "rollback" | "backoff" | "incrementMetrics" -> "503" | "5XX" -> value
	log         *slog.Logger
	throttle    *logthrottle.Throttle
	dropped     prometheus.Counter
	undelivered int // events of the last Write committed without counting as delivered
}

// New builds an HTTP sink from Flume's properties: endpoint (required),
// connectTimeout and requestTimeout (5000 ms), contentTypeHeader and
// acceptHeader (text/plain), defaultBackoff (true), defaultRollback (true),
// defaultIncrementMetrics (false), backoff.CODE, rollback.CODE,
// incrementMetrics.CODE, and sluice's batchSize (1).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	w := &Writer{log: env.Log().With("sink", env.Name), throttle: logthrottle.New(10*time.Second, 1),
		overrides: map[string]map[string]bool{}}
	w.endpoint = strings.TrimSpace(p.Required("endpoint"))
	if w.endpoint != "" {
		if u, err := url.Parse(w.endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.Errorf("endpoint", "%q is not an http:// or https:// URL with a host, such as http://collector:8080/events", w.endpoint)
		}
	}
	connect := time.Duration(p.IntRange("connectTimeout", int(DefaultTimeout/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	request := time.Duration(p.IntRange("requestTimeout", int(DefaultTimeout/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
	w.contentType = p.String("contentTypeHeader", DefaultContentType)
	w.accept = p.String("acceptHeader", DefaultAccept)
	w.def = rule{
		rollback: p.Bool("defaultRollback", true),
		backoff:  p.Bool("defaultBackoff", true),
		count:    p.Bool("defaultIncrementMetrics", false),
	}
	for _, what := range []string{"rollback", "backoff", "incrementMetrics"} {
		m := map[string]bool{}
		for _, k := range p.Keys(what + ".") {
			code := strings.ToUpper(strings.TrimPrefix(k, what+"."))
			if !validCode(code) {
				p.MarkUsed(k) // reported here, not again as unknown
				p.Errorf(k, "%q is not a status code (such as 503) or class (such as 5XX)", code)
				continue
			}
			m[code] = p.Bool(k, false)
		}
		w.overrides[what] = m
	}
	batch := p.IntRange("batchSize", DefaultBatchSize, 1, math.MaxInt32)

	w.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   connect,
			ResponseHeaderTimeout: request,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
		},
		// A redirect is a status like any other, decided by the rules:
		// re-POSTing to another place is not what a Flume user configured.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	w.dropped = env.Registry().Dropped(env.Name, "http_status")
	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, w, batch, c), nil
}

// validCode accepts 100..599 and 1XX..5XX.
func validCode(code string) bool {
	if len(code) != 3 || code[0] < '1' || code[0] > '5' {
		return false
	}
	if code[1:] == "XX" {
		return true
	}
	_, err := strconv.Atoi(code[1:])
	return err == nil && code[1] >= '0' && code[1] <= '9' && code[2] >= '0' && code[2] <= '9'
}

// ruleFor is what status decides: the code's own override, else its
// class's, else the default (for 2XX, delivered: see the package comment).
func (w *Writer) ruleFor(status int) rule {
	r := w.def
	if status >= 200 && status < 300 {
		r = rule{rollback: false, backoff: false, count: true}
	}
	code := strconv.Itoa(status)
	class := code[:1] + "XX"
	pick := func(what string, def bool) bool {
		m := w.overrides[what]
		if v, ok := m[code]; ok {
			return v
		}
		if v, ok := m[class]; ok {
			return v
		}
		return def
	}
	return rule{rollback: pick("rollback", r.rollback), backoff: pick("backoff", r.backoff), count: pick("incrementMetrics", r.count)}
}

// errRollback is a status whose rule leaves the event in the channel.
var errRollback = errors.New("the endpoint's answer leaves the event in the channel")

// Write POSTs each event with a body, in order. A status whose rule says
// rollback (or no status at all) fails the batch, so it stays in the
// channel and is sent again after the runner's backoff.
func (w *Writer) Write(ctx context.Context, events []event.Event) error {
	w.undelivered = 0
	for i := range events {
		body := events[i].Body
		if len(body) == 0 {
			// As Flume: taken without a request; not a delivery.
			w.undelivered++
			continue
		}
		status, err := w.post(ctx, body)
		if err != nil {
			return fmt.Errorf("http sink: POST to %s: %w", w.endpoint, err)
		}
		r := w.ruleFor(status)
		if r.rollback {
			return fmt.Errorf("http sink: %s answered %d (rollback.%d or its class, or defaultRollback, is true): %w", w.endpoint, status, status, errRollback)
		}
		if !r.count {
			w.undelivered++
		}
		if status < 200 || status >= 300 {
			w.dropped.Add(1)
			w.throttle.Log(w.log, slog.LevelWarn, strconv.Itoa(status), "http sink: the endpoint refused an event and the config says not to send it again; it is dropped",
				"endpoint", w.endpoint, "status", status, "rule", fmt.Sprintf("rollback.%d (or %cXX, or defaultRollback) = false", status, strconv.Itoa(status)[0]))
		}
	}
	return nil
}

// post sends one body and returns the response's status.
func (w *Writer) post(ctx context.Context, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", w.contentType)
	req.Header.Set("Accept", w.accept)
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Undelivered is how many events of the last successful Write were taken
// from the channel without counting as delivered (empty bodies, and codes
// whose incrementMetrics is false), for flow.BatchSink's counters.
func (w *Writer) Undelivered() int { return w.undelivered }

// Stop closes idle connections and writes the drop summaries held back.
func (w *Writer) Stop(context.Context) error {
	w.client.CloseIdleConnections()
	w.throttle.Flush()
	return nil
}
