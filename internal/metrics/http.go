package metrics

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/redact"
)

const indexHTML = `<!DOCTYPE html>
<html><head><title>sluice</title></head><body>
<p>sluice agent metrics: <a href="./metrics">Flume JSON</a>, <a href="./metrics/prometheus">Prometheus</a>, <a href="./healthz">health</a>.</p>
</body></html>
`

// Handler is HandlerWithStatus for a caller that knows only whether it is
// healthy: /healthz answers 200 "ok" when health returns nil (or is nil),
// else 503 and the error's text.
func Handler(r *Registry, health func() error) http.Handler {
	return HandlerWithStatus(r, func() Status {
		st := Status{State: "running"}
		if health == nil {
			return st
		}
		if err := health(); err != nil {
			st.Components = []ComponentStatus{{Kind: "agent", State: "running", Reason: err.Error()}}
		}
		return st
	})
}

// Status is what /healthz describes: the agent as it is now, every
// component with its state. A status page reads the same through
// /healthz?format=json.
type Status struct {
	Agent string `json:"agent"`
	// State is the agent's: starting, running, stopping or stopped.
	State      string            `json:"state"`
	Components []ComponentStatus `json:"components"`
}

// ComponentStatus is the state of one source, channel or sink.
type ComponentStatus struct {
	Kind string `json:"kind"` // source, channel or sink
	Name string `json:"name"`
	Type string `json:"type"`
	// State is running, starting (not started yet, or waiting for a
	// component it needs), failed (its start failed; it is retried),
	// draining (a stop, or a reload that removed it: its sinks deliver what
	// the channel still holds) or stopping.
	State string `json:"state"`
	// Reason is empty when the component runs and can work; otherwise it
	// says why not, as a sentence an operator can act on.
	Reason string `json:"reason,omitempty"`
	// Note says what a component that works is busy with: a draining one,
	// what it drains, how much is left and until when.
	Note string `json:"note,omitempty"`
	// Left is, for a draining channel or sink (or one waiting for the
	// previous component of its name to drain), the events still held by
	// the channel being drained; absent when nothing drains or the channel
	// cannot tell.
	Left *int64 `json:"left,omitempty"`
}

// Healthy reports whether the agent runs and every component can work.
func (s Status) Healthy() bool {
	if s.State != "running" {
		return false
	}
	for _, c := range s.Components {
		if c.Reason != "" {
			return false
		}
	}
	return true
}

// Redacted returns s with every secret red holds masked in its texts.
func (s Status) Redacted(red *redact.Redactor) Status {
	s.Agent = red.String(s.Agent)
	cs := make([]ComponentStatus, len(s.Components))
	for i, c := range s.Components {
		// Every field is kept; the free texts are masked.
		c.Name, c.Type = red.String(c.Name), red.String(c.Type)
		c.Reason, c.Note = red.String(c.Reason), red.String(c.Note)
		cs[i] = c
	}
	if s.Components != nil {
		s.Components = cs
	}
	return s
}

// redactedGatherer masks secrets in the label values of every metric g
// gathers (Prometheus text has no other free text but help, which is code's).
type redactedGatherer struct {
	g   prometheus.Gatherer
	red *redact.Redactor
}

func (rg redactedGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := rg.g.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := rg.red.String(l.GetValue()); v != l.GetValue() {
					l.Value = &v
				}
			}
		}
	}
	return mfs, err
}

// Problems returns one line per component that is not running or cannot
// work ("source r1: ..."), or the agent's state when it is not running.
func (s Status) Problems() []string {
	var out []string
	if s.State != "running" {
		out = append(out, "agent "+s.Agent+" is "+s.State)
	}
	for _, c := range s.Components {
		switch {
		case c.Reason == "":
		case c.Name == "":
			out = append(out, c.Reason)
		default:
			out = append(out, c.Kind+" "+c.Name+": "+c.Reason)
		}
	}
	return out
}

// Notes returns one line per component with a note ("channel c1:
// draining: ..."), for the components that work but are busy.
func (s Status) Notes() []string {
	var out []string
	for _, c := range s.Components {
		if c.Note != "" {
			out = append(out, c.Kind+" "+c.Name+": "+c.Note)
		}
	}
	return out
}

// HandlerWithStatus serves the agent's monitoring endpoints, as Flume's
// HTTP monitoring does and more:
//
//	/metrics             Flume's JSON (path case-insensitive, as Flume)
//	/metrics/prometheus  Prometheus text format
//	/healthz             200 "ok" when the status is healthy (or status is nil), else 503 and one
//	                     line per problem; then one line per note (a drain in progress); ?format=json
//	                     gives the whole Status as JSON, with the same status code and "healthy" added
//	/livez               200 "alive" and the agent's state whenever the status can be read, healthy
//	                     or not: a liveness probe, which a downstream that is down must not fail
//	                     (restarting the agent would not bring it back)
//	/                    an HTML page linking to the above
//
// Other paths are 404; TRACE and OPTIONS are 403, as in Flume.
//
// Everything it serves passes r.Redact: a reason or a label value that
// quotes a secret shows Mask in its place.
func HandlerWithStatus(r *Registry, status func() Status) http.Handler {
	prom := promhttp.HandlerFor(redactedGatherer{r.Prometheus(), r.Redact}, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodTrace || req.Method == http.MethodOptions {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		p := req.URL.Path
		switch {
		case p == "/":
			w.Header().Set("Content-Type", "text/html;charset=utf-8")
			_, _ = w.Write([]byte(indexHTML))
		case strings.EqualFold(p, "/metrics"):
			w.Header().Set("Content-Type", "application/json;charset=utf-8")
			_, _ = w.Write(r.FlumeJSON())
		case strings.EqualFold(p, "/metrics/prometheus"):
			prom.ServeHTTP(w, req)
		case strings.EqualFold(p, "/healthz"):
			serveHealth(w, req, status, r.Redact)
		case strings.EqualFold(p, "/livez"):
			st := Status{State: "running"}
			if status != nil {
				st = status()
			}
			w.Header().Set("Content-Type", "text/plain;charset=utf-8")
			_, _ = fmt.Fprintf(w, "alive: %s\n", st.State)
		default:
			http.NotFound(w, req)
		}
	})
}

