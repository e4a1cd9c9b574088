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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// DefaultHandler is Flume's default (and sluice's only) request handler.
const DefaultHandler = "org.apache.flume.source.http.JSONHandler"

// Memory and connection defaults (see internal/listener).
const (
	DefaultMaxRequestBytes = 16 << 20
	// DefaultMaxInFlight bounds what every request being read and decoded
	// holds at once: a largest request (its body, then its events' copies)
	// fits, with room for a smaller one beside it.
	DefaultMaxInFlight = 40 << 20
	DefaultIdleTimeout = 120 * time.Second
	readChunk          = 64 << 10
)

// Reasons the source refuses a request, each logged (throttled) with the
// peer and counted in the source's metrics.
var (
	reasonTooLarge = listener.Reason{Counter: "RequestTooLargeCount", Level: slog.LevelWarn,
		Msg: "http source refused a request too large (over maxRequestBytes, or more to decode than maxBytesInFlight); answered 413"}
	reasonOverBudget = listener.Reason{Counter: "OverBudgetCount", Level: slog.LevelWarn,
		Msg: "http source refused a request: the requests in progress hold maxBytesInFlight; answered 503 with Retry-After"}
	reasonBadRequest = listener.Reason{Counter: "BadRequestCount", Level: slog.LevelWarn,
		Msg: "http source refused a request it could not read; answered 400"}
	reasonCharset = listener.Reason{Counter: "UnsupportedCharsetCount", Level: slog.LevelWarn,
		Msg: "http source refused a request in a charset it does not read; answered 415"}
	reasonMethod = listener.Reason{Counter: "MethodNotAllowedCount", Level: slog.LevelWarn,
		Msg: "http source refused a request with a method other than GET or POST; answered 405"}
	reasonProtocol = listener.Reason{Counter: "ProtocolErrorCount", Level: slog.LevelWarn,
		Msg: "http source: a connection failed at the HTTP or TLS level"}
	reasonChannelFull = listener.Reason{Level: slog.LevelWarn,
		Msg:       "http source could not put a request's events; answered 503. Consider a bigger channel or faster sinks",
		Recovered: "http source puts requests' events again"}
	reasonStopping = listener.Reason{Level: slog.LevelInfo,
		Msg: "http source refused a request: the agent is stopping; answered 503"}
	reasonPutFailed = listener.Reason{Level: slog.LevelWarn,
		Msg:       "http source failed to put a request's events; answered 500",
		Recovered: "http source puts requests' events again"}
)

// Source is the HTTP source. Build it with New.
type Source struct {
	env         flow.Env
	guard       string // a request's name for panics.Guard
	bind        string
	port        int
	maxBody     int64
	maxInFlight int64
	budget      *listener.Budget // the bytes in flight allowed; what it holds is BytesInFlight
	hygiene     listener.Config
	tls         tlsconf.Settings
	counters    *metrics.SourceCounters
	rejects     *listener.Rejects
	blob        *blobHandler // nil: the JSON handler

	mu    sync.Mutex // guards the fields below
	srv   *http.Server
	group *listener.Group
	ln    net.Listener
	done  chan struct{}
	proc  flow.Processor
}

