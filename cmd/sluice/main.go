// Command sluice is an event and log collection agent that runs Flume
// agent configurations.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage:
  sluice agent -f FILE -n NAME [options]   run the agent NAME defined in FILE
  sluice validate -f FILE -n NAME [-DX=V]  check FILE; print one line per problem, exit 1 if any
  sluice bench PRESET | [options]          generate load, receive it, report loss and latency
                                           (sluice bench --help)
  sluice version                           print the version

agent and validate options (flume-ng's names work too):
  -f, --conf-file FILE     the Flume properties file
  -n, --name NAME          the agent name: the prefix of its keys
  -DX=VALUE                a system property, read by ${sys:X} in the file;
                           -Dflume.monitoring.type=http -Dflume.monitoring.port=P serves metrics on P
  --http ADDR              serve /metrics (Flume JSON), /metrics/prometheus and /healthz on ADDR
  --log-level LEVEL        debug, info (default), warn or error
  --log-format FORMAT      text (default) or json
  --no-reload-conf         do not reload when the file changes (SIGHUP still reloads)
  --poll-interval SECONDS  how often to check the file for changes (default 30)
  -c, --conf DIR           accepted for flume-ng compatibility; unused
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}()
	os.Exit(run(ctx, os.Args[1:], reload, os.Stdout, os.Stderr))
}

// cli is the parsed command line.
type cli struct {
	cmd          string
	file, name   string
	sys          map[string]string
	httpAddr     string
	logLevel     string
	logFormat    string
	noReload     bool
	pollInterval time.Duration
}

func parse(args []string) (*cli, error) {
	if len(args) == 0 {
		return nil, errors.New("no command given")
	}
	c := &cli{cmd: args[0], sys: map[string]string{}, logFormat: "text", pollInterval: 30 * time.Second}
	switch c.cmd {
	case "agent", "validate":
	case "version", "--version", "-v":
		c.cmd = "version"
		return c, nil
	case "help", "-h", "--help":
		c.cmd = "help"
		return c, nil
	default:
		return nil, fmt.Errorf("unknown command %q", c.cmd)
	}
	rest := args[1:]
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
		switch name {
		case "-f", "--conf-file", "-conf-file":
			c.file, err = next()
		case "-n", "--name", "-name":
			c.name, err = next()
		case "-c", "--conf", "-conf":
			_, err = next()
		case "--http", "-http":
			c.httpAddr, err = next()
		case "--log-level", "-log-level":
			c.logLevel, err = next()
		case "--log-format", "-log-format":
			c.logFormat, err = next()
		case "--no-reload-conf", "-no-reload-conf":
			c.noReload = true
		case "--poll-interval", "-poll-interval":
			var s string
			if s, err = next(); err == nil {
				var n int
				if n, err = strconv.Atoi(s); err != nil || n <= 0 {
					err = fmt.Errorf("--poll-interval %q: want a whole number of seconds above 0", s)
				}
				c.pollInterval = time.Duration(n) * time.Second
			}
		default:
			err = fmt.Errorf("unknown option %q", arg)
		}
		if err != nil {
			return nil, err
		}
	}
	if c.file == "" || c.name == "" {
		return nil, fmt.Errorf("%s needs -f FILE and -n NAME", c.cmd)
	}
	return c, nil
}

// monitoringAddr turns flume-ng's monitoring properties into an address.
func (c *cli) monitoringAddr() (string, error) {
	typ, ok := c.sys["flume.monitoring.type"]
	if !ok {
		return c.httpAddr, nil
	}
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
	if c.httpAddr != "" && c.httpAddr != ":"+port {
		return "", fmt.Errorf("both --http %s and -Dflume.monitoring.port=%s given; use one", c.httpAddr, port)
	}
	return ":" + port, nil
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

func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("sluice %s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, reload <-chan struct{}, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "bench" {
		return bench.Main(ctx, args[1:], stdout, stderr)
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
	case "version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "validate":
		if err := agent.Validate(c.file, c.name, c.sys); err != nil {
			printProblems(stdout, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: agent %s is valid\n", c.file, c.name)
		return 0
	}
	log, err := c.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	addr, err := c.monitoringAddr()
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	opts := agent.Options{File: c.file, Name: c.name, Sys: c.sys, Logger: log, HTTPAddr: addr}
	if !c.noReload {
		opts.PollInterval = c.pollInterval
	}
	a, err := agent.New(opts)
	if err != nil {
		printProblems(stderr, err)
		return 1
	}
	if err := a.Run(ctx, reload); err != nil {
		log.Error("agent failed", "err", err)
		return 1
	}
	return 0
}

func printProblems(w io.Writer, err error) {
	var probs *config.Problems
	if errors.As(err, &probs) {
		for _, p := range probs.Sorted() {
			fmt.Fprintln(w, p.String())
		}
		return
	}
	fmt.Fprintf(w, "sluice: %v\n", err)
}
