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
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
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
	// HTTPAddr, when set, serves /metrics, /metrics/prometheus and /healthz.
	HTTPAddr string
	// DrainTimeout bounds how long a stop lets sinks empty the channels.
	DrainTimeout time.Duration
	// StopTimeout bounds how long each source or sink may take to stop.
	StopTimeout time.Duration
	// PollInterval is how often the configuration is read again to see
	// whether it changed; 0 turns polling off (SIGHUP still reloads). A
	// failed read keeps the running configuration.
	PollInterval time.Duration
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

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 10 * time.Second
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
	_, probs, err := load(srcs, opts.Name, opts.Sys, metrics.NewRegistry(opts.Name), slog.New(slog.DiscardHandler), nil)
	return probs, err
}

// load parses the sources and builds their graph; problems of both steps
// are reported together.
func load(srcs []config.Source, name string, sys map[string]string, reg *metrics.Registry, log *slog.Logger, keep *graph) (*graph, *config.Problems, error) {
	cfg, err := config.LoadSources(srcs, name, config.Lookup{Sys: sys, Exec: config.RunCommand})
	var probs *config.Problems
	if err != nil && (!errors.As(err, &probs) || cfg == nil) {
		return nil, nil, err
	}
	// Component constructors record into the same Problems through their
	// Props, so structural and component problems are reported together.
	probs = cfg.Problems
	b := &builder{cfg: cfg, reg: reg, log: log, probs: probs, keep: keep}
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

	mu      sync.Mutex // guards g, state, failed during start, stop and reload
	g       *graph
	state   string // "starting", "running", "stopping", "stopped"
	failed  map[string]error
	fetch   *config.Fetcher
	secrets *redactor // replaces config-filter secrets in the log
	polls   *logthrottle.Throttle

	http *metrics.Server
}

// New loads and builds the configuration; nothing runs until Start. Its
// warnings and notes are logged; its errors are returned.
func New(opts Options) (*Agent, error) {
	opts.defaults()
	red := &redactor{}
	log := slog.New(&redactHandler{h: opts.Logger.Handler(), r: red})
	a := &Agent{opts: opts, log: log, reg: metrics.NewRegistry(opts.Name), state: "stopped", failed: map[string]error{},
		secrets: red, polls: logthrottle.New(10*time.Minute, 1)}
	f, err := opts.fetcher()
	if err != nil {
		return nil, err
	}
	a.fetch = f
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
	_, probs, err := load(srcs, a.opts.Name, a.opts.Sys, metrics.NewRegistry(a.opts.Name), slog.New(slog.DiscardHandler), nil)
	if probs != nil {
		a.secrets.set(probs.Secrets())
	}
	if err != nil {
		return nil, err
	}
	g, probs, err := load(srcs, a.opts.Name, a.opts.Sys, a.reg, a.log, nil)
	if err != nil {
		return nil, err
	}
	a.secrets.set(probs.Secrets())
	a.logProblems(probs)
	return g, nil
}

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
// the error and the agent stops what it started.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.opts.HTTPAddr != "" {
		srv, err := metrics.Serve(ctx, a.opts.HTTPAddr, metrics.Handler(a.reg, a.Health), a.log)
		if err != nil {
			return fmt.Errorf("monitoring endpoint: %w", err)
		}
		a.http = srv
	}
	a.state = "starting"
	if err := a.startGraph(ctx, a.g, nil); err != nil {
		a.state = "stopping"
		a.stopGraph(a.g, nil)
		a.state = "stopped"
		return err
	}
	a.state = "running"
	a.log.Info("agent started", "agent", a.opts.Name, "file", a.configName(),
		"sources", len(a.g.sources), "channels", len(a.g.channels), "sinks", len(a.g.sinks))
	return nil
}

