// Package agent builds the graph of sources, channels and sinks from a
// configuration, runs it, reloads it and serves its metrics.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/status"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Options say which configuration to run and how.
type Options struct {
	File string            // -f: the properties file
	Name string            // -n: the agent name, the prefix of its keys
	Sys  map[string]string // -D values, read by ${sys:X}

	// Files are more properties files (-f given several times), read
	// after File; a key a later file sets overrides the earlier one.
	Files []string
	// URIs are configuration URIs (--conf-uri: http, https or file), read
	// after the files, with basic authentication when ConfUser is set.
	URIs               []string
	ConfUser, ConfPass string
	// HTTPClient fetches the URIs; nil means a client trusting the
	// system's roots, or the truststore -Djavax.net.ssl.trustStore names.
	HTTPClient *http.Client

	Logger *slog.Logger
	// HTTPAddr, when set, serves the status page (/), /metrics,
	// /metrics/prometheus, /healthz and the page's /api/.
	HTTPAddr string
	// HTTPTLS, when set, serves HTTPAddr over TLS only.
	HTTPTLS *tls.Config
	// HTTPUser and HTTPPassword, when HTTPUser is set, require HTTP basic
	// authentication for every path of HTTPAddr.
	HTTPUser, HTTPPassword string
	// AllowTap serves /api/tap (sluice tap): sampled events, headers and
	// bodies, to whoever reaches HTTPAddr.
	AllowTap bool
	// ShutdownTimeout bounds a stop, from the signal: intake stops at once,
	// then the sinks drain the channels until this much time has passed. A
	// reload drains a channel it removes within the same bound. 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// StopTimeout bounds how long each component may take to start or stop
	// once asked. 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// MaxProblems is how many problems of each severity (errors, warnings,
	// notes) a load keeps to print or log, the first in file and line
	// order; the others are counted ("... and N more warnings"). 0 means
	// config.DefaultKeep, a negative number all of them.
	MaxProblems int
	// PollInterval is how often the configuration is read again to see
	// whether it changed; 0 turns polling off (SIGHUP still reloads). A
	// failed read keeps the running configuration.
	PollInterval time.Duration
	// Notify, when set, is told by Run of the moments a service manager
	// waits for (systemd's sd_notify): Ready once every component started,
	// Reloading when a reload begins and Ready again when it ended, with
	// the reason when the configuration was refused (the running one
	// stays). It is called from Run's goroutine and must not block.
	Notify func(ev Lifecycle, err error)
}

// Lifecycle is a moment of Run that Options.Notify is told of.
type Lifecycle int

const (
	Ready     Lifecycle = iota // started, or a reload ended
	Reloading                  // a reload begins
)

// reloadNotified runs reload between Options.Notify's Reloading and Ready.
// Ready carries reload's error only when the configuration was refused and
// the running one stays (the graph is the same); a reload that applied but
// left a component failing says so through Status, as /healthz does.
func (a *Agent) reloadNotified(reload func() error) {
	if a.opts.Notify == nil {
		_ = reload()
		return
	}
	a.opts.Notify(Reloading, nil)
	a.stmu.Lock()
	before := a.g
	a.stmu.Unlock()
	err := reload()
	a.stmu.Lock()
	if a.g != before {
		err = nil
	}
	a.stmu.Unlock()
	a.opts.Notify(Ready, err)
}

// locations lists the configuration sources in the order they apply.
func (o *Options) locations() []string {
	var locs []string
	if o.File != "" {
		locs = append(locs, o.File)
	}
	locs = append(locs, o.Files...)
	return append(locs, o.URIs...)
}

func (o *Options) fetcher() (*config.Fetcher, error) {
	client := o.HTTPClient
	if client == nil {
		tc, err := javaTrustStore(o.Sys)
		if err != nil {
			return nil, err
		}
		client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc, TLSHandshakeTimeout: 10 * time.Second,
		}}
	}
	return &config.Fetcher{Locations: o.locations(), User: o.ConfUser, Password: o.ConfPass, Client: client}, nil
}

// javaTrustStore reads the trust store Flume's JVM would use for https
// configuration URIs: -Djavax.net.ssl.trustStore (with trustStorePassword
// and trustStoreType, PKCS12 or PEM), else the system's roots (nil).
func javaTrustStore(sys map[string]string) (*tls.Config, error) {
	path := sys["javax.net.ssl.trustStore"]
	if path == "" {
		return nil, nil
	}
	typ := strings.ToLower(sys["javax.net.ssl.trustStoreType"])
	if typ == "" {
		typ = "pkcs12"
	}
	s := tlsconf.Settings{Enabled: true, VerifyHostname: true, Truststore: path, TruststoreType: typ,
		TruststorePassword: sys["javax.net.ssl.trustStorePassword"]}
	c, err := s.ClientConfig("")
	if err != nil {
		return nil, fmt.Errorf("-Djavax.net.ssl.trustStore: %w", err)
	}
	return c, nil
}