// New builds an HTTP source from Flume's properties bind (0.0.0.0), port,
// handler (Flume's JSONHandler, or one of its BLOB handlers: see blob.go),
// the SSL keys (ssl, keystore,
// keystore-password, keystore-type, include/exclude-protocols,
// include/exclude-cipher-suites) and sluice's maxRequestBytes (16 MiB, one
// request's body), maxBytesInFlight (40 MiB, what every request being read
// and decoded holds at once), maxConnections (1024), idleTimeout (120000 ms,
// a keep-alive connection between requests), progressTimeout (10000 ms) and
// minBytesPerSecond (1024) (see internal/listener).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env, guard: "http source " + env.Name + ": request"}
	s.bind = p.String("bind", "0.0.0.0")
	if strings.TrimSpace(s.bind) == "" {
		p.Errorf("bind", "is empty; set an address to listen on, such as 0.0.0.0")
	}
	s.port = listener.ReadPort(p, "port")
	switch h := strings.TrimSpace(p.String("handler", DefaultHandler)); h {
	case DefaultHandler, "JSONHandler":
	case MorphlineBlobHandler, CoreBlobHandler:
		s.blob = readBlobHandler(p, h)
	default:
		p.Errorf("handler", "handler %q is not supported; sluice's HTTP source has %s (the default), %s and %s", h, DefaultHandler, MorphlineBlobHandler, CoreBlobHandler)
	}
	s.maxBody = p.Int64("maxRequestBytes", DefaultMaxRequestBytes)
	if s.maxBody <= 0 || s.maxBody > math.MaxInt32 {
		p.Errorf("maxRequestBytes", "%d is out of range; use a number of bytes from 1 to %d", s.maxBody, math.MaxInt32)
		s.maxBody = DefaultMaxRequestBytes
	}
	def := listener.DefaultConfig
	def.IdleTimeout = DefaultIdleTimeout
	s.hygiene = listener.ReadConfig(p, listener.CamelNames, def)
	s.maxInFlight = listener.ReadBudget(p, listener.CamelNames, DefaultMaxInFlight, 1<<20)
	if need := s.maxBody * 5 / 2; s.maxInFlight < need {
		p.Errorf(listener.CamelNames.MaxBytesInFlight, "%d is less than 2.5 × maxRequestBytes (%d: the body, then its events), so the largest request could never be decoded; raise it to %d or lower maxRequestBytes",
			s.maxInFlight, s.maxBody, need)
	}
	// Jetty's tuning has no meaning here and must not stop a Flume config
	// from starting: a note says so. Jetty's TLS settings are refused, since
	// running without a protocol or cipher restriction the user asked for
	// would be weaker than their config says.
	for _, prefix := range []string{"QueuedThreadPool.", "HttpConfiguration.", "ServerConnector."} {
		for _, k := range p.Keys(prefix) {
			p.MarkUsed(k)
			p.Ignored(k, "a Jetty setting, and sluice's HTTP source is not Jetty; its own limits are maxConnections, idleTimeout, maxRequestBytes and maxBytesInFlight")
		}
	}
	for _, k := range p.Keys("SslContextFactory.") {
		p.MarkUsed(k)
		p.Errorf(k, "is a Jetty TLS setting, which sluice cannot honour; use the source's keys include-protocols, exclude-protocols, include-cipher-suites and exclude-cipher-suites instead")
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
	s.budget = listener.NewBudget(s.maxInFlight)
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.rejects = listener.NewRejects(env.Name, env.Log(), s.counters.Set,
		slices.Concat([]listener.Reason{reasonTooLarge, reasonOverBudget, reasonBadRequest, reasonCharset, reasonMethod, reasonProtocol},
			listener.ConnReasons, listener.TLSReasons)...)
	s.counters.Gauge("BytesInFlight", func() string { return strconv.FormatInt(s.inFlight(), 10) })
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// inFlight is what the source's budget holds now (its BytesInFlight).
func (s *Source) inFlight() int64 { return s.budget.InUse() }

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
	g, lns, err := listener.Open(s.hygiene, listener.Options{Source: s.env.Name, Log: s.env.Log(), Rejects: s.rejects, Open: s.counters.OpenConnection},
		net.JoinHostPort(s.bind, strconv.Itoa(s.port)))
	if err != nil {
		return fmt.Errorf("http %s: %w", s.env.Name, err)
	}
	gl := lns[0]
	var ln net.Listener = gl
	if tlsConf != nil {
		ln = tls.NewListener(gl, tlsConf)
	}
	srv := &http.Server{
		Handler: s,
		// A request's headers and body are bounded by the group's progress
		// rule (a request that stops moving is cut, counted and told), not
		// by a total time a slow link cannot meet: see listener.HTTP. A put
		// may wait for channel space (keep-alive) before the answer.
		WriteTimeout:   90 * time.Second,
		IdleTimeout:    s.hygiene.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
	}
	// Connection-level errors (failed TLS handshakes, broken requests) are
	// the clients' doing: told and counted, throttled.
	listener.HTTP(srv, s.rejects, reasonProtocol)
	done := make(chan struct{})
	s.mu.Lock()
	s.srv, s.group, s.ln, s.done, s.proc = srv, g, gl, done, p
	s.mu.Unlock()
	s.counters.Started()
	s.env.Log().Info("http source listening", "source", s.env.Name, "addr", gl.Addr().String(), "tls", tlsConf != nil)
	panics.Go("http source "+s.env.Name+": server", func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !g.Stopping() {
			s.env.Log().Error("http source stopped serving", "source", s.env.Name, "err", err)
		}
	})
	return nil
}

