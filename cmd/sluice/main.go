// Command sluice is an event and log collection agent that runs Flume
// agent configurations.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

const usage = `usage:
  sluice agent -f FILE -n NAME [options]     run the agent NAME defined in FILE
  sluice validate -f FILE -n NAME [options]  check FILE: print its errors, warnings and notes (the first
                                             100 of each, --max-problems); exit 1 on an error (with
                                             --strict, on a warning too)
  sluice bench PRESET | [options]            generate load, receive it, report loss and latency
                                             (sluice bench --help)
  sluice top [--http ADDR]                   the components of a running agent, live, in the terminal
                                             (sluice top --help)
  sluice tap COMPONENT [--http ADDR]         events passing a source's output or a channel's take,
                                             sampled (sluice tap --help); the agent needs --allow-tap
  sluice version [--json]                    print the version, commit, build date and Go version
  sluice flume-ng COMMAND [options]          Flume's launcher: agent, avro-client, version, help
                                             (also when sluice is called as flume-ng)
  sluice COMMAND --help                      print this help

agent and validate options (flume-ng's names work too):
  -f, --conf-file FILE     a Flume properties file; give -f several times to read several,
                           a key in a later file overriding the earlier one
  -u, --conf-uri URI       read the configuration from URI (http, https or file), after the
                           files; may be given several times
  --conf-user USER         user for basic authentication to --conf-uri
  --conf-password PASS     its password
  -n, --name NAME          the agent name: the prefix of its keys
  -DX=VALUE                a system property, read by ${sys:X} in the file;
                           -Dflume.monitoring.type=http -Dflume.monitoring.port=P serves metrics on P;
                           -Djavax.net.ssl.trustStore=F (a JKS, PKCS12 or PEM store,
                           trustStorePassword) is whom https URIs are trusted to be
  --strict                 validate only: warnings (keys sluice ignores) are errors too
  --max-problems N         print (or log) the first N errors, warnings and notes of each kind, in
                           file order, then how many more (default 100; 0: all)
  --http ADDR              serve the status page (/), /metrics (Flume JSON), /metrics/prometheus
                           and /healthz on ADDR; a port alone (:41414) and -Dflume.monitoring.port
                           listen on loopback (127.0.0.1) only: give 0.0.0.0:PORT to serve other
                           hosts, and protect it with the options below
  --http-user USER         require HTTP basic authentication on ADDR with this user...
  --http-password-file FILE
                           ...and the password in FILE (its first line; or the environment
                           variable SLUICE_HTTP_PASSWORD)
  --http-tls-cert FILE     serve ADDR over TLS only, with this PEM certificate (chain)...
  --http-tls-key FILE      ...and its PEM private key
  --http-tls-client-ca FILE
                           require clients of ADDR to present a certificate signed by a CA in FILE
                           (PEM, JKS or PKCS12; a store's password in SLUICE_HTTP_CA_PASSWORD)
  --allow-tap              serve sampled events to sluice tap on ADDR (it shows event data)
  --log-level LEVEL        debug, info (default), warn or error
  --log-format FORMAT      text (default) or json
  --no-reload-conf         do not reload when the configuration changes (SIGHUP still reloads)
  --poll-interval SECONDS  how often to read the configuration for changes (default 30,
                           300 with an http or https --conf-uri, as in Flume)
  --shutdown-timeout SECONDS
                           how long a stop lets the sinks drain the channels (default 20)
  -c, --conf DIR           accepted for flume-ng compatibility; unused

SIGTERM or SIGINT stops intake at once, lets the sinks drain the channels until
--shutdown-timeout, then exits; a second one exits at once. SIGHUP reloads.
Exit status of agent: 0 stopped, nothing lost (durable channels keep what they
hold); 1 could not start; 2 bad command line; 3 stopped, but memory channels
still held events at the deadline (each logged at ERROR with its count);
4 stopped at once by a second signal; 70 a bug: a goroutine of the agent
panicked (logged at ERROR with its stack; durable channels keep their events).
`

// Exit statuses of `sluice agent`.
const (
	exitOK      = 0 // stopped; nothing lost (durable channels keep what they hold)
	exitFailed  = 1 // could not start: bad config, a component failed to start
	exitUsage   = 2 // bad command line
	exitDropped = 3 // stopped, but memory channels still held events at the deadline
	exitAborted = 4 // a second SIGTERM/SIGINT stopped the agent at once
	// panics.ExitStatus (70): a goroutine panicked outside a sink's
	// delivery; package panics logs it and exits.
)