// Secrets returns the credentials the options hold, which must never be
// printed: --conf-user and --conf-password, the passwords of the URIs'
// user information, the monitoring endpoint's password, and the values of
// -D properties whose name says password (javax.net.ssl.trustStorePassword).
// The configuration adds its own (see config.Problems.Secrets).
func (o *Options) Secrets() []string {
	out := []string{o.ConfUser, o.ConfPass, o.HTTPPassword}
	for _, u := range o.URIs {
		out = append(out, redact.URLPasswords(u)...)
	}
	for k, v := range o.Sys {
		if strings.Contains(strings.ToLower(k), "password") {
			out = append(out, v)
		}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
}

// Validate loads the configuration and constructs every component without
// starting any, and returns its errors (a *config.Problems), or nil.
func Validate(file, name string, sys map[string]string) error {
	_, err := Check(context.Background(), Options{File: file, Name: name, Sys: sys})
	return err
}

// Check reads the configuration opts names and constructs every component
// without starting any. It returns every problem found, errors, warnings
// and notes, and an error when the configuration cannot run: its errors
// (the same *config.Problems) or a source that cannot be read.
func Check(ctx context.Context, opts Options) (*config.Problems, error) {
	f, err := opts.fetcher()
	if err != nil {
		return nil, err
	}
	srcs, _, err := f.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	_, probs, err := load(srcs, &opts, metrics.NewRegistry(opts.Name), slog.New(slog.DiscardHandler), nil, nil)
	return probs, err
}

// load parses the sources of the agent opts names and builds their graph;
// problems of both steps are reported together, with the secrets of the
// configuration and of opts masked.
func load(srcs []config.Source, opts *Options, reg *metrics.Registry, log *slog.Logger, keep *graph, taps *flow.Taps) (*graph, *config.Problems, error) {
	cfg, err := config.LoadSourcesInto(&config.Problems{Keep: opts.MaxProblems}, srcs, opts.Name,
		config.Lookup{Sys: opts.Sys, Exec: config.RunCommand})
	var probs *config.Problems
	if err != nil && (!errors.As(err, &probs) || cfg == nil) {
		return nil, nil, err
	}
	// Component constructors record into the same Problems through their
	// Props, so structural and component problems are reported together.
	probs = cfg.Problems
	for _, s := range opts.Secrets() {
		probs.Secret(s)
	}
	b := &builder{cfg: cfg, reg: reg, log: log, probs: probs, keep: keep, taps: taps, sys: opts.Sys}
	g := b.build()
	if err := probs.Err(); err != nil {
		return nil, probs, err
	}
	return g, probs, nil
}

// Agent runs one configuration.
type Agent struct {
	opts Options
	log  *slog.Logger
	reg  *metrics.Registry

	// mu serialises start, stop, reload and retries; it is held for a whole
	// stop or reload, drains included.
	mu sync.Mutex
	// stmu guards what Status reads (g, state, nodes' life), for moments
	// only, so /healthz answers while mu is held by a drain.
	stmu  sync.Mutex
	g     *graph
	state string // "starting", "running", "stopping", "stopped"
	fetch *config.Fetcher
	// secrets masks every secret the agent knows (its options' and its
	// configuration's) in everything it says: the log, /healthz, /metrics,
	// /api/status and the tap.
	secrets  *redact.Redactor
	known    []string            // what secrets masks; grows with reloads (see learn)
	knownSet map[string]bool     // known, as a set
	polls    *logthrottle.Streak // configuration polls that fail

	// drains are the parts reloads removed that still drain in the
	// background, oldest first (see drainPart); guarded by mu and stmu.
	drains []*drainPart

	// intakeClosed is set once a stop was asked for: from then on no
	// source starts and every source's processor refuses puts.
	intakeClosed atomic.Bool

	retryWake   chan struct{}
	retryCancel context.CancelFunc
	retryDone   chan struct{}

	http    *metrics.Server
	taps    *flow.Taps
	sampler *status.Sampler
}

func (a *Agent) setState(st string) {
	a.stmu.Lock()
	a.state = st
	a.stmu.Unlock()
}

func (a *Agent) setGraph(g *graph) {
	a.stmu.Lock()
	a.g = g
	a.stmu.Unlock()
}

// New loads and builds the configuration; nothing runs until Start. Its
// warnings and notes are logged; its errors are returned.
func New(opts Options) (*Agent, error) {
	opts.defaults()
	red := redact.New()
	log := slog.New(red.Handler(opts.Logger.Handler()))
	reg := metrics.NewRegistry(opts.Name)
	reg.Redact = red
	a := &Agent{opts: opts, log: log, reg: reg, state: "stopped", taps: flow.NewTaps(),
		secrets: red, knownSet: map[string]bool{}, retryWake: make(chan struct{}, 1)}
	a.learn(opts.Secrets())
	f, err := opts.fetcher()
	if err != nil {
		return nil, err
	}
	a.fetch = f
	a.polls = &logthrottle.Streak{Log: log, Level: slog.LevelError, Every: 10 * time.Minute,
		Failed: "configuration cannot be read; the running configuration stays", Recovered: "configuration can be read again"}
	srcs, _, err := f.Fetch(context.Background())
	if err != nil {
		return nil, err
	}
	g, err := a.build(srcs)
	if err != nil {
		return nil, err
	}
	a.g = g
	return a, nil
}

// build validates srcs against a scratch registry, so that a bad
// configuration leaves no trace, then builds them for real and logs their
// warnings and notes.
func (a *Agent) build(srcs []config.Source) (*graph, error) {
	_, probs, err := load(srcs, &a.opts, metrics.NewRegistry(a.opts.Name), slog.New(slog.DiscardHandler), nil, nil)
	if probs != nil {
		a.learn(probs.Secrets())
	}
	if err != nil {
		return nil, err
	}
	g, probs, err := load(srcs, &a.opts, a.reg, a.log, nil, a.taps)
	if err != nil {
		return nil, err
	}
	a.learn(probs.Secrets())
	a.logProblems(probs)
	return g, nil
}

// learn adds secrets to those the agent masks. A secret stays masked for
// the agent's life: after a reload that drops it (or a refused one that
// brought it), a component draining or a late message may still quote it.
// Called before Start or with mu held.
func (a *Agent) learn(secrets []string) {
	n := len(a.known)
	for _, s := range secrets {
		if !a.knownSet[s] {
			a.knownSet[s] = true
			a.known = append(a.known, s)
		}
	}
	if len(a.known) > n {
		a.secrets.Set(a.known)
	}
}

// Logger returns the agent's logger: the one given in Options, with every
// secret the agent knows masked (see Options.Secrets and
// config.Problems.Secrets).
func (a *Agent) Logger() *slog.Logger { return a.log }

// Metrics returns the agent's metrics registry.
func (a *Agent) Metrics() *metrics.Registry { return a.reg }

// HTTPAddr returns the address the metrics endpoint listens on, or "".
func (a *Agent) HTTPAddr() string {
	if a.http == nil {
		return ""
	}
	return a.http.Addr()
}

// Start starts the HTTP endpoint (when configured), then channels, sinks
// and sources, in that order. A component that fails to start is named in
// the error and the agent stops what it started. Later (after a reload), a
// component that fails to start is retried instead, with backoff.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Starting from here: /healthz, served from the next lines, must not
	// call an agent that is starting "stopped".
	a.setState("starting")
	if a.opts.HTTPAddr != "" {
		a.sampler = status.NewSampler(a, a.reg, 0)
		// Every answer masks the agent's secrets: the status page's and
		// the tap's through Redact, the metrics' and /healthz's through
		// the registry's.
		h := status.Handler(status.Config{Sampler: a.sampler, Taps: a.taps, AllowTap: a.opts.AllowTap,
			Log: a.log, Redact: a.secrets, Next: metrics.HandlerWithStatus(a.reg, a.Status)})
		if a.opts.HTTPUser != "" {
			h = metrics.BasicAuth(h, a.opts.HTTPUser, a.opts.HTTPPassword)
		}
		h, opts := a.monitorServer(h)
		srv, err := metrics.ServeWith(ctx, a.opts.HTTPAddr, h, opts)
		if err != nil {
			a.setState("stopped")
			return fmt.Errorf("monitoring endpoint: %w", err)
		}
		a.http = srv
		a.sampler.Start()
	}
	// Sources last, and only if no stop was asked for while the channels
	// started (a file channel's replay can take a while).
	err := a.startNodes(a.g, true, false)
	if err == nil && ctx.Err() == nil {
		err = a.startNodes(a.g, true, true)
	}
	if err != nil {
		a.setState("stopping")
		// The parts that did start may already hold acknowledged events
		// (another source's): they get the drain any stop gives.
		a.stopNodes(a.g, nil, time.Now().Add(a.opts.ShutdownTimeout), "start failed")
		a.setState("stopped")
		return err
	}
	a.setState("running")
	rctx, cancel := context.WithCancel(context.Background())
	a.retryCancel, a.retryDone = cancel, make(chan struct{})
	retryDone := a.retryDone
	panics.Go("agent: start retries", func() { a.retryLoop(rctx, retryDone) })
	a.log.Info("agent started", "agent", a.opts.Name, "file", a.configName(),
		"sources", len(a.g.sources), "channels", len(a.g.channels), "sinks", len(a.g.sinks))
	return nil
}

