package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Config filters (Flume 1.9+) put secrets and generated values into a
// configuration without writing them in it:
//
//	a1.configfilters = f1
//	a1.configfilters.f1.type = env
//	a1.sinks.k1.kafka.producer.ssl.keystore.password = ${f1['KEYSTORE_PASSWORD']}
//
// A reference is ${NAME['key']}, ${NAME["key"]} or ${NAME[key]}, the key made
// of letters, digits, '-' and '_', as in Flume. sluice resolves references
// anywhere a value is allowed (Flume only in the values of sources,
// channels, sinks and sink groups). Types:
//
//	env       the environment variable named by the key
//	external  runs "command key" (command split on white space, as Flume
//	          does) and takes the first line of its output, trimmed; a
//	          non-zero exit, no output or more than filterTimeout is an
//	          error naming the filter and key. charset (UTF-8) is how the
//	          output is decoded: UTF-8, US-ASCII or ISO-8859-1.
//	hadoop    Flume's Hadoop credential store: refused (no Hadoop here).
//
// Every value a filter supplies is a secret (Value.Secret): problems never
// quote it, fingerprints keep only its hash, and everything the agent
// prints or serves masks it (Problems.Secrets feeds the agent's
// redact.Redactor: its log, /healthz, /metrics, /api/status, the tap, and
// validate's output).

// filterTimeout bounds how long an external filter's command may run for
// one key. Flume waits for ever; a secret helper that hangs should fail the
// start with a message instead.
var filterTimeout = 30 * time.Second

// filterTypes maps Flume's config filter aliases and class names (lower
// case) to sluice's.
var filterTypes = map[string]string{
	"env":      "env",
	"external": "external",
	"hadoop":   "hadoop",
	"org.apache.flume.configfilter.environmentvariableconfigfilter":   "env",
	"org.apache.flume.configfilter.externalprocessconfigfilter":       "external",
	"org.apache.flume.configfilter.hadoopcredentialstoreconfigfilter": "hadoop",
}

type filter struct {
	name, typ string
	broken    bool // its configuration has a problem, reported at its keys
	get       func(key string) (string, error)
}

// filterRef splits a config filter reference's inside, f1['key'], into the
// filter name and the key.
func filterRef(name string) (fname, key string, ok bool) {
	i := strings.IndexByte(name, '[')
	if i <= 0 || !strings.HasSuffix(name, "]") {
		return "", "", false
	}
	fname, key = name[:i], name[i+1:len(name)-1]
	if len(key) >= 2 && (key[0] == '\'' || key[0] == '"') && key[len(key)-1] == key[0] {
		key = key[1 : len(key)-1]
	}
	if key == "" || strings.ContainsFunc(key, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return "", "", false
	}
	return fname, key, true
}

// buildFilters reads the agent's configfilters list and each listed
// filter's keys (already substituted for ${env:}/${sys:}), and returns the
// filters by name.
func (l *loader) buildFilters(list Value, hasList bool, keys map[string]map[string]Value) map[string]*filter {
	out := map[string]*filter{}
	prefix := l.prefix + partConfigFilters
	var names []string
	if hasList {
		names = uniq(javaFields(list.Text))
	}
	listed := map[string]bool{}
	for _, name := range names {
		listed[name] = true
		kp := prefix + "." + name + "."
		vals := keys[name]
		f := &filter{name: name}
		out[name] = f
		tv, ok := vals["type"]
		if !ok {
			l.errorAt(list, kp+"type", "missing required property; set %stype to env or external", kp)
			f.broken = true
			continue
		}
		f.typ = filterTypes[strings.ToLower(tv.Text)]
		known := map[string]bool{"type": true}
		switch f.typ {
		case "env":
			env := l.lk.env
			f.get = func(key string) (string, error) {
				v, ok := env(key)
				if !ok {
					return "", fmt.Errorf("config filter %s (env): environment variable %s is not set", name, key)
				}
				return v, nil
			}
		case "external":
			known["command"], known["charset"] = true, true
			cv, ok := vals["command"]
			argv := javaFields(cv.Text)
			if !ok || len(argv) == 0 {
				l.errorAt(tv, kp+"command", "missing required property; set %scommand to the program that prints the value of the key it is given", kp)
				f.broken = true
				break
			}
			decode, ok := charsetDecoder(vals["charset"].Text)
			if !ok {
				l.errorAt(vals["charset"], kp+"charset", "charset %q is not supported; use UTF-8, US-ASCII or ISO-8859-1", vals["charset"].Text)
				f.broken = true
				break
			}
			if l.lk.Exec == nil {
				l.errorAt(tv, kp+"type", "external config filters cannot run here")
				f.broken = true
				break
			}
			f.get = externalFilter(name, argv, decode, l.lk.Exec)
		case "hadoop":
			l.errorAt(tv, kp+"type", "Flume type %s (Hadoop credential store config filter) is not provided by sluice; the alternatives are the env and external config filters", tv.Text)
			f.broken = true
			continue
		default:
			l.errorAt(tv, kp+"type", "unknown config filter type %q; use env or external (or their Flume class names)", tv.Text)
			f.broken = true
			continue
		}
		for _, k := range sortedKeys(vals) {
			if !known[k] {
				l.warnAt(vals[k], kp+k, "ignored: sluice does not read it")
			}
		}
		if f.get != nil {
			f.get = cached(f.get)
		}
	}
	for _, name := range sortedKeys(keys) {
		if listed[name] {
			continue
		}
		vals := keys[name]
		first := ""
		for _, k := range sortedKeys(vals) {
			if first == "" || vals[k].Line < vals[first].Line {
				first = k
			}
		}
		l.warnAt(vals[first], prefix+"."+name+"."+first, "ignored: config filter %s is not listed in %s", name, prefix)
	}
	return out
}

