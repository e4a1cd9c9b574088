package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFilterRef(t *testing.T) {
	f := func(in, name, key string, ok bool) {
		t.Helper()
		n, k, o := filterRef(in)
		if n != name || k != key || o != ok {
			t.Errorf("filterRef(%q) = %q, %q, %v; want %q, %q, %v", in, n, k, o, name, key, ok)
		}
	}
	f(`f1['DB_PASSWORD']`, "f1", "DB_PASSWORD", true)
	f(`f1["db-pass_2"]`, "f1", "db-pass_2", true)
	f(`f1[key]`, "f1", "key", true)
	f(`f1['a b']`, "", "", false)
	f(`f1['a"]`, "", "", false)
	f(`f1[]`, "", "", false)
	f(`[key]`, "", "", false)
	f(`env:X`, "", "", false)
}

func filterLookup(env map[string]string) Lookup {
	return Lookup{
		Env:  func(n string) (string, bool) { v, ok := env[n]; return v, ok },
		Exec: RunCommand,
	}
}

const filterBase = "a1.sources = r1\na1.channels = c1\na1.sinks = k1\n" +
	"a1.sources.r1.type = seq\na1.sources.r1.channels = c1\na1.channels.c1.type = memory\n" +
	"a1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n"

func helper(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("testdata/filters/secret-helper.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFilters resolves env and external filter references anywhere a
// value is allowed (inside a longer value, in a selector, in a list), marks
// what they supply secret, and keeps it out of every problem.
func TestConfigFilters(t *testing.T) {
	conf := filterBase + "a1.configfilters = f1 f2\n" +
		"a1.configfilters.f1.type = env\n" +
		"a1.configfilters.f2.type = org.apache.flume.configfilter.ExternalProcessConfigFilter\n" +
		"a1.configfilters.f2.command = " + helper(t) + "\n" +
		"a1.sources.r1.password = ${f2['db_password']}\n" +
		"a1.sources.r1.url = jdbc://u:${f1[\"DB_USER_PW\"]}@db/x\n" +
		"a1.sinks.k1.batchSize = ${f1[BATCH]}\n" +
		"a1.sinks.k1.other = ${f2['db_password']}\n" + // run once, cached
		"a1.channels.c1.capacity = ${f1['DB_USER_PW']}\n"
	a, err := LoadReader("f.properties", strings.NewReader(conf), "a1", filterLookup(map[string]string{"DB_USER_PW": "pw-from-env-9", "BATCH": "50"}))
	if err != nil {
		t.Fatal(err)
	}
	r1 := a.Sources[0].Props
	if got := r1.String("password", ""); got != "s3cr3t-from-helper" {
		t.Errorf("external value %q", got)
	}
	if got := r1.String("url", ""); got != "jdbc://u:pw-from-env-9@db/x" {
		t.Errorf("env value inside a value: %q", got)
	}
	if !r1.IsSecret("password") || !r1.IsSecret("url") || a.Sinks[0].Props.Int("batchSize", 0) != 50 {
		t.Errorf("secret flags or batchSize wrong")
	}
	// A secret that is not a number is reported without being quoted.
	c1 := a.Channels[0].Props
	c1.Int("capacity", 0)
	fp := a.Channels[0].Fingerprint() + a.Sources[0].Fingerprint()
	out := a.Problems.Error()
	if !strings.Contains(out, "f.properties:17: a1.channels.c1.capacity: the value read through a config filter is not a whole number") {
		t.Errorf("problems:\n%s", out)
	}
	for _, secret := range []string{"pw-from-env-9", "s3cr3t-from-helper"} {
		if strings.Contains(out, secret) || strings.Contains(fp, secret) {
			t.Errorf("secret %q printed:\n%s\n%s", secret, out, fp)
		}
	}
	if s := a.Secrets(); len(s) != 3 {
		t.Errorf("secrets %q", s)
	}
	// Messages a component writes itself, quoting a value, are redacted too.
	c1.Errorf("capacity", "%q is odd", "jdbc://u:pw-from-env-9@db/x")
	if out := a.Problems.Error(); strings.Contains(out, "pw-from-env-9") || !strings.Contains(out, `"jdbc://u:<secret>@db/x" is odd`) {
		t.Errorf("not redacted:\n%s", out)
	}
}

// TestConfigFilterProblems: each failure names the filter and the key, is
// one line, and never prints a secret; hadoop is refused in one line.
func TestConfigFilterProblems(t *testing.T) {
	f := func(name, conf string, want ...string) {
		t.Helper()
		a, err := LoadReader("f.properties", strings.NewReader(filterBase+conf), "a1", filterLookup(map[string]string{"SET": "v4lue"}))
		if err == nil {
			t.Errorf("%s: no error", name)
			return
		}
		var got []string
		for _, p := range a.Problems.Sorted() {
			got = append(got, p.String())
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	ext := "a1.configfilters = f1\na1.configfilters.f1.type = external\na1.configfilters.f1.command = " + helper(t) + "\n"
	f("unset env", "a1.configfilters = f1\na1.configfilters.f1.type = env\na1.sources.r1.totalEvents = ${f1['NOPE']}\n",
		"f.properties:11: a1.sources.r1.totalEvents: config filter f1 (env): environment variable NOPE is not set")
	f("failing command", ext+"a1.sources.r1.totalEvents = ${f1['nope']}\n",
		"f.properties:12: a1.sources.r1.totalEvents: config filter f1 (external) failed for key nope: "+helper(t)+" exited with status 3: no secret named nope")
	f("no output", ext+"a1.sources.r1.totalEvents = ${f1['empty']}\n",
		"f.properties:12: a1.sources.r1.totalEvents: config filter f1 (external) failed for key empty: "+helper(t)+" printed nothing")
	f("missing command", "a1.configfilters = f1\na1.configfilters.f1.type = external\na1.sources.r1.totalEvents = ${f1['x']}\n",
		"f.properties:10: a1.configfilters.f1.command: missing required property; set a1.configfilters.f1.command to the program that prints the value of the key it is given")
	f("no such program", "a1.configfilters = f1\na1.configfilters.f1.type = external\na1.configfilters.f1.command = /nonexistent/helper --flag\na1.sources.r1.totalEvents = ${f1['x']}\n",
		"f.properties:12: a1.sources.r1.totalEvents: config filter f1 (external) failed for key x: fork/exec /nonexistent/helper: no such file or directory")
	f("hadoop", "a1.configfilters = f1\na1.configfilters.f1.type = hadoop\na1.configfilters.f1.credential.provider.path = jceks://file/x.jceks\na1.sources.r1.totalEvents = ${f1['x']}\n",
		"f.properties:10: a1.configfilters.f1.type: Flume type hadoop (Hadoop credential store config filter) is not provided by sluice; the alternatives are the env and external config filters")
	f("undefined filter", "a1.sources.r1.totalEvents = ${f9['x']}\n",
		"f.properties:9: a1.sources.r1.totalEvents: ${f9['x']}: config filter f9 is not defined; list it in a1.configfilters and set its type")
	f("unknown type", "a1.configfilters = f1\na1.configfilters.f1.type = vault\na1.sources.r1.totalEvents = ${f1['x']}\n",
		`f.properties:10: a1.configfilters.f1.type: unknown config filter type "vault"; use env or external (or their Flume class names)`)
	f("bad charset", ext+"a1.configfilters.f1.charset = EBCDIC\na1.sources.r1.totalEvents = ${f1['x']}\n",
		`f.properties:12: a1.configfilters.f1.charset: charset "EBCDIC" is not supported; use UTF-8, US-ASCII or ISO-8859-1`)
	// A secret in a value that makes a component fail is not quoted.
	f("secret in a bad value", "a1.configfilters = f1\na1.configfilters.f1.type = env\na1.sinks.k1.channel = ${f1['SET']}\n",
		"f.properties:8: a1.sinks.k1.channel: ignored: set again on line 11, and the later value wins, as in Flume",
		"f.properties:11: a1.sinks.k1.channel: channel <secret> is not defined; add it to a1.channels")
}

func TestExternalFilterDetails(t *testing.T) {
	conf := filterBase + "a1.configfilters = f1\na1.configfilters.f1.type = external\na1.configfilters.f1.charset = ISO-8859-1\n" +
		"a1.configfilters.f1.command = " + helper(t) + "\na1.configfilters.f1.timeout = 5\n" +
		"a1.sources.r1.x = ${f1['latin1']}\n"
	a, err := LoadReader("f.properties", strings.NewReader(conf), "a1", filterLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Sources[0].Props.String("x", ""); got != "café" {
		t.Errorf("ISO-8859-1 output decoded as %q", got)
	}
	// A filter key sluice does not read is a warning, as anywhere else.
	if out := a.Problems.Error(); out != "f.properties:13: a1.configfilters.f1.timeout: ignored: sluice does not read it" {
		t.Errorf("problems:\n%s", out)
	}

	// A helper that hangs fails the load after the timeout, naming the key.
	old := filterTimeout
	filterTimeout = 300 * time.Millisecond
	defer func() { filterTimeout = old }()
	start := time.Now()
	_, err = LoadReader("f.properties", strings.NewReader(strings.Replace(conf, "latin1", "slow", 1)), "a1", filterLookup(nil))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("failed for key slow: %s did not finish within 300ms", helper(t))) || time.Since(start) > 3*time.Second {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}

	// Without Exec (a caller that does not trust the config to run
	// programs, such as the fuzz target), external filters are refused.
	_, err = LoadReader("f.properties", strings.NewReader(conf), "a1", Lookup{})
	if err == nil || !strings.Contains(err.Error(), "a1.configfilters.f1.type: external config filters cannot run here") {
		t.Fatalf("no Exec: %v", err)
	}
}

// TestSecretFingerprint: the fingerprint changes when a secret changes
// (a rotated password restarts the component on reload) and holds no
// secret.
func TestSecretFingerprint(t *testing.T) {
	conf := filterBase + "a1.configfilters = f1\na1.configfilters.f1.type = env\na1.sinks.k1.password = ${f1['PW']}\n"
	fp := func(pw string) string {
		a, err := LoadReader("f", strings.NewReader(conf), "a1", filterLookup(map[string]string{"PW": pw}))
		if err != nil {
			t.Fatal(err)
		}
		return a.Sinks[0].Fingerprint()
	}
	one, two := fp("first-password"), fp("second-password")
	if one == two || strings.Contains(one, "first-password") || strings.Contains(two, "second-password") {
		t.Fatalf("fingerprints %q, %q", one, two)
	}
}

// TestURLPasswordsAreSecrets: the password of a URL written with user
// information is a secret wherever the URL is written, though no filter
// read it: problems mask it.
func TestURLPasswordsAreSecrets(t *testing.T) {
	conf := filterBase + "a1.sinks.k1.endpoint = http://bob:pa55-w0rd@collector:8080/x\n"
	a, err := LoadReader("f.properties", strings.NewReader(conf), "a1", filterLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Secrets(); len(s) != 1 || s[0] != "pa55-w0rd" {
		t.Errorf("secrets %q", s)
	}
	a.Sinks[0].Props.Errorf("endpoint", "%q refused", a.Sinks[0].Props.String("endpoint", ""))
	if out := a.Problems.Error(); strings.Contains(out, "pa55-w0rd") || !strings.Contains(out, `"http://bob:<secret>@collector:8080/x" refused`) {
		t.Errorf("problems:\n%s", out)
	}
}