func main() {
	defer panics.Guard("main")
	// The first SIGTERM/SIGINT ends ctx (a stop); a second one closes abort.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	abort := make(chan struct{})
	term := make(chan os.Signal, 2)
	signal.Notify(term, os.Interrupt, syscall.SIGTERM)
	panics.Go("signals", func() {
		<-term
		stop()
		<-term
		close(abort)
	})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := make(chan struct{}, 1)
	panics.Go("SIGHUP", func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	})
	args := os.Args[1:]
	// Installed as /usr/bin/flume-ng (a link), sluice is Flume's launcher.
	if filepath.Base(os.Args[0]) == "flume-ng" {
		args = append([]string{"flume-ng"}, args...)
	}
	os.Exit(runSignals(ctx, args, reload, abort, os.Stdout, os.Stderr))
}

// cli is the parsed command line.
type cli struct {
	cmd                string
	files, uris        []string
	confUser, confPass string
	name               string
	sys                map[string]string
	httpAddr           string
	logLevel           string
	logFormat          string
	noReload           bool
	strict             bool
	maxProblems        int           // 0: the default; -1: all
	pollInterval       time.Duration // 0: the default
	shutdownTimeout    time.Duration // 0: the default
	httpUser           string
	httpPasswordFile   string
	httpCert, httpKey  string
	httpClientCA       string
	allowTap           bool
}

