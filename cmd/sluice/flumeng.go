package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// flumeUsage is `flume-ng help`: Flume's launcher's commands and options,
// with what sluice does with each.
const flumeUsage = `Usage: flume-ng <command> [options]...

sluice behaves as Apache Flume's launcher when called as flume-ng (or as
sluice flume-ng); it runs the agent itself, with no JVM.

commands:
  help                      display this help text
  agent                     run a Flume agent (sluice agent)
  avro-client               send a file or standard input, line by line, to an avro source
  version                   show the version

global options:
  --conf,-c <conf>          the configuration directory: its flume-env.sh is read (JAVA_OPTS'
                            -D properties and -Xmx apply; exported variables reach the agent);
                            a log4j configuration in it is not read
  --classpath,-C <cp>       ignored (noted once): sluice loads no Java classes
  --dryrun,-d               print the sluice command line instead of running it
  --plugins-path <dirs>     ignored (noted once): sluice's components are built in
  -Dproperty=value          sets a system property, read by ${sys:property} and by:
                              flume.root.logger=LEVEL,console|LOGFILE (LOGFILE writes to
                                ${flume.log.dir:-./logs}/${flume.log.file:-flume.log})
                              flume.monitoring.type=http, flume.monitoring.port=P
                              javax.net.ssl.trustStore, trustStoreType, trustStorePassword
  -Xmx<size>                the Go heap's soft limit (as GOMEMLIMIT; an explicit GOMEMLIMIT wins)
  -X..., -agentlib..., -agentpath..., -javaagent...
                            other JVM options: ignored (noted once)

agent options:
  --name,-n <name>          the name of this agent (required)
  --conf-file,-f <file>     a configuration file (required unless --conf-uri)
  --conf-uri,-u <uri>       a configuration URI (http, https or file)
  --conf-user,-user <user>  the user for the configuration URI
  --conf-password,-pwd <pw> its password
  --no-reload-conf          do not reload the configuration when it changes
  (and every option of sluice agent: sluice agent --help)
  --zkConnString,-z, --zkBasePath,-p, --conf-provider,-prov: refused with the reason

avro-client options:
  --host,-H <host>          hostname to which events will be sent
  --port,-p <port>          port of the avro source
  --rpcProps,-P <file>      RPC client properties (hosts, hosts.<h>, batch-size, connect-timeout,
                            request-timeout, compression-type, compression-level, ssl, truststore...)
  --filename,-F <file>      text file to send, one event per line (default: standard input)
  --dirname <dir>           send each file of the directory, then rename it to FILE.COMPLETED
  --headerFile,-R <file>    headers for every event, as key=value lines (a properties file)
  --batch-size <n>          events per call (default 5, Flume's; sluice's addition)
  Either --rpcProps or both --host and --port must be given. The exit status is 0 when
  every line was acknowledged, 1 otherwise (Flume's client exits 0 either way).
`

// flumeLaunch is Flume's launcher's command line, read as bin/flume-ng reads
// it: its own options, the JVM's, and the rest for the command.
type flumeLaunch struct {
	cmd         string
	confDir     string
	classpath   string
	pluginsPath string
	dryrun      bool
	sys         [][2]string // -D properties, in order (a later one wins)
	jvm         []string    // -X..., -agentlib..., -javaagent...
	rest        []string    // the command's own arguments
}

// parseFlumeLaunch reads args (after flume-ng) the way Flume's launcher
// does: global options anywhere, everything else passed to the command.
func parseFlumeLaunch(args []string) (*flumeLaunch, error) {
	if len(args) == 0 {
		return nil, errors.New("unknown or unspecified command ''")
	}
	l := &flumeLaunch{cmd: args[0]}
	switch l.cmd {
	case "help", "agent", "node", "avro-client", "version", "tool":
	default:
		return nil, fmt.Errorf("unknown or unspecified command '%s'", l.cmd)
	}
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		arg := rest[i]
		value := func() (string, error) {
			if i+1 >= len(rest) || rest[i+1] == "" {
				return "", fmt.Errorf("option %s requires an argument", arg)
			}
			i++
			return rest[i], nil
		}
		var err error
		switch {
		case arg == "--conf" || arg == "-c":
			l.confDir, err = value()
		case arg == "--classpath" || arg == "-C":
			l.classpath, err = value()
		case arg == "--dryrun" || arg == "-d":
			l.dryrun = true
		case arg == "--plugins-path":
			l.pluginsPath, err = value()
		case strings.HasPrefix(arg, "-D") && len(arg) > 2:
			k, v, _ := strings.Cut(arg[2:], "=")
			l.sys = append(l.sys, [2]string{k, v})
		case strings.HasPrefix(arg, "-X"), strings.HasPrefix(arg, "-agentlib"),
			strings.HasPrefix(arg, "-agentpath"), strings.HasPrefix(arg, "-javaagent"):
			l.jvm = append(l.jvm, arg)
		default:
			l.rest = append(l.rest, arg)
		}
		if err != nil {
			return nil, err
		}
	}
	return l, nil
}