// cached runs get once per key: a secret used by several properties is
// fetched once per load.
func cached(get func(string) (string, error)) func(string) (string, error) {
	type result struct {
		v   string
		err error
	}
	seen := map[string]result{}
	return func(key string) (string, error) {
		if r, ok := seen[key]; ok {
			return r.v, r.err
		}
		v, err := get(key)
		seen[key] = result{v, err}
		return v, err
	}
}

func externalFilter(name string, argv []string, decode func([]byte) string,
	run func(context.Context, []string) ([]byte, []byte, error)) func(string) (string, error) {
	return func(key string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), filterTimeout)
		defer cancel()
		cmd := append(append([]string(nil), argv...), key)
		stdout, stderr, err := run(ctx, cmd)
		fail := func(format string, args ...any) error {
			return fmt.Errorf("config filter %s (external) failed for key %s: %s", name, key, fmt.Sprintf(format, args...))
		}
		if ctx.Err() != nil {
			return "", fail("%s did not finish within %v", argv[0], filterTimeout)
		}
		if err != nil {
			// stderr is the helper's own complaint; its first line says
			// why (it is not the value, which goes to stdout).
			why := firstLine(decode(stderr))
			if len(why) > 200 {
				why = why[:200] + "..."
			}
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee) && why != "":
				return "", fail("%s exited with status %d: %s", argv[0], ee.ExitCode(), why)
			case errors.As(err, &ee):
				return "", fail("%s exited with status %d", argv[0], ee.ExitCode())
			}
			return "", fail("%v", err)
		}
		v := strings.TrimSpace(firstLine(decode(stdout)))
		if v == "" {
			return "", fail("%s printed nothing", argv[0])
		}
		return v, nil
	}
}

func firstLine(s string) string {
	s = strings.TrimLeft(s, "\r\n")
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// charsetDecoder returns the decoder of an external filter's charset
// ("" is Flume's default, UTF-8).
func charsetDecoder(name string) (func([]byte) string, bool) {
	switch strings.ToUpper(strings.TrimSpace(name)) {
	case "", "UTF-8", "UTF8", "US-ASCII", "ASCII":
		return func(b []byte) string { return strings.ToValidUTF8(string(b), string(utf8.RuneError)) }, true
	case "ISO-8859-1", "ISO8859-1", "LATIN1":
		return func(b []byte) string {
			r := make([]rune, len(b))
			for i, c := range b {
				r[i] = rune(c)
			}
			return string(r)
		}, true
	}
	return nil, false
}

// RunCommand runs argv without a shell, as Flume's external config filter
// does, and returns what it wrote to stdout and stderr (each up to 1 MiB).
func RunCommand(ctx context.Context, argv []string) (stdout, stderr []byte, err error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// Its own process group, so that a helper that times out is killed
	// with whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errOut limitedBuffer
	out.max, errOut.max = 1<<20, 1<<20
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	return out.Bytes(), errOut.Bytes(), err
}

// limitedBuffer keeps the first max bytes written to it and discards the
// rest, so a runaway helper cannot fill memory.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