// startGraph starts every node of g not in running (the nodes a reload keeps).
func (a *Agent) startGraph(ctx context.Context, g, running *graph) error {
	for _, c := range g.cfg.Channels {
		n, ok := g.channels[c.Name]
		if !ok || (running != nil && running.channels[c.Name] == n) {
			continue
		}
		if err := n.ch.Start(ctx); err != nil {
			return a.fail("channel", c.Name, err)
		}
	}
	for _, c := range g.cfg.Sinks {
		n, ok := g.sinks[c.Name]
		if !ok || (running != nil && running.sinks[c.Name] == n) {
			continue
		}
		if err := n.sink.Start(ctx); err != nil {
			return a.fail("sink", c.Name, err)
		}
	}
	for name, r := range g.runners {
		if running != nil && running.runners[name] == r {
			continue
		}
		r.runner = flow.NewSinkRunner(name, r.sink, a.log.With("runner", name))
		r.runner.Start()
	}
	for _, c := range g.cfg.Sources {
		n, ok := g.sources[c.Name]
		if !ok || (running != nil && running.sources[c.Name] == n) {
			continue
		}
		if err := n.src.Start(ctx, n.proc); err != nil {
			return a.fail("source", c.Name, err)
		}
	}
	return nil
}

func (a *Agent) fail(kind, name string, err error) error {
	err = fmt.Errorf("%s %s failed to start: %w", kind, name, err)
	a.failed[kind+" "+name] = err
	a.log.Error("component failed to start", "kind", kind, "component", name, "err", err)
	return err
}

// stopGraph stops the nodes of g not in keep, in reverse start order:
// sources (intake stops, in-flight batches commit), then sink runners after
// draining channels that go away, then sinks, then channels.
func (a *Agent) stopGraph(g, keep *graph) {
	kept := func(m map[string]bool, name string) bool { return m[name] }
	keepSources, keepRunners, keepSinks, keepChannels := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	if keep != nil {
		for n, s := range g.sources {
			keepSources[n] = keep.sources[n] == s
		}
		for n, r := range g.runners {
			keepRunners[n] = keep.runners[n] == r
		}
		for n, s := range g.sinks {
			keepSinks[n] = keep.sinks[n] == s
		}
		for n, c := range g.channels {
			keepChannels[n] = keep.channels[n] == c
		}
	}
	var wg sync.WaitGroup
	for name, n := range g.sources {
		if kept(keepSources, name) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), a.opts.StopTimeout)
			defer cancel()
			if err := n.src.Stop(ctx); err != nil {
				a.log.Warn("source did not stop cleanly", "component", name, "err", err)
			}
		}()
	}
	wg.Wait()
	// Drain: a runner whose channels are all kept need not empty them.
	for name, r := range g.runners {
		if kept(keepRunners, name) || r.runner == nil {
			continue
		}
		drain := false
		for _, m := range r.members {
			if sn := g.sinks[m]; sn != nil && !kept(keepChannels, sn.spec.Channel) {
				drain = true
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if drain {
				ctx, cancel := context.WithTimeout(context.Background(), a.opts.DrainTimeout)
				r.runner.Drain(ctx, a.channelsOf(g, r)...)
				cancel()
			}
			ctx, cancel := context.WithTimeout(context.Background(), a.opts.StopTimeout)
			defer cancel()
			r.runner.Stop(ctx)
		}()
	}
	wg.Wait()
	for name, n := range g.sinks {
		if kept(keepSinks, name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.StopTimeout)
		if err := n.sink.Stop(ctx); err != nil {
			a.log.Warn("sink did not stop cleanly", "component", name, "err", err)
		}
		cancel()
		a.reg.Remove(metrics.KindSink, name)
	}
	for name, n := range g.channels {
		if kept(keepChannels, name) {
			continue
		}
		if left := n.ch.Len(); left > 0 {
			a.log.Warn("channel stopped with events still in it", "component", name, "events", left)
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.StopTimeout)
		if err := n.ch.Stop(ctx); err != nil {
			a.log.Warn("channel did not stop cleanly", "component", name, "err", err)
		}
		cancel()
		a.reg.Remove(metrics.KindChannel, name)
	}
	for name := range g.sources {
		if !kept(keepSources, name) {
			a.reg.Remove(metrics.KindSource, name)
		}
	}
}

func (a *Agent) channelsOf(g *graph, r *runnerNode) []flow.Channel {
	var out []flow.Channel
	for _, m := range r.members {
		if sn := g.sinks[m]; sn != nil {
			if cn := g.channels[sn.spec.Channel]; cn != nil {
				out = append(out, cn.ch)
			}
		}
	}
	return out
}

