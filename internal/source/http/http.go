// Package httpsource is Flume's HTTP source ("http"): each request carries a
// batch of events (with the JSON handler, a JSON array), which is put into
// the channels in one transaction. The answer says what happened: 200 when
// committed, 400 for a request it cannot read, 503 when the channel is full
// (nothing of the request was kept: send it again later), 500 otherwise.
package httpsource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// DefaultHandler is Flume's default (and sluice's only) request handler.
const DefaultHandler = "org.apache.flume.source.http.JSONHandler"

// Source is the HTTP source. Build it with New.
type Source struct {
	env      flow.Env
	bind     string
	port     int
	maxBody  int64
	tls      tlsconf.Settings
	counters *metrics.SourceCounters

	mu   sync.Mutex // guards the fields below
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	proc flow.Processor
}

// New builds an HTTP source from Flume's properties bind (0.0.0.0), port,
// handler (only the JSON handler), the SSL keys (ssl, keystore,
// keystore-password, keystore-type, include/exclude-protocols,
// include/exclude-cipher-suites) and sluice's maxRequestBytes (16 MiB).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	s.bind = p.String("bind", "0.0.0.0")
	if strings.TrimSpace(s.bind) == "" {
		p.Errorf("bind", "is empty; set an address to listen on, such as 0.0.0.0")
	}
	if !p.Has("port") {
		p.Required("port")
	} else {
		s.port = p.IntRange("port", 0, 0, 65535)
	}
	switch h := strings.TrimSpace(p.String("handler", DefaultHandler)); h {
	case DefaultHandler, "JSONHandler":
	default:
		p.Errorf("handler", "handler %q is not supported; sluice's HTTP source has only %s (remove the property to use it)", h, DefaultHandler)
	}
	s.maxBody = p.Int64("maxRequestBytes", 16<<20)
	if s.maxBody <= 0 || s.maxBody > math.MaxInt32 {
		p.Errorf("maxRequestBytes", "%d is out of range; use a number of bytes from 1 to %d", s.maxBody, math.MaxInt32)
		s.maxBody = 16 << 20
	}
	// Jetty tuning has no equivalent here; say so rather than "unknown".
	for _, prefix := range []string{"QueuedThreadPool.", "HttpConfiguration.", "SslContextFactory.", "ServerConnector."} {
		for _, k := range p.Keys(prefix) {
			p.MarkUsed(k)
			p.Errorf(k, "is a Jetty setting, which sluice's HTTP source does not have; remove it")
		}
	}
	// Flume's HTTP source also reads three older spellings.
	pick := func(key, old string) string {
		if p.Has(key) || !p.Has(old) {
			return key
		}
		return old
	}
	s.tls = tlsconf.ReadServerKeys(p, tlsconf.ServerKeys{
		SSL:              pick("ssl", "enableSSL"),
		KeystorePassword: pick("keystore-password", "keystorePassword"),
		ExcludeProtocols: pick("exclude-protocols", "excludeProtocols"),
	})
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// Addr returns the address the source listens on, once started.
func (s *Source) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Start loads the TLS key material (when ssl is set), listens and serves.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.Addr() != nil {
		return fmt.Errorf("http %s: already started", s.env.Name)
	}
	tlsConf, err := s.tls.ServerConfig()
	if err != nil {
		return fmt.Errorf("http %s: %w", s.env.Name, err)
	}
	addr := net.JoinHostPort(s.bind, strconv.Itoa(s.port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http %s: listen %s: %w", s.env.Name, addr, err)
	}
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		// A put may wait for channel space (keep-alive) before the answer.
		WriteTimeout:   90 * time.Second,
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
		// Connection-level errors (bad TLS handshakes, malformed requests)
		// are the clients' doing: debug level.
		ErrorLog: slog.NewLogLogger(s.env.Log().With("source", s.env.Name).Handler(), slog.LevelDebug),
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.srv, s.ln, s.done, s.proc = srv, ln, done, p
	s.mu.Unlock()
	s.counters.Started()
	s.env.Log().Info("http source listening", "source", s.env.Name, "addr", ln.Addr().String(), "tls", tlsConf != nil)
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.env.Log().Error("http source stopped serving", "source", s.env.Name, "err", err)
		}
	}()
	return nil
}

// Stop stops accepting requests and waits for those in progress to be
// answered (each is committed or refused), within ctx; then it closes what is
// left.
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv, s.ln, s.done = nil, nil, nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	defer s.counters.Stopped()
	err := srv.Shutdown(ctx)
	if err != nil {
		srv.Close()
		err = fmt.Errorf("http %s: stop: %w", s.env.Name, err)
	}
	<-done
	return err
}

// ServeHTTP handles one request as one transaction. GET is handled as POST,
// as Flume does.
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed; send events with POST", http.StatusMethodNotAllowed)
		return
	}
	c := s.counters
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		c.EventReadFail.Add(1)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request body exceeds %d bytes (maxRequestBytes); send smaller batches", tooBig.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "could not read the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	now := event.Now()
	charset := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if _, params, err := mime.ParseMediaType(ct); err == nil {
			charset = params["charset"]
		}
	}
	events, err := DecodeJSON(body, charset)
	if err != nil {
		c.EventReadFail.Add(1)
		var bad *BadRequestError
		var cs *UnsupportedCharsetError
		switch {
		case errors.As(err, &bad):
			http.Error(w, "Bad request from client. "+bad.Msg, http.StatusBadRequest)
		case errors.As(err, &cs):
			http.Error(w, cs.Error(), http.StatusUnsupportedMediaType)
		default:
			http.Error(w, "could not read the request: "+err.Error(), http.StatusInternalServerError)
		}
		s.env.Log().Debug("http source refused a request it could not read", "source", s.env.Name, "remote", r.RemoteAddr, "err", err)
		return
	}
	for i := range events {
		events[i].ReceivedAt = now
	}
	c.AppendBatchReceived.Add(1)
	c.EventReceived.Add(int64(len(events)))
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if err := p.Process(r.Context(), events); err != nil {
		if errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed) {
			c.ChannelWriteFail.Add(1)
			s.env.Log().Warn("http source could not put a request's events; answered 503. Consider a bigger channel or faster sinks",
				"source", s.env.Name, "events", len(events), "err", err)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Error appending event to channel. Channel might be full. "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		c.GenericProcessingFail.Add(1)
		s.env.Log().Warn("http source failed to put a request's events", "source", s.env.Name, "events", len(events), "err", err)
		http.Error(w, "Unexpected error while appending event to channel. "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
	c.AppendBatchAccepted.Add(1)
	c.EventAccepted.Add(int64(len(events)))
}
