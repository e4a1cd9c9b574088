package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Secrets of TestSecretsNeverLeaveTheProcess: one read through an env
// config filter, two through an external one, one in a URL's user
// information, and the command line's.
const (
	leakToken   = "tok-Ingest-7f3a9c41" // env filter: the http sink's query, a static header
	leakTopic   = "tenant-b71e-events"  // external filter: a Kafka topic, so a metric label
	leakBind    = "127.0.0.2"           // external filter: a netcat source's bind address
	leakURLPass = "uRlPa55-e2d4"        // user:password@ of a --conf-uri
	leakConfPW  = "c0nfPa55-9b1f"       // --conf-password
)

// secretsConf is the agent of TestSecretsNeverLeaveTheProcess: a seq source
// whose events carry the token as a header, into an http sink whose
// endpoint carries it in its query and whose downstream is down; a Kafka
// source whose topic is secret (its lag is a metric labelled by topic);
// and, with busyPort > 0, a netcat source bound to a secret address whose
// port is taken.
func secretsConf(helper, deadEndpoint, brokers string, busyPort int) string {
	conf := `a1.sources = r1 rk` + map[bool]string{true: " r2", false: ""}[busyPort > 0] + `
a1.channels = c1 ck
a1.sinks = k1 kk
a1.configfilters = f1 f2
a1.configfilters.f1.type = env
a1.configfilters.f2.type = external
a1.configfilters.f2.command = ` + helper + `
a1.sources.r1.type = seq
a1.sources.r1.totalEvents = 20
a1.sources.r1.channels = c1
a1.sources.r1.interceptors = i1
a1.sources.r1.interceptors.i1.type = static
a1.sources.r1.interceptors.i1.key = auth
a1.sources.r1.interceptors.i1.value = ${f1['SLUICE_TEST_INGEST_TOKEN']}
a1.channels.c1.type = memory
a1.sinks.k1.type = http
a1.sinks.k1.channel = c1
a1.sinks.k1.endpoint = ` + deadEndpoint + `/ingest?token=${f1['SLUICE_TEST_INGEST_TOKEN']}
a1.sinks.k1.healthGraceMillis = 200
a1.sources.rk.type = org.apache.flume.source.kafka.KafkaSource
a1.sources.rk.kafka.bootstrap.servers = ` + brokers + `
a1.sources.rk.kafka.topics = ${f2['topic']}
a1.sources.rk.batchSize = 100
a1.sources.rk.kafka.consumer.auto.offset.reset = earliest
a1.sources.rk.channels = ck
a1.channels.ck.type = memory
a1.sinks.kk.type = null
a1.sinks.kk.channel = ck
`
	if busyPort > 0 {
		conf += fmt.Sprintf(`a1.sources.r2.type = netcat
a1.sources.r2.bind = ${f2['bind']}
a1.sources.r2.port = %d
a1.sources.r2.channels = c1
`, busyPort)
	}
	return conf
}