func parse(args []string) (*cli, error) {
	if len(args) == 0 {
		return nil, errors.New("no command given")
	}
	c := &cli{cmd: args[0], sys: map[string]string{}, logFormat: "text"}
	switch c.cmd {
	case "agent", "validate":
	case "help", "-h", "--help", "-help":
		c.cmd = "help"
		return c, nil
	default:
		return nil, fmt.Errorf("unknown command %q", c.cmd)
	}
	rest := args[1:]
	for _, arg := range rest {
		if arg == "-h" || arg == "--help" || arg == "-help" {
			c.cmd = "help"
			return c, nil
		}
	}
	for i := 0; i < len(rest); i++ {
		arg := rest[i]
		name, val, hasVal := strings.Cut(arg, "=")
		if strings.HasPrefix(arg, "-D") && len(arg) > 2 {
			k, v, _ := strings.Cut(arg[2:], "=")
			c.sys[k] = v
			continue
		}
		next := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(rest) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return rest[i], nil
		}
		var err error
		var v string
		switch name {
		case "-f", "--conf-file", "-conf-file":
			if v, err = next(); err == nil {
				c.files = append(c.files, v)
			}
		case "-u", "--conf-uri", "-conf-uri":
			if v, err = next(); err == nil {
				c.uris = append(c.uris, v)
			}
		case "--conf-user", "-conf-user", "-user":
			c.confUser, err = next()
		case "--conf-password", "-conf-password", "-pwd":
			c.confPass, err = next()
		case "-n", "--name", "-name":
			c.name, err = next()
		case "-c", "--conf", "-conf":
			_, err = next()
		case "--http", "-http":
			c.httpAddr, err = next()
		case "--http-user", "-http-user":
			c.httpUser, err = next()
		case "--http-password-file", "-http-password-file":
			c.httpPasswordFile, err = next()
		case "--http-tls-cert", "-http-tls-cert":
			c.httpCert, err = next()
		case "--http-tls-key", "-http-tls-key":
			c.httpKey, err = next()
		case "--http-tls-client-ca", "-http-tls-client-ca":
			c.httpClientCA, err = next()
		case "--allow-tap", "-allow-tap":
			c.allowTap = true
		case "--log-level", "-log-level":
			c.logLevel, err = next()
		case "--log-format", "-log-format":
			c.logFormat, err = next()
		case "--no-reload-conf", "-no-reload-conf":
			c.noReload = true
		case "--max-problems", "-max-problems":
			var v string
			if v, err = next(); err == nil {
				var n int
				if n, err = strconv.Atoi(v); err != nil || n < 0 {
					err = fmt.Errorf("--max-problems %q: want a number of problems of each kind to print (0: all)", v)
				}
				c.maxProblems = n
				if n == 0 {
					c.maxProblems = -1
				}
			}
		case "--strict", "-strict":
			if c.cmd != "validate" {
				err = fmt.Errorf("--strict is an option of validate")
			}
			c.strict = true
		case "--poll-interval", "-poll-interval", "-i":
			var s string
			if s, err = next(); err == nil {
				var n int
				if n, err = strconv.Atoi(s); err != nil || n <= 0 {
					err = fmt.Errorf("--poll-interval %q: want a whole number of seconds above 0", s)
				}
				c.pollInterval = time.Duration(n) * time.Second
			}
		case "--shutdown-timeout", "-shutdown-timeout":
			var s string
			if s, err = next(); err == nil {
				var f float64
				if f, err = strconv.ParseFloat(s, 64); err != nil || !(f > 0 && f <= 24*3600) {
					err = fmt.Errorf("--shutdown-timeout %q: want a number of seconds above 0, such as 20 or 0.5", s)
				}
				c.shutdownTimeout = time.Duration(f * float64(time.Second))
			}
		case "-z", "--zkConnString", "-zkConnString", "-p", "--zkBasePath", "-zkBasePath":
			err = fmt.Errorf("%s: configuration from ZooKeeper is not supported by sluice; use -f FILE or --conf-uri URI", name)
		case "-a", "--auth-provider", "-auth-provider":
			err = fmt.Errorf("%s: Java authorization provider classes cannot be loaded by sluice; use --conf-user and --conf-password (basic authentication)", name)
		case "-prov", "--conf-provider", "-conf-provider":
			err = fmt.Errorf("%s: Java configuration provider classes cannot be loaded by sluice; use -f FILE or --conf-uri URI", name)
		case "-b", "--backup-directory", "-backup-directory":
			err = fmt.Errorf("%s is not supported by sluice: a configuration URI that cannot be read at start fails the start (once running, a failed read keeps the running configuration)", name)
		default:
			err = fmt.Errorf("unknown option %q", arg)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(c.files)+len(c.uris) == 0 || c.name == "" {
		return nil, fmt.Errorf("%s needs -f FILE (or --conf-uri URI) and -n NAME", c.cmd)
	}
	if c.confPass != "" && c.confUser == "" {
		return nil, errors.New("--conf-password needs --conf-user")
	}
	return c, nil
}

// options are the agent options the command line gives.
func (c *cli) options() agent.Options {
	o := agent.Options{Name: c.name, Sys: c.sys, URIs: c.uris, ConfUser: c.confUser, ConfPass: c.confPass,
		ShutdownTimeout: c.shutdownTimeout, MaxProblems: c.maxProblems}
	if len(c.files) > 0 {
		o.File, o.Files = c.files[0], c.files[1:]
	}
	if !c.noReload {
		o.PollInterval = c.pollInterval
		if o.PollInterval == 0 {
			o.PollInterval = 30 * time.Second // Flume's for files
			for _, u := range c.uris {
				if config.IsRemote(u) {
					o.PollInterval = 300 * time.Second // Flume's for http(s)
				}
			}
		}
	}
	return o
}

// monitoringAddr turns --http and flume-ng's monitoring properties into the
// address the agent listens on. An address without a host (":41414", or
// -Dflume.monitoring.port=41414, which Flume binds on every interface) is
// bound to loopback: the endpoint shows the configuration and, with
// --allow-tap, event data, so serving other hosts must be said outright
// (--http 0.0.0.0:41414, which may go with the -D properties when the ports
// agree).
func (c *cli) monitoringAddr() (string, error) {
	addr := c.httpAddr
	if typ, ok := c.sys["flume.monitoring.type"]; ok {
		if !strings.EqualFold(typ, "http") {
			return "", fmt.Errorf("-Dflume.monitoring.type=%s is not supported; use http (Flume JSON at /metrics, Prometheus at /metrics/prometheus)", typ)
		}
		port := c.sys["flume.monitoring.port"]
		if port == "" {
			port = "41414" // Flume's default
		}
		if _, err := strconv.Atoi(port); err != nil {
			return "", fmt.Errorf("-Dflume.monitoring.port=%s is not a port number", port)
		}
		if addr == "" {
			addr = ":" + port
		} else if _, p, err := net.SplitHostPort(addr); err != nil || p != port {
			return "", fmt.Errorf("both --http %s and -Dflume.monitoring.port=%s given, with different ports; use one (--http HOST:%s chooses the interface for the port of the -D properties)", addr, port, port)
		}
	}
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http %s: want HOST:PORT, such as 127.0.0.1:41414 (a port alone, :41414, listens on loopback)", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpSecurity reads the basic authentication and TLS options into opts.
func (c *cli) httpSecurity(opts *agent.Options) error {
	if c.httpUser != "" {
		pass, ok := os.LookupEnv("SLUICE_HTTP_PASSWORD")
		if c.httpPasswordFile != "" {
			b, err := os.ReadFile(c.httpPasswordFile)
			if err != nil {
				return fmt.Errorf("--http-password-file: %w", err)
			}
			pass, _, _ = strings.Cut(string(b), "\n")
			pass, ok = strings.TrimRight(pass, "\r"), true
		}
		if !ok || pass == "" {
			return errors.New("--http-user needs a password: --http-password-file FILE, or SLUICE_HTTP_PASSWORD in the environment")
		}
		opts.HTTPUser, opts.HTTPPassword = c.httpUser, pass
	} else if c.httpPasswordFile != "" {
		return errors.New("--http-password-file needs --http-user")
	}
	if (c.httpCert == "") != (c.httpKey == "") {
		return errors.New("--http-tls-cert and --http-tls-key go together")
	}
	if c.httpCert != "" {
		cert, err := tls.LoadX509KeyPair(c.httpCert, c.httpKey)
		if err != nil {
			return fmt.Errorf("--http-tls-cert %s, --http-tls-key %s: %w", c.httpCert, c.httpKey, err)
		}
		opts.HTTPTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if c.httpClientCA != "" {
		if opts.HTTPTLS == nil {
			return errors.New("--http-tls-client-ca needs --http-tls-cert and --http-tls-key")
		}
		s := tlsconf.Settings{Enabled: true, Truststore: c.httpClientCA, TruststorePassword: os.Getenv("SLUICE_HTTP_CA_PASSWORD"),
			Names: tlsconf.Names{Truststore: "--http-tls-client-ca", TruststorePassword: "SLUICE_HTTP_CA_PASSWORD"}}
		cc, err := s.ClientConfig("")
		if err != nil {
			return err
		}
		opts.HTTPTLS.ClientCAs, opts.HTTPTLS.ClientAuth = cc.RootCAs, tls.RequireAndVerifyClientCert
	}
	if opts.HTTPAddr == "" && (opts.HTTPUser != "" || opts.HTTPTLS != nil || c.allowTap) {
		return errors.New("--http-user, --http-tls-cert and --allow-tap need --http ADDR (or -Dflume.monitoring.type=http)")
	}
	opts.AllowTap = c.allowTap
	return nil
}

// noteFlumeBinding tells a Flume user whose -Dflume.monitoring.port now
// listens on loopback (Flume listens on every interface) how to serve other
// hosts, once, at start.
func (c *cli) noteFlumeBinding(log *slog.Logger, addr string) {
	if _, ok := c.sys["flume.monitoring.type"]; !ok || c.httpAddr != "" || !isLoopback(addr) {
		return
	}
	_, port, _ := net.SplitHostPort(addr)
	log.Info("monitoring listens on loopback only, where Flume listens on every interface; add --http 0.0.0.0:"+port+
		" to serve other hosts (see docs/status.md for the risk and --http-user, --http-tls-cert)", "addr", addr)
}

// warnExposure says what an address that other hosts reach shows, once, at
// start.
func warnExposure(log *slog.Logger, o agent.Options) {
	if o.HTTPAddr == "" || isLoopback(o.HTTPAddr) {
		return
	}
	var missing []string
	if o.HTTPUser == "" {
		missing = append(missing, "no authentication (--http-user)")
	}
	if o.HTTPTLS == nil {
		missing = append(missing, "no TLS (--http-tls-cert)")
	}
	if len(missing) == 0 {
		return
	}
	what := "component names, counters and health reasons"
	if o.AllowTap {
		what += ", and event data through the tap (--allow-tap)"
	}
	log.Warn("the monitoring address is reachable from other hosts with "+strings.Join(missing, " and ")+": it shows "+what,
		"addr", o.HTTPAddr)
}

func (c *cli) logger(w io.Writer) (*slog.Logger, error) {
	level := c.logLevel
	if level == "" {
		// flume-ng's -Dflume.root.logger=INFO,console sets the level too.
		if v, ok := c.sys["flume.root.logger"]; ok {
			level, _, _ = strings.Cut(v, ",")
		} else {
			level = "info"
		}
	}
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug", "trace":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error", "fatal":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch c.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", c.logFormat)
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, reload <-chan struct{}, stdout, stderr io.Writer) int {
	return runSignals(ctx, args, reload, nil, stdout, stderr)
}

// runSignals is run with abort, closed by a second SIGTERM/SIGINT while
// the agent stops: it returns exitAborted at once, after the agent logged
// what its channels still held.
func runSignals(ctx context.Context, args []string, reload, abort <-chan struct{}, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "bench":
			return bench.Main(ctx, args[1:], stdout, stderr)
		case "top":
			return topMain(ctx, args[1:], stdout, stderr)
		case "tap":
			return tapMain(ctx, args[1:], stdout, stderr)
		case "version", "--version", "-v":
			return versionMain(args[1:], stdout, stderr)
		case "flume-ng":
			return flumeMain(ctx, args[1:], reload, abort, stdout, stderr)
		}
	}
	c, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n\n%s", err, usage)
		return 2
	}
	switch c.cmd {
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "validate":
		return validate(ctx, c, stdout)
	}
	log, err := c.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	panics.SetLogger(log)
	addr, err := c.monitoringAddr()
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	opts := c.options()
	opts.Logger, opts.HTTPAddr = log, addr
	if err := c.httpSecurity(&opts); err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	b := readBuildInfo()
	log.Info("sluice starting", "version", b.Version, "commit", b.Commit, "go", b.GoVersion)
	warnExposure(log, opts)
	c.noteFlumeBinding(log, addr)
	// Under systemd (Type=notify) the agent says when it is ready, reloading
	// and stopping, and feeds the watchdog while it answers.
	notify := notifierFromEnv()
	if notify != nil {
		opts.Notify = notify.lifecycle
	}
	a, err := agent.New(opts)
	if err != nil {
		printProblems(stderr, err, redact.New(opts.Secrets()...))
		return exitFailed
	}
	panics.SetLogger(a.Logger()) // redacts the configuration's secrets
	// Whatever logs through the default logger (a library, a component's
	// fallback) masks the agent's secrets too.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(a.Logger())
	if notify != nil {
		notify.health = a.Status
		wctx, cancel := context.WithCancel(context.Background())
		watching := make(chan struct{})
		panics.Go("systemd watchdog", func() { defer close(watching); notify.watch(wctx) })
		defer func() { cancel(); <-watching }()
		defer panics.AfterFunc(ctx, "systemd notify: stopping", notify.stopping)()
	}
	done := make(chan error, 1)
	panics.Go("agent", func() { done <- a.Run(ctx, reload) })
	select {
	case err = <-done:
	case <-abort:
		a.Abort()
		return exitAborted
	}
	var dropped *agent.DroppedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &dropped):
		return exitDropped // each channel's count is logged already
	default:
		a.Logger().Error("agent failed", "err", err) // secrets redacted
		return exitFailed
	}
}