// flumeEnv is what the conf directory's flume-env.sh set.
type flumeEnv struct {
	javaOpts  []string // JAVA_OPTS then FLUME_JAVA_OPTS, split as the shell splits them
	classpath string   // FLUME_CLASSPATH
	exported  map[string]string
}

// readFlumeEnv sources flume-env.sh with bash, as Flume's launcher does, and
// returns what it set. JAVA_OPTS starts empty, not at the launcher's
// -Xmx20m: a limit nobody chose is not applied.
func readFlumeEnv(path string, stderr io.Writer) (*flumeEnv, error) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("%s not read: it is a bash script, and bash is not installed", path)
	}
	// The script's own output goes to stderr, as it would before Flume's
	// JVM started; then the three variables Flume reads, and the exported
	// environment, NUL-separated.
	const script = `. "$1" >&2 </dev/null || exit
printf '%s\0' "$JAVA_OPTS" "$FLUME_JAVA_OPTS" "$FLUME_CLASSPATH"
exec env -0`
	cmd := exec.Command(bash, "-c", script, "flume-env.sh", path)
	cmd.Env = append(os.Environ(), "JAVA_OPTS=", "FLUME_JAVA_OPTS=", "FLUME_CLASSPATH=")
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: sourcing it with bash failed: %w", path, err)
	}
	fields := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(fields) < 3 {
		return nil, fmt.Errorf("%s: sourcing it printed no environment", path)
	}
	env := &flumeEnv{javaOpts: append(strings.Fields(fields[0]), strings.Fields(fields[1])...),
		classpath: fields[2], exported: map[string]string{}}
	before := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		before[k] = v
	}
	for _, kv := range fields[3:] {
		k, v, ok := strings.Cut(kv, "=")
		switch k {
		case "JAVA_OPTS", "FLUME_JAVA_OPTS", "FLUME_CLASSPATH", "_", "SHLVL", "PWD", "OLDPWD":
			continue
		}
		if old, had := before[k]; ok && (!had || old != v) {
			env.exported[k] = v
		}
	}
	return env, nil
}

// javaSize parses a JVM memory size (-Xmx2g, -Xmx512m, -Xmx1048576).
func javaSize(s string) (int64, bool) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return 0, false
	}
	return v * mult, true
}

// flumePlan is what a flume-ng agent command line comes to in sluice.
type flumePlan struct {
	args     []string // sluice's: agent ...
	memLimit int64    // from -Xmx, 0: none
	logFile  string   // Flume's LOGFILE appender's file, or ""
	env      map[string]string
	notes    []string // one line for each thing of Flume's launcher not honoured
}

// planFlumeAgent turns the launcher's options and flume-env.sh into the
// sluice agent command line and the notes of what does not apply.
func planFlumeAgent(l *flumeLaunch, env *flumeEnv) *flumePlan {
	p := &flumePlan{env: map[string]string{}}
	note := func(format string, a ...any) { p.notes = append(p.notes, fmt.Sprintf(format, a...)) }
	sys := map[string]string{}
	var order []string
	setSys := func(k, v string) {
		if _, ok := sys[k]; !ok {
			order = append(order, k)
		}
		sys[k] = v
	}
	var jvm []string
	if env != nil {
		// Java applies JAVA_OPTS first and the command line's -D after, so
		// the command line wins.
		for _, o := range env.javaOpts {
			if strings.HasPrefix(o, "-D") && len(o) > 2 {
				k, v, _ := strings.Cut(o[2:], "=")
				setSys(k, v)
			} else {
				jvm = append(jvm, o)
			}
		}
		if env.classpath != "" {
			note("FLUME_CLASSPATH from flume-env.sh is ignored: sluice loads no Java classes; its components are built in")
		}
		for k, v := range env.exported {
			p.env[k] = v
		}
	}
	for _, kv := range l.sys {
		setSys(kv[0], kv[1])
	}
	for _, k := range order {
		if strings.HasPrefix(k, "com.sun.management.") {
			note("-D%s is ignored: sluice serves no JMX; its metrics are at -Dflume.monitoring.type=http (Flume JSON and Prometheus)", k)
		}
	}
	jvm = append(jvm, l.jvm...)
	for _, o := range jvm {
		if size, ok := strings.CutPrefix(o, "-Xmx"); ok {
			if n, ok := javaSize(size); ok {
				p.memLimit = n
				continue
			}
		}
		note("JVM option %s is ignored: sluice runs no JVM", o)
	}
	if p.memLimit > 0 {
		if g := os.Getenv("GOMEMLIMIT"); g != "" {
			note("-Xmx is not applied: GOMEMLIMIT=%s is set and wins", g)
			p.memLimit = 0
		} else {
			note("-Xmx sets the Go heap's soft limit to %d MiB (as GOMEMLIMIT would); memory is otherwise bounded by the channels' capacities", p.memLimit>>20)
		}
	}
	if l.classpath != "" {
		note("--classpath %s is ignored: sluice loads no Java classes; its components are built in", l.classpath)
	}
	if l.pluginsPath != "" {
		note("--plugins-path %s is ignored: sluice loads no plugins; its components are built in", l.pluginsPath)
	}
	if l.confDir != "" {
		for _, f := range []string{"log4j2.xml", "log4j.properties", "log4j2.properties"} {
			if _, err := os.Stat(filepath.Join(l.confDir, f)); err == nil {
				note("%s is not read: sluice logs at -Dflume.root.logger's level (or --log-level) in text or --log-format json", filepath.Join(l.confDir, f))
				break
			}
		}
	}
	if v, ok := sys["flume.root.logger"]; ok {
		_, appender, _ := strings.Cut(v, ",") // sluice agent reads the level itself
		switch strings.ToLower(strings.TrimSpace(appender)) {
		case "", "console":
		case "logfile":
			dir, name := sys["flume.log.dir"], sys["flume.log.file"]
			if dir == "" {
				dir = "./logs"
			}
			if name == "" {
				name = "flume.log"
			}
			p.logFile = filepath.Join(dir, name)
			note("logging to %s (Flume's LOGFILE appender); sluice does not roll it: rotate it with logrotate's copytruncate", p.logFile)
		default:
			note("-Dflume.root.logger appender %q is not known to sluice: logging to standard error", appender)
		}
	}
	p.args = append([]string{"agent"}, l.rest...)
	for _, k := range order {
		p.args = append(p.args, "-D"+k+"="+sys[k])
	}
	return p
}

