package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

const (
	envSecret = "db-pa55w0rd-from-env"
	extSecret = "tok-3xternal-s3cret"
)

func filterConf(t *testing.T, extra string) string {
	t.Helper()
	helper, err := filepath.Abs("testdata/secret-helper.sh")
	if err != nil {
		t.Fatal(err)
	}
	conf := `a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.configfilters = f1 f2
a1.configfilters.f1.type = external
a1.configfilters.f1.command = ` + helper + `
a1.configfilters.f2.type = env
a1.sources.r1.type = seq
a1.sources.r1.totalEvents = 3
a1.sources.r1.channels = c1
a1.sources.r1.interceptors = i1 i2
a1.sources.r1.interceptors.i1.type = static
a1.sources.r1.interceptors.i1.key = token
a1.sources.r1.interceptors.i1.value = ${f1['api_token']}
a1.sources.r1.interceptors.i2.type = static
a1.sources.r1.interceptors.i2.key = password
a1.sources.r1.interceptors.i2.value = ${f2['SLUICE_TEST_DB_PASSWORD']}
a1.channels.c1.type = memory
a1.sinks.k1.type = logger
a1.sinks.k1.channel = c1
` + extra
	file := filepath.Join(t.TempDir(), "filters.properties")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestConfigFiltersNeverPrintSecrets runs an agent whose config takes one
// secret from the environment (env filter) and one from a helper program
// (external filter), puts both into every event as headers, and logs the
// events with the logger sink at debug level. Everything the agent prints
// and serves (log, /metrics, /metrics/prometheus, /healthz, the status
// page) and everything validate prints is searched for the secrets: the
// events arrive with the values in place of the references, and no output
// carries either.
func TestConfigFiltersNeverPrintSecrets(t *testing.T) {
	t.Setenv("SLUICE_TEST_DB_PASSWORD", envSecret)
	file := filterConf(t, "")
	var all strings.Builder

	code, out, errOut := runCLI("validate", "-f", file, "-n", "a1")
	all.WriteString(out + errOut)
	if code != 0 || !strings.Contains(out, "is valid") {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
	}

	port := testutil.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testutil.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent", "-f", file, "-n", "a1", "--log-level", "debug", "--http", fmt.Sprintf("127.0.0.1:%d", port)}, nil, io.Discard, &stderr)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(stderr.String(), "Event: { headers:") < 3 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the logger sink did not log 3 events:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, path := range []string{"/metrics", "/metrics/prometheus", "/healthz", "/"} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		all.WriteString(string(b))
	}
	cancel()
	if c := <-done; c != 0 {
		t.Fatalf("exit %d:\n%s", c, stderr.String())
	}
	log := stderr.String()
	all.WriteString(log)
	// The events carried the secrets (the logger sink printed a header for
	// each), and the log shows them replaced.
	if strings.Count(log, "token=<secret>") < 3 || strings.Count(log, "password=<secret>") < 3 {
		t.Errorf("the logged events do not show the redacted token header:\n%s", log)
	}
	for _, secret := range []string{envSecret, extSecret} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("secret %q printed:\n%s", secret, all.String())
		}
	}
}

// TestConfigFilterFailures: a failing filter names the filter and the key
// in one line and fails validate; a secret in a bad value is not quoted.
func TestConfigFilterFailures(t *testing.T) {
	t.Setenv("SLUICE_TEST_DB_PASSWORD", envSecret)
	file := filterConf(t, "a1.sinks.k1.maxBytesToLog = ${f2['SLUICE_TEST_DB_PASSWORD']}\na1.channels.c1.capacity = ${f1['no_such_key']}\n")
	code, out, _ := runCLI("validate", "-f", file, "-n", "a1")
	want := []string{
		file + ":21: a1.sinks.k1.maxBytesToLog: the value read through a config filter is not a whole number",
		file + ":22: a1.channels.c1.capacity: config filter f1 (external) failed for key no_such_key: ",
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != 2 || lines[0] != want[0] || !strings.HasPrefix(lines[1], want[1]) ||
		!strings.HasSuffix(lines[1], "exited with status 2: secret-helper: no key no_such_key") {
		t.Fatalf("exit %d:\n%s\nwant:\n%s", code, out, strings.Join(want, "\n"))
	}
	if strings.Contains(out, envSecret) || strings.Contains(out, extSecret) {
		t.Errorf("secret printed:\n%s", out)
	}
}