// Stop closes the listener and every connection not in the middle of a
// request's put at once (a request still arriving is cut: its sender got no
// answer and sends it again), lets the puts in progress answer (503 once the
// agent closed intake), within ctx; then it closes what is left.
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv, g, done := s.srv, s.group, s.done
	s.srv, s.group, s.ln, s.done = nil, nil, nil, nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	defer s.counters.Stopped()
	errc := make(chan error, 1)
	panics.Go("http source "+s.env.Name+": stop", func() { errc <- srv.Shutdown(ctx) })
	gerr := g.Shutdown(ctx)
	err := <-errc
	if errors.Is(err, net.ErrClosed) {
		err = nil // the group closed the listener first
	}
	if err != nil || gerr != nil {
		_ = srv.Close() // after a failed Shutdown; err says why
		g.CloseAll()
		err = fmt.Errorf("http %s: stop: %w", s.env.Name, errors.Join(err, gerr))
	}
	<-done
	return err
}

// errBusy and tooLargeError are what a request's reservation of budget
// bytes fails with.
var errBusy = errors.New("busy")

type tooLargeError struct{ need, limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("reading and decoding this request takes about %d bytes, more than maxBytesInFlight (%d); send smaller batches", e.need, e.limit)
}

// ServeHTTP handles one request as one transaction. GET is handled as POST,
// as Flume does.
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// net/http would recover a panic, log it and serve on, with a batch
	// perhaps half put: the agent's rule is to exit instead.
	defer panics.Guard(s.guard)
	peer := r.RemoteAddr
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		s.rejects.Add(reasonMethod, peer, "method", r.Method)
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed; send events with POST", http.StatusMethodNotAllowed)
		return
	}
	c := s.counters
	s.mu.Lock()
	p, budget := s.proc, s.budget
	s.mu.Unlock()
	hold := listener.NewHold(budget)
	defer hold.Release()
	reserve := func(n int64) error {
		if !hold.Fits(n) {
			return &tooLargeError{need: hold.Bytes() + n, limit: budget.Limit()}
		}
		if !hold.Try(n) {
			return errBusy
		}
		return nil
	}
	refuse := func(err error) bool {
		var tl *tooLargeError
		switch {
		case errors.As(err, &tl):
			c.EventReadFail.Add(1)
			s.rejects.Add(reasonTooLarge, peer, "err", err)
			http.Error(w, tl.Error(), http.StatusRequestEntityTooLarge)
		case errors.Is(err, errBusy):
			s.rejects.Add(reasonOverBudget, peer, "maxBytesInFlight", budget.Limit())
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the source is busy with other requests (maxBytesInFlight reached); retry shortly", http.StatusServiceUnavailable)
		default:
			return false
		}
		return true
	}
	if r.ContentLength > s.maxBody {
		c.EventReadFail.Add(1)
		s.rejects.Add(reasonTooLarge, peer, "content_length", r.ContentLength, "maxRequestBytes", s.maxBody)
		http.Error(w, fmt.Sprintf("request body exceeds %d bytes (maxRequestBytes); send smaller batches", s.maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	lc := listener.ConnOf(r.Context())
	body, err := readBody(w, r, s.maxBody, reserve, &hold)
	if err != nil {
		if refuse(err) {
			return
		}
		c.EventReadFail.Add(1)
		if lc != nil && lc.ClosedBy() != "" {
			// The source closed it (too slow, to admit another, stopping),
			// and said so already.
			return
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.rejects.Add(reasonTooLarge, peer, "maxRequestBytes", tooBig.Limit)
			http.Error(w, fmt.Sprintf("request body exceeds %d bytes (maxRequestBytes); send smaller batches", tooBig.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		s.rejects.Add(reasonBadRequest, peer, "err", err)
		http.Error(w, "could not read the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if lc != nil {
		lc.Busy() // the request has arrived; what follows is the agent's work
	}
	now := event.Now()
	charset := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if _, params, err := mime.ParseMediaType(ct); err == nil {
			charset = params["charset"]
		}
	}
	var events []event.Event
	if s.blob != nil {
		events, err = s.blob.event(r, body)
	} else {
		events, err = decode(body, charset, reserve)
	}
	if err != nil {
		if refuse(err) {
			return
		}
		var long *tooLongBlobError
		if errors.As(err, &long) {
			c.EventReadFail.Add(1)
			s.rejects.Add(reasonTooLarge, peer, "err", err)
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		c.EventReadFail.Add(1)
		var bad *BadRequestError
		var cs *UnsupportedCharsetError
		switch {
		case errors.As(err, &bad):
			s.rejects.Add(reasonBadRequest, peer, "err", bad.Msg)
			http.Error(w, "Bad request from client. "+bad.Msg, http.StatusBadRequest)
		case errors.As(err, &cs):
			s.rejects.Add(reasonCharset, peer, "charset", cs.Charset)
			http.Error(w, cs.Error(), http.StatusUnsupportedMediaType)
		default:
			s.rejects.Add(reasonBadRequest, peer, "err", err)
			http.Error(w, "could not read the request: "+err.Error(), http.StatusInternalServerError)
		}
		return
	}
	for i := range events {
		events[i].ReceivedAt = now
	}
	c.AppendBatchReceived.Add(1)
	c.EventReceived.Add(int64(len(events)))
	if err := p.Process(r.Context(), events); err != nil {
		c.ChannelWriteFail.Add(1)
		w.Header().Set("Retry-After", "1")
		switch {
		case errors.Is(err, flow.ErrStopping):
			s.rejects.Add(reasonStopping, peer, "events", len(events))
			w.Header().Set("Connection", "close")
			http.Error(w, "The agent is stopping; nothing of this request was kept. Send it again, here once the agent is back or elsewhere.", http.StatusServiceUnavailable)
		case errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed):
			s.rejects.Add(reasonChannelFull, peer, "events", len(events), "err", err)
			http.Error(w, "Error appending event to channel. Channel might be full. "+err.Error(), http.StatusServiceUnavailable)
		default:
			c.ChannelWriteFail.Add(-1)
			c.GenericProcessingFail.Add(1)
			w.Header().Del("Retry-After")
			s.rejects.Add(reasonPutFailed, peer, "events", len(events), "err", err)
			http.Error(w, "Unexpected error while appending event to channel. "+err.Error(), http.StatusInternalServerError)
		}
		return
	}
	s.rejects.Ok(reasonChannelFull)
	s.rejects.Ok(reasonPutFailed)
	w.WriteHeader(http.StatusOK)
	c.AppendBatchAccepted.Add(1)
	c.EventAccepted.Add(int64(len(events)))
}

// readBody reads the request body, at most maxBody bytes, into a buffer
// whose bytes reserve granted before it was allocated: all of a declared
// Content-Length at once, else 64 KiB at a time (a buffer replaced by a
// larger one is given back to hold).
func readBody(w http.ResponseWriter, r *http.Request, maxBody int64, reserve func(int64) error, hold *listener.Hold) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, maxBody)
	if n := r.ContentLength; n >= 0 {
		if err := reserve(n); err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			size := int64(max(2*cap(buf), readChunk))
			size = min(size, maxBody+1)
			if err := reserve(size); err != nil {
				return nil, err
			}
			nb := make([]byte, len(buf), size)
			copy(nb, buf)
			hold.Shrink(int64(cap(buf)))
			buf = nb
		}
		m, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