// flumeMain is `flume-ng ARGS` (sluice called by that name) and `sluice
// flume-ng ARGS`.
func flumeMain(ctx context.Context, args []string, reload, abort <-chan struct{}, stdout, stderr io.Writer) int {
	l, err := parseFlumeLaunch(args)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n\n%s", err, flumeUsage)
		return 1
	}
	note := func(msg string) { fmt.Fprintf(stderr, "flume-ng: %s\n", msg) }
	switch l.cmd {
	case "help":
		fmt.Fprint(stdout, flumeUsage)
		return 0
	case "version":
		b := readBuildInfo()
		fmt.Fprintf(stdout, "sluice %s, a drop-in for Apache Flume 1.11 (no JVM)\nRevision: %s\nCompiled on %s with %s for %s\n",
			b.Version, b.Commit, b.Date, b.GoVersion, b.Platform)
		return 0
	case "tool":
		fmt.Fprintln(stderr, "Error: flume-ng tool (the file channel integrity tool) has no sluice equivalent: sluice's file channel checks every record's CRC when it starts and truncates at the first bad one (docs/format/wal.md)")
		return 1
	case "node":
		note(`the "node" command is deprecated; use "agent"`)
	}
	var env *flumeEnv
	if l.cmd == "avro-client" {
		if path := filepath.Join(l.confDir, "flume-env.sh"); l.confDir != "" && fileExists(path) {
			note(path + " is not read by avro-client: it sets the JVM's options, and avro-client runs no JVM")
		}
	} else if l.confDir == "" {
		note("no configuration directory set (--conf DIR): no flume-env.sh read")
	} else if path := filepath.Join(l.confDir, "flume-env.sh"); fileExists(path) {
		note("reading " + path)
		if env, err = readFlumeEnv(path, stderr); err != nil {
			note(err.Error())
		}
	}
	if l.cmd == "avro-client" {
		sys := map[string]string{}
		for _, kv := range l.sys {
			sys[kv[0]] = kv[1]
			if !strings.HasPrefix(kv[0], "javax.net.ssl.trustStore") && kv[0] != "flume.root.logger" {
				note("-D" + kv[0] + " is ignored by avro-client")
			}
		}
		return avroClientMain(ctx, l.rest, sys, stdout, stderr)
	}
	p := planFlumeAgent(l, env)
	for _, n := range p.notes {
		note(n)
	}
	if l.dryrun {
		note("dry run: the command that would run")
		var line []string
		if p.memLimit > 0 {
			line = append(line, "GOMEMLIMIT="+strconv.FormatInt(p.memLimit, 10))
		}
		exe, err := os.Executable()
		if err != nil {
			exe = "sluice"
		}
		for _, a := range append([]string{exe}, p.args...) {
			line = append(line, shellQuote(a))
		}
		fmt.Fprintln(stdout, strings.Join(line, " "))
		return 0
	}
	for k, v := range p.env {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintf(stderr, "Error: flume-env.sh's %s: %v\n", k, err)
			return exitFailed
		}
	}
	if p.memLimit > 0 {
		debug.SetMemoryLimit(p.memLimit)
	}
	logTo := stderr
	if p.logFile != "" {
		if err := os.MkdirAll(filepath.Dir(p.logFile), 0o755); err != nil {
			fmt.Fprintf(stderr, "Error: log file: %v\n", err)
			return exitFailed
		}
		f, err := os.OpenFile(p.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "Error: log file: %v\n", err)
			return exitFailed
		}
		defer f.Close()
		logTo = f
	}
	return runSignals(ctx, p.args, reload, abort, stdout, logTo)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
	}) {
		return s
	}
	var b bytes.Buffer
	b.WriteByte('\'')
	b.WriteString(strings.ReplaceAll(s, "'", `'\''`))
	b.WriteByte('\'')
	return b.String()
}