// Stop stops intake, lets sinks drain the channels for at most
// DrainTimeout, stops everything and the HTTP endpoint.
func (a *Agent) Stop(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == "running" || a.state == "starting" {
		a.state = "stopping"
		a.stopGraph(a.g, nil)
		a.state = "stopped"
		a.log.Info("agent stopped", "agent", a.opts.Name)
	}
	if a.http != nil {
		return a.http.Stop(ctx)
	}
	return nil
}

// Reload re-reads the configuration. Components whose configuration is
// unchanged keep running, and a kept channel keeps its events. A
// configuration with problems, or one that cannot be read, is refused and
// the running one stays.
func (a *Agent) Reload(ctx context.Context) error {
	srcs, _, err := a.fetch.Fetch(ctx)
	if err != nil {
		a.log.Error("configuration not reloaded: it cannot be read; the running configuration stays", "err", err)
		return err
	}
	return a.reloadFrom(ctx, srcs)
}

// lookup is how the agent resolves ${...} references: -D values, the
// environment and config filters (external ones run their commands).
func (a *Agent) lookup() config.Lookup {
	return config.Lookup{Sys: a.opts.Sys, Exec: config.RunCommand}
}

func (a *Agent) reloadFrom(ctx context.Context, srcs []config.Source) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, probs, err := load(srcs, a.opts.Name, a.opts.Sys, metrics.NewRegistry(a.opts.Name), slog.New(slog.DiscardHandler), nil)
	if probs != nil {
		a.secrets.set(probs.Secrets())
	}
	if err != nil {
		a.log.Error("configuration not reloaded: it has problems", "file", a.configName(), "problems", err.Error())
		return err
	}
	old := a.g
	// Build only what changed; kept nodes are taken over from old.
	probe, err := config.LoadSources(srcs, a.opts.Name, a.lookup())
	if err != nil {
		return err
	}
	planner := &builder{cfg: probe, reg: metrics.NewRegistry(a.opts.Name), log: a.log, probs: probe.Problems, keep: old}
	plan := planner.build() // kept nodes are old ones; the rest is built against a scratch registry
	// Stop what does not survive, then build the replacements for real.
	a.stopGraph(old, plan)
	// The same decisions as plan (same config, same old graph), now built
	// against the agent's registry.
	g, probs, err := load(srcs, a.opts.Name, a.opts.Sys, a.reg, a.log, old)
	if err != nil {
		return err
	}
	a.logProblems(probs)
	if err := a.startGraph(ctx, g, old); err != nil {
		a.g = g
		return err
	}
	a.g = g
	a.log.Info("configuration reloaded", "file", a.configName())
	return nil
}

// logProblems logs a loaded configuration's warnings (WARN) and notes
// (INFO), one line each.
func (a *Agent) logProblems(probs *config.Problems) {
	for _, p := range probs.Sorted() {
		switch p.Severity {
		case config.Warning:
			a.log.Warn(p.String())
		case config.Note:
			a.log.Info(p.String())
		}
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
		a.polls.Log(a.log, slog.LevelError, "poll", "configuration cannot be read; the running configuration stays", "err", err)
		return
	}
	if changed {
		a.log.Info("reloading configuration (changed)", "file", a.configName())
		_ = a.reloadFrom(ctx, srcs)
	}
}

// Health returns nil when every component is running, or the reason not.
func (a *Agent) Health() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != "running" {
		return fmt.Errorf("agent is %s", a.state)
	}
	var errs []error
	for _, err := range a.failed {
		errs = append(errs, err)
	}
	errs = append(errs, a.g.health()...)
	return errors.Join(errs...)
}

// Run starts the agent and runs it until ctx is done, reloading when
// reload receives or the config file changes; then it stops.
func (a *Agent) Run(ctx context.Context, reload <-chan struct{}) error {
	if err := a.Start(ctx); err != nil {
		_ = a.Stop(context.Background())
		return err
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
			_ = a.Reload(ctx)
		case <-tick:
			a.poll(ctx)
		}
	}
}