// validate prints every problem, warning and note of the configuration,
// one per line, and returns 1 when it has an error, or a warning with
// --strict.
//
// Problems come with the configuration's secrets and the command line's
// (--conf-password, a URI's password) masked; the other lines mask the
// command line's.
func validate(ctx context.Context, c *cli, stdout io.Writer) int {
	opts := c.options()
	red := redact.New(opts.Secrets()...)
	probs, err := agent.Check(ctx, opts)
	var ps *config.Problems
	if err != nil && !errors.As(err, &ps) {
		fmt.Fprintf(stdout, "sluice: %v\n", red.Error(err))
		return 1
	}
	for _, line := range probs.Lines(true) { // secrets masked, the options' too
		fmt.Fprintln(stdout, line)
	}
	var names []string
	for _, l := range append(append([]string(nil), c.files...), c.uris...) {
		names = append(names, config.Name(l))
	}
	what := red.String(strings.Join(names, ", "))
	warnings := probs.Count(config.Warning)
	switch {
	case err != nil:
		return 1
	case c.strict && warnings > 0:
		fmt.Fprintf(stdout, "%s: agent %s has %s, which --strict counts as errors\n", what, c.name, plural(warnings, "warning"))
		return 1
	case warnings > 0:
		fmt.Fprintf(stdout, "%s: agent %s is valid, with %s\n", what, c.name, plural(warnings, "warning"))
	default:
		fmt.Fprintf(stdout, "%s: agent %s is valid\n", what, c.name)
	}
	return 0
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// printProblems prints a configuration's errors and warnings, one per line
// (their secrets and the options' masked by the Problems), or the error
// that kept it from being read, with the secrets red knows masked.
func printProblems(w io.Writer, err error, red *redact.Redactor) {
	var probs *config.Problems
	if errors.As(err, &probs) {
		for _, line := range probs.Lines(false) {
			fmt.Fprintln(w, line)
		}
		return
	}
	fmt.Fprintf(w, "sluice: %v\n", red.Error(err))
}
