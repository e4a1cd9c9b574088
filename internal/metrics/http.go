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

	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	// component it needs), failed (its start failed; it is retried) or
	// stopping.
	State string `json:"state"`
	// Reason is empty when the component runs and can work; otherwise it
	// says why not, as a sentence an operator can act on.
	Reason string `json:"reason,omitempty"`
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

// Handler serves the agent's monitoring endpoints, as Flume's HTTP
// monitoring does and more:
//
//	/metrics             Flume's JSON (path case-insensitive, as Flume)
//	/metrics/prometheus  Prometheus text format
//	/healthz             200 "ok" when the status is healthy (or status is nil), else 503 and one
//	                     line per problem; ?format=json gives the whole Status as JSON, with the same
//	                     status code and "healthy" added
//	/livez               200 "alive" and the agent's state whenever the status can be read, healthy
//	                     or not: a liveness probe, which a downstream that is down must not fail
//	                     (restarting the agent would not bring it back)
//	/                    an HTML page linking to the above
//
// Other paths are 404; TRACE and OPTIONS are 403, as in Flume.
func HandlerWithStatus(r *Registry, status func() Status) http.Handler {
	prom := promhttp.HandlerFor(r.Prometheus(), promhttp.HandlerOpts{
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
			serveHealth(w, req, status)
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

func serveHealth(w http.ResponseWriter, req *http.Request, status func() Status) {
	st := Status{State: "running"}
	if status != nil {
		st = status()
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
	if code == http.StatusOK {
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	for _, line := range st.Problems() {
		_, _ = fmt.Fprintln(w, strings.ReplaceAll(line, "\n", " "))
	}
}

// Server is an HTTP server started by Serve.
type Server struct {
	srv  *http.Server
	addr string
	log  *slog.Logger
	done chan struct{} // closed when Serve's goroutine returns

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
	if log == nil {
		log = slog.Default()
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics http: listen %s: %w", addr, err)
	}
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       60 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		addr: ln.Addr().String(),
		log:  log,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics http server failed", "addr", s.addr, "err", err)
		}
	}()
	scheme := "http"
	if tlsConf != nil {
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
		s.stopErr = err
	})
	return s.stopErr
}