func serveHealth(w http.ResponseWriter, req *http.Request, status func() Status, red *redact.Redactor) {
	st := Status{State: "running"}
	if status != nil {
		st = status().Redacted(red)
	}
	code := http.StatusOK
	if !st.Healthy() {
		code = http.StatusServiceUnavailable
	}
	if req.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json;charset=utf-8")
		w.WriteHeader(code)
		if st.Components == nil {
			st.Components = []ComponentStatus{}
		}
		_ = json.NewEncoder(w).Encode(struct {
			Healthy bool `json:"healthy"`
			Status
		}{st.Healthy(), st})
		return
	}
	w.Header().Set("Content-Type", "text/plain;charset=utf-8")
	w.WriteHeader(code)
	lines := st.Problems()
	if code == http.StatusOK {
		lines = []string{"ok"}
	}
	// Then what busy components do (a drain and what it has left), healthy
	// or not.
	for _, line := range append(lines, st.Notes()...) {
		_, _ = fmt.Fprintln(w, strings.ReplaceAll(line, "\n", " "))
	}
}

// Server is an HTTP server started by Serve.
type Server struct {
	srv  *http.Server
	addr string
	log  *slog.Logger
	done chan struct{} // closed when Serve's goroutine returns
	// stopped is ServeOptions.Stopped.
	stopped func(ctx context.Context) error

	stopOnce sync.Once
	stopErr  error
}

// BasicAuth wraps h so that every request must carry HTTP basic
// authentication with user and password; others get 401 and a challenge.
// The comparison takes the same time whatever the guess.
func BasicAuth(h http.Handler, user, password string) http.Handler {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		if !ok || userOK&passOK != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="sluice", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves h
// with read, write and idle timeouts until Stop; with tlsConf set, over TLS
// only. ctx bounds only the listen. The caller owns the returned Server and
// must call Stop. A handler that streams (a tap) extends its own write
// deadline with http.ResponseController.
func Serve(ctx context.Context, addr string, h http.Handler, tlsConf *tls.Config, log *slog.Logger) (*Server, error) {
	return ServeWith(ctx, addr, h, ServeOptions{TLS: tlsConf, Log: log})
}

// ServeOptions are how ServeWith listens and serves.
type ServeOptions struct {
	TLS *tls.Config  // nil: plain HTTP
	Log *slog.Logger // nil: slog.Default()
	// Listen, when set, makes the TCP listener (the agent's: a
	// listener.Group, whose limits, counters and throttled logs every
	// listener of the agent goes through); nil: net.Listen.
	Listen func(ctx context.Context, addr string) (net.Listener, error)
	// Prepare, when set, adjusts the server before it serves (the agent
	// hands it to listener.HTTP, which replaces the read timeouts by the
	// group's rules and turns failed handshakes into counted, throttled
	// refusals); nil: read timeouts, and connection errors at WARN.
	Prepare func(*http.Server)
	// Stopped, when set, is called once the server stopped (to shut the
	// group down).
	Stopped func(ctx context.Context) error
}

// ServeWith is Serve with its listener and server made as opt says.
func ServeWith(ctx context.Context, addr string, h http.Handler, opt ServeOptions) (*Server, error) {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	listen := opt.Listen
	if listen == nil {
		listen = func(ctx context.Context, addr string) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, "tcp", addr)
		}
	}
	ln, err := listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("metrics http: listen %s: %w", addr, err)
	}
	if opt.TLS != nil {
		ln = tls.NewListener(ln, opt.TLS)
	}
	srv := &http.Server{
		// net/http would recover a handler's panic and serve on; the
		// agent's rule is to exit (package panics).
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer panics.Guard("metrics http request")
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if opt.Prepare != nil {
		opt.Prepare(srv)
	}
	s := &Server{
		srv:     srv,
		addr:    ln.Addr().String(),
		log:     log,
		done:    make(chan struct{}),
		stopped: opt.Stopped,
	}
	panics.Go("metrics http server", func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics http server failed", "addr", s.addr, "err", err)
		}
	})
	scheme := "http"
	if opt.TLS != nil {
		scheme = "https"
	}
	log.Info("serving metrics", "addr", s.addr, "scheme", scheme)
	return s, nil
}

// Addr returns the address the server listens on, with the port it bound.
func (s *Server) Addr() string { return s.addr }

// Stop stops accepting connections and waits for requests in progress until
// ctx is done, then closes the rest. It returns once the server has
// stopped; later calls return the first call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		err := s.srv.Shutdown(ctx)
		if err != nil {
			_ = s.srv.Close()
			err = fmt.Errorf("metrics http %s: shutdown: %w", s.addr, err)
		}
		<-s.done
		if s.stopped != nil {
			if serr := s.stopped(ctx); serr != nil && err == nil {
				err = fmt.Errorf("metrics http %s: shutdown: %w", s.addr, serr)
			}
		}
		s.stopErr = err
	})
	return s.stopErr
}