// TestSecretsNeverLeaveTheProcess runs the real binary with secrets read
// through config filters into the places components quote them: an http
// sink's endpoint (its downstream down, so the error quoting the URL is the
// health reason), a static header (so the tap shows it), a Kafka topic (a
// Prometheus label), and, after a reload, a netcat bind address whose port
// is taken (the reason of a source that failed to start). Every output is
// searched: the log, /healthz, /healthz?format=json, /api/status (what the
// status page and sluice top show), /metrics, /metrics/prometheus, sluice
// tap, the error lines of a start that fails, and validate's output with a
// --conf-uri carrying a password and --conf-password. No secret appears;
// each place that quotes one shows <secret>.
func TestSecretsNeverLeaveTheProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := testutil.AgentBinary(t)
	dir := t.TempDir()
	helper := filepath.Join(dir, "vault-helper.sh")
	script := "#!/bin/sh\ncase \"$1\" in\n  topic) echo " + leakTopic + " ;;\n  bind) echo " + leakBind + " ;;\n  *) exit 2 ;;\nesac\n"
	if err := os.WriteFile(helper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kafka := kafkatest.New(t, 1, 1, leakTopic)
	kafkatest.Produce(t, kafka.Addrs, &kgo.Record{Topic: leakTopic, Value: []byte("one")})
	dead := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)) // nothing listens
	busy, err := net.Listen("tcp", leakBind+":0")
	if err != nil {
		t.Skipf("cannot listen on %s (needed for the busy bind): %v", leakBind, err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	file := filepath.Join(dir, "a.properties")
	if err := os.WriteFile(file, []byte(secretsConf(helper, dead, kafka.Brokers(), 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "SLUICE_TEST_INGEST_TOKEN="+leakToken)
	port := testutil.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := testutil.AgentCommand(bin, file, "--http", addr, "--allow-tap", "--shutdown-timeout", "0.5")
	cmd.Env = env
	p := testutil.RunAgent(t, cmd)
	stderr := p.Log

	outputs := map[string]string{} // what each place showed, by name
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what, path, substr string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, body := get(path)
			if strings.Contains(body, substr) {
				return body
			}
			if !p.Running() || time.Now().After(deadline) {
				t.Fatalf("%s: %s never showed %q; last:\n%s\nlog:\n%s", what, path, substr, body, stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The sink's failure is its health reason, quoting the endpoint; the
	// Kafka source's lag is labelled with its topic.
	outputs["/healthz"] = waitFor("sink down", "/healthz", "sink k1: cannot deliver")
	outputs["/metrics/prometheus"] = waitFor("kafka lag", "/metrics/prometheus", "sluice_kafka_consumer_lag{")
	_, outputs["/healthz?format=json"] = get("/healthz?format=json")
	_, outputs["/api/status"] = get("/api/status")
	_, outputs["/metrics"] = get("/metrics")
	tap := exec.Command(bin, "tap", "c1", "--http", addr, "--limit", "1", "--format", "json")
	tapOut, err := tap.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice tap: %v\n%s", err, tapOut)
	}
	outputs["sluice tap"] = string(tapOut)

	// A reload adds a source bound to the secret address, whose port is
	// taken: it is retried, and its failure is its health reason.
	if err := os.WriteFile(file, []byte(secretsConf(helper, dead, kafka.Brokers(), busyPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	outputs["/healthz after reload"] = waitFor("busy bind", "/healthz", "source r2: not running: failed to start")
	_, outputs["/healthz?format=json after reload"] = get("/healthz?format=json")
	_, outputs["/api/status after reload"] = get("/api/status")
	p.Signal(syscall.SIGTERM)
	p.Exit(30 * time.Second) // whatever the code: the sink is down and the shutdown deadline short
	outputs["log"] = stderr.String()

	// A start that fails (the busy bind) exits 1 with the error.
	failing := exec.Command(bin, "agent", "-f", file, "-n", "a1", "--no-reload-conf", "--shutdown-timeout", "0.5")
	failing.Env = env
	failOut, err := failing.CombinedOutput()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
		t.Fatalf("a start on a busy port: %v, want exit 1\n%s", err, failOut)
	}
	outputs["failed start"] = string(failOut)

	// validate reads the configuration from a URI with a password in it,
	// and authenticates with --conf-user and --conf-password.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != leakConfPW {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		conf := secretsConf(helper, dead, kafka.Brokers(), 0)
		if strings.HasSuffix(r.URL.Path, "/bad.properties") {
			conf += "a1.channels.ck.capacity = " + leakConfPW + "\n" // a problem quoting it
		}
		_, _ = io.WriteString(w, conf)
	}))
	defer srv.Close()
	uri := strings.Replace(srv.URL, "http://", "http://bob:"+leakURLPass+"@", 1) + "/agent.properties"
	val := exec.Command(bin, "validate", "--conf-uri", uri, "--conf-user", "alice", "--conf-password", leakConfPW, "-n", "a1")
	val.Env = env
	valOut, err := val.CombinedOutput()
	if err != nil || !strings.Contains(string(valOut), "agent a1 is valid") {
		t.Fatalf("validate: %v\n%s", err, valOut)
	}
	outputs["validate"] = string(valOut)
	bad := exec.Command(bin, "validate", "--conf-uri", strings.Replace(uri, "agent.properties", "bad.properties", 1),
		"--conf-user", "alice", "--conf-password", leakConfPW, "-n", "a1")
	bad.Env = env
	badOut, err := bad.CombinedOutput()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
		t.Fatalf("validate of a bad value: %v, want exit 1\n%s", err, badOut)
	}
	outputs["validate, a bad value"] = string(badOut)

	names := slices.Sorted(maps.Keys(outputs))
	for _, name := range names {
		out := outputs[name]
		for _, secret := range []string{leakToken, leakTopic, leakBind, leakURLPass, leakConfPW} {
			if i := strings.Index(out, secret); i >= 0 {
				t.Errorf("%s shows the secret %q: ...%s...", name, secret, out[max(i-150, 0):min(i+len(secret)+50, len(out))])
			}
		}
	}
	// Where a secret was quoted, <secret> stands in its place.
	for name, want := range map[string]string{
		"/healthz":                          "token=<secret>",
		"/healthz?format=json":              "token=<secret>",
		"/api/status":                       "token=<secret>",
		"/metrics/prometheus":               `topic="<secret>"`,
		"sluice tap":                        `"auth":"<secret>"`,
		"/healthz after reload":             "listen <secret>:",
		"/healthz?format=json after reload": "listen <secret>:",
		"/api/status after reload":          "listen <secret>:",
		"log":                               "token=<secret>",
		"failed start":                      "listen <secret>:",
		"validate":                          "http://127.0.0.1:",
		"validate, a bad value":             `a1.channels.ck.capacity: "<secret>" is not a whole number`,
	} {
		if got := jsonText(outputs[name]); !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", name, want, got)
		}
	}
}

// jsonText undoes JSON's escapes of < and > (json.Marshal writes \u003c),
// so that a check reads JSON as text.
func jsonText(s string) string {
	var b bytes.Buffer
	for _, line := range strings.Split(s, "\n") {
		var v any
		if json.Unmarshal([]byte(line), &v) == nil {
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(v)
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