// Stop stops the agent in two phases. Intake stops at once: every source
// refuses new events (nothing is acknowledged after Stop is called) and
// closes. Then the sinks drain the channels until ShutdownTimeout has
// passed since the call (or ctx's deadline, if earlier), and everything
// stops; a sink's batch in flight rolls back. Durable channels keep what
// they still hold (logged at INFO). If memory channels still held events,
// each is logged at ERROR with its count and Stop returns a *DroppedError.
func (a *Agent) Stop(ctx context.Context) error {
	deadline := time.Now().Add(a.opts.ShutdownTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	a.closeIntake()
	a.stopRetries()
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	if a.state == "running" || a.state == "starting" {
		a.setState("stopping")
		lost, _, _ := a.stopNodes(a.g, nil, deadline, "stop")
		// The drains reloads left in the background end by their own
		// deadlines, earlier than this one; what they drop is theirs.
		lost = append(lost, a.awaitDrains()...)
		a.removeMetrics(a.g, nil)
		a.setState("stopped")
		stopStartStreaks(a.g)
		a.polls.Stop()
		if len(lost) > 0 {
			dropped := &DroppedError{Channels: lost}
			err = dropped
			a.log.Error("agent stopped", "agent", a.opts.Name, "dropped", dropped.Events(), "in_flight_unknown", dropped.InFlight())
		} else {
			a.log.Info("agent stopped", "agent", a.opts.Name)
		}
	}
	if a.http != nil {
		err = errors.Join(err, a.http.Stop(ctx))
	}
	if a.sampler != nil {
		a.sampler.Stop()
	}
	return err
}

// Graph describes the configuration running now, as the status page draws
// it, with what reloads removed that still drains.
func (a *Agent) Graph() status.Graph {
	a.stmu.Lock()
	defer a.stmu.Unlock()
	if a.g == nil {
		return status.Graph{}
	}
	return withDrains(a.g, a.drains)
}

// stopRetries ends the retry loop, before a stop takes mu (the loop takes
// it too).
func (a *Agent) stopRetries() {
	a.mu.Lock()
	cancel, done := a.retryCancel, a.retryDone
	a.retryCancel, a.retryDone = nil, nil
	a.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Reload re-reads the configuration. Components whose configuration is
// unchanged keep running, and a kept channel keeps its events. Of the
// others: intake stops on the sources that go (as at a stop); a memory
// channel replaced by a memory channel hands its events to its replacement;
// a durable channel replaced keeps them in its storage for the replacement;
// any other channel that goes is drained by its sinks within
// ShutdownTimeout, in the background, and what it still holds then is
// reported (ERROR for a memory channel). Then the new components start at
// once, but for those named as a node of a drain still under way, which
// start when it ends; one that fails is retried with backoff, as is one
// that failed before and is unchanged. Reload returns without waiting for
// the drain, and a later reload is applied at once too. A configuration
// with problems, or one that cannot be read, is refused and the running one
// stays.
func (a *Agent) Reload(ctx context.Context) error {
	srcs, _, err := a.fetch.Fetch(ctx)
	if err != nil {
		a.log.Error("configuration not reloaded: it cannot be read; the running configuration stays", "err", err)
		return err
	}
	return a.reloadFrom(ctx, srcs)
}

func (a *Agent) reloadFrom(ctx context.Context, srcs []config.Source) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, probs, err := load(srcs, &a.opts, metrics.NewRegistry(a.opts.Name), slog.New(slog.DiscardHandler), nil, nil)
	if probs != nil {
		a.learn(probs.Secrets())
	}
	if err != nil {
		a.log.Error("configuration not reloaded: it has problems", "file", a.configName(), "problems", err.Error())
		return err
	}
	if a.state != "running" {
		return fmt.Errorf("agent is %s: not reloading", a.state)
	}
	old := a.g
	// Build what changed (kept nodes are the old ones) before stopping
	// anything, so a configuration that cannot be built leaves the agent as
	// it was.
	g, probs, err := load(srcs, &a.opts, a.reg, a.log, old, a.taps)
	if err != nil {
		a.log.Error("configuration not reloaded", "file", a.configName(), "err", err)
		return err
	}
	a.logProblems(probs)
	a.finishDrains()
	deadline := time.Now().Add(a.opts.ShutdownTimeout)
	lost, handed, bg := a.stopNodes(old, g, deadline, "reload")
	if bg != nil {
		a.stmu.Lock()
		a.drains = append(a.drains, bg)
		a.stmu.Unlock()
	}
	a.removeMetrics(old, g)
	for _, name := range handed {
		n, _ := g.channels[name].ch.(adopter).Adopt(old.channels[name].ch)
		a.log.Info("channel replaced: its events were handed to the new one", "component", name, "events", n)
	}
	a.setGraph(g)
	// A stop asked for during the drain (SIGTERM after SIGHUP) must not
	// see the new sources acknowledge anything: they do not start.
	err = a.startNodes(g, true, !a.intakeClosed.Load())
	a.wakeRetry()
	dropped := 0
	for _, l := range lost {
		dropped += l.Events
	}
	var draining []any
	if bg != nil {
		draining = []any{"draining", strings.Join(bg.channels(), " ")}
	}
	if dropped > 0 {
		a.log.Error("configuration reloaded; removed channels dropped events", append([]any{"file", a.configName(), "dropped", dropped}, draining...)...)
	} else {
		a.log.Info("configuration reloaded", append([]any{"file", a.configName()}, draining...)...)
	}
	return err
}

// logProblems logs a loaded configuration's warnings (WARN) and notes
// (INFO), one line each, the first MaxProblems of each in file and line
// order, then how many more there are.
func (a *Agent) logProblems(probs *config.Problems) {
	kept := map[config.Severity]int{}
	for _, p := range probs.Sorted() {
		kept[p.Severity]++
		switch p.Severity {
		case config.Warning:
			a.log.Warn(p.String())
		case config.Note:
			a.log.Info(p.String())
		}
	}
	if more := probs.Count(config.Warning) - kept[config.Warning]; more > 0 {
		a.log.Warn("... and more warnings, not logged: sluice validate --max-problems 0 lists them all",
			"file", a.configName(), "warnings", more)
	}
	if more := probs.Count(config.Note) - kept[config.Note]; more > 0 {
		a.log.Info("... and more notes, not logged: sluice validate --max-problems 0 lists them all",
			"file", a.configName(), "notes", more)
	}
}

// configName names the configuration in logs: its file, or its files and
// URIs.
func (a *Agent) configName() string {
	var names []string
	for _, l := range a.opts.locations() {
		names = append(names, config.Name(l))
	}
	return strings.Join(names, ", ")
}

// poll reads the configuration and reloads it when it changed. A read that
// fails keeps the running configuration; it is logged, throttled, since a
// configuration server that is down fails every poll.
func (a *Agent) poll(ctx context.Context) {
	srcs, changed, err := a.fetch.Fetch(ctx)
	if err != nil {
		a.polls.Fail(err)
		return
	}
	a.polls.Ok()
	if changed {
		a.log.Info("reloading configuration (changed)", "file", a.configName())
		a.reloadNotified(func() error { return a.reloadFrom(ctx, srcs) })
	}
}

// Run starts the agent and runs it until ctx is done, reloading when
// reload receives or the config file changes; then it stops.
func (a *Agent) Run(ctx context.Context, reload <-chan struct{}) error {
	// Intake closes the moment ctx ends: during the start (sources that
	// have not started then never do), and while a reload holds the agent
	// (draining a removed channel); the stop follows when it is done.
	defer panics.AfterFunc(ctx, "agent: close intake", a.closeIntake)()
	if err := a.Start(ctx); err != nil {
		_ = a.Stop(context.Background())
		return err
	}
	if a.opts.Notify != nil {
		a.opts.Notify(Ready, nil)
	}
	var tick <-chan time.Time
	if a.opts.PollInterval > 0 {
		t := time.NewTicker(a.opts.PollInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return a.Stop(context.Background())
		case <-reload:
			a.log.Info("reloading configuration (signal)")
			a.reloadNotified(func() error { return a.Reload(ctx) })
		case <-tick:
			a.poll(ctx)
		}
	}
}
