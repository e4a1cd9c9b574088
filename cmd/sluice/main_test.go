package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestParse(t *testing.T) {
	c, err := parse([]string{"agent", "--conf", "conf", "--conf-file", "x.properties", "--name", "a1",
		"-Dflume.root.logger=DEBUG,console", "-Dport=4", "--http=:9", "--poll-interval", "5"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.files) != 1 || c.files[0] != "x.properties" || c.name != "a1" || c.sys["port"] != "4" || c.httpAddr != ":9" || c.pollInterval != 5*time.Second {
		t.Errorf("parsed %+v", c)
	}
	for _, bad := range [][]string{
		{}, {"frobnicate"}, {"agent", "-f", "x"}, {"agent", "-n"}, {"agent", "-f", "x", "-n", "a", "--bogus"},
		{"agent", "-f", "x", "-n", "a", "--poll-interval", "0"},
		{"agent", "-z", "zk:2181", "-p", "/flume", "-n", "a"},
		{"agent", "-u", "http://x/", "-n", "a", "--conf-password", "p"},
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

func TestMonitoringAddr(t *testing.T) {
	for _, tc := range []struct {
		sys     map[string]string
		http    string
		want    string
		wantErr string
	}{
		{sys: map[string]string{}, http: "127.0.0.1:1", want: "127.0.0.1:1"},
		{sys: map[string]string{}, want: ""},
		// A port alone listens on loopback, whichever way it is given:
		// other hosts only when an address says so.
		{sys: map[string]string{}, http: ":9", want: "127.0.0.1:9"},
		{sys: map[string]string{"flume.monitoring.type": "http", "flume.monitoring.port": "34545"}, want: "127.0.0.1:34545"},
		{sys: map[string]string{"flume.monitoring.type": "HTTP"}, want: "127.0.0.1:41414"},
		{sys: map[string]string{}, http: "0.0.0.0:41414", want: "0.0.0.0:41414"},
		{sys: map[string]string{}, http: "[::1]:41414", want: "[::1]:41414"},
		{sys: map[string]string{"flume.monitoring.type": "http", "flume.monitoring.port": "41414"}, http: "0.0.0.0:41414", want: "0.0.0.0:41414"},
		{sys: map[string]string{"flume.monitoring.type": "http", "flume.monitoring.port": "41414"}, http: ":41414", want: "127.0.0.1:41414"},
		{sys: map[string]string{"flume.monitoring.type": "http", "flume.monitoring.port": "41414"}, http: "0.0.0.0:9", wantErr: "different ports"},
		{sys: map[string]string{}, http: "41414", wantErr: "want HOST:PORT"},
		{sys: map[string]string{"flume.monitoring.type": "ganglia"}, wantErr: "not supported"},
		{sys: map[string]string{"flume.monitoring.type": "http", "flume.monitoring.port": "x"}, wantErr: "not a port"},
	} {
		c := &cli{sys: tc.sys, httpAddr: tc.http}
		got, err := c.monitoringAddr()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err %v, want %q", tc.sys, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: got %q, %v; want %q", tc.sys, got, err, tc.want)
		}
	}
}

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidateCommand(t *testing.T) {
	code, out, _ := runCLI("validate", "-f", "../../examples/quickstart.properties", "-n", "a1")
	if code != 0 || !strings.Contains(out, "valid") {
		t.Fatalf("quickstart: exit %d, output %q", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.properties")
	if err := os.WriteFile(bad, []byte("a1.sources = r1\na1.channels = c1\na1.sinks = k1\n"+
		"a1.sources.r1.type = netcat\na1.sources.r1.bind = 127.0.0.1\na1.sources.r1.port = 1\na1.sources.r1.channels = c1\n"+
		"a1.channels.c1.type = memory\na1.channels.c1.capacity = lots\n"+
		"a1.sinks.k1.type = nosuchsink\na1.sinks.k1.channel = c1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI("validate", "-f", bad, "-n", "a1")
	if code != 1 {
		t.Fatalf("exit %d, want 1; output %q", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 ||
		!strings.HasPrefix(lines[0], bad+":9: a1.channels.c1.capacity: ") ||
		!strings.HasPrefix(lines[1], bad+":10: a1.sinks.k1.type: unknown sink type \"nosuchsink\"") {
		t.Errorf("problems:\n%s", out)
	}
}

// TestHelpEverywhere: --help and -h print the usage on stdout and exit 0,
// whatever command they follow and whatever else is on the line.
func TestHelpEverywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"agent", "--help"}, {"agent", "-h"}, {"agent", "-f", "x.properties", "-n", "a1", "--help"},
		{"agent", "--bogus", "-h"},
		{"validate", "--help"}, {"validate", "-f", "x.properties", "-h"},
		{"version", "--help"},
	} {
		code, out, errOut := runCLI(args...)
		if code != 0 || !strings.HasPrefix(out, "usage:") || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if code, out, _ := runCLI("bench", "--help"); code != 0 || !strings.Contains(out, "sluice bench") {
		t.Errorf("bench --help: exit %d, %q", code, out)
	}
}

// TestValidateWarnings: keys sluice does not read are warnings, printed as
// FILE:LINE: key: message with the valid summary, exit 0; --strict makes
// them fail; an error fails either way, and --strict is validate's alone.
func TestValidateWarnings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "w.properties")
	conf := "a1.sources = r1\na1.channels = c1\na1.sinks = k1\n" +
		"a1.sources.r1.type = seq\na1.sources.r1.channels = c1\na1.sources.r1.totalEvent = 5\n" +
		"a1.channels.c1.type = memory\na1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n"
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI("validate", "-f", file, "-n", "a1")
	want := file + ":6: a1.sources.r1.totalEvent: ignored: sluice does not read it; did you mean a1.sources.r1.totalEvents?\n" +
		file + ": agent a1 is valid, with 1 warning\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}
	if code, out, _ = runCLI("validate", "-f", file, "-n", "a1", "--strict"); code != 1 || !strings.Contains(out, "has 1 warning, which --strict counts as errors") {
		t.Fatalf("--strict: exit %d, output:\n%s", code, out)
	}
	if _, err := parse([]string{"agent", "-f", file, "-n", "a1", "--strict"}); err == nil {
		t.Error("agent accepted --strict")
	}
	if err := os.WriteFile(file, []byte(conf+"a1.sinks.k1.batchSize = x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ = runCLI("validate", "-f", file, "-n", "a1"); code != 1 || strings.Contains(out, "is valid") ||
		!strings.Contains(out, ":10: a1.sinks.k1.batchSize: \"x\" is not a whole number") {
		t.Fatalf("error: exit %d, output:\n%s", code, out)
	}
}

func TestVersionAndUsage(t *testing.T) {
	if code, out, _ := runCLI("version"); code != 0 || !strings.HasPrefix(out, "sluice ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, _, errOut := runCLI("nope"); code != 2 || !strings.Contains(errOut, "usage:") {
		t.Errorf("unknown command: %d %q", code, errOut)
	}
}

// TestValidateManyProblems: validate prints the errors first, then the
// first 100 warnings in file order and how many more there are (all of
// them with --max-problems 0), then its verdict with the full count; the
// agent's start logs as many.
func TestValidateManyProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("a1.sources = r1\na1.channels = c1\na1.sinks = k1\n" +
		"a1.sources.r1.type = seq\na1.sources.r1.channels = c1\na1.channels.c1.type = memory\n" +
		"a1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n")
	for i := range 250 {
		fmt.Fprintf(&b, "a1.sinks.k1.unknown%03d = x\n", 249-i) // written last first: kept by line, not name
	}
	b.WriteString("a1.channels.c1.capacity = lots\n")
	file := filepath.Join(t.TempDir(), "many.properties")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI("validate", "-f", file, "-n", "a1")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 1 || len(lines) != 102 {
		t.Fatalf("exit %d, %d lines, want 1 and 102:\n%s", code, len(lines), out)
	}
	want := []string{file + `:259: a1.channels.c1.capacity: "lots" is not a whole number`,
		file + ":9: a1.sinks.k1.unknown249: ignored: sluice does not read it"}
	if lines[0] != want[0] || lines[1] != want[1] || !strings.HasPrefix(lines[100], file+":108: ") || lines[101] != "... and 150 more warnings" {
		t.Errorf("output:\n%s", out)
	}
	code, out, _ = runCLI("validate", "-f", file, "-n", "a1", "--max-problems", "0")
	if n := strings.Count(out, "ignored: sluice does not read it"); code != 1 || n != 250 || strings.Contains(out, "more warnings") {
		t.Errorf("--max-problems 0: exit %d, %d warnings printed:\n%s", code, n, out)
	}
	code, out, _ = runCLI("validate", "-f", file, "-n", "a1", "--max-problems", "3")
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); code != 1 || len(lines) != 5 || lines[4] != "... and 247 more warnings" {
		t.Errorf("--max-problems 3: exit %d:\n%s", code, out)
	}
	if code, _, errOut := runCLI("validate", "-f", file, "-n", "a1", "--max-problems", "-1"); code != 2 || !strings.Contains(errOut, "--max-problems") {
		t.Errorf("--max-problems -1: exit %d, %s", code, errOut)
	}

	// Without the error, the agent runs and logs 100 warnings and the count.
	if err := os.WriteFile(file, []byte(strings.Replace(b.String(), "capacity = lots", "capacity = 1000", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI("validate", "-f", file, "-n", "a1")
	if code != 0 || !strings.HasSuffix(out, "... and 150 more warnings\n"+file+": agent a1 is valid, with 250 warnings\n") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testutil.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent", "-f", file, "-n", "a1", "--no-reload-conf"}, nil, io.Discard, &stderr)
	}()
	for !strings.Contains(stderr.String(), "agent started") {
		select {
		case c := <-done:
			t.Fatalf("exit %d:\n%s", c, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	<-done
	if n := stderr.Count("ignored: sluice does not read it"); n != 100 || stderr.Count("warnings=150") != 1 {
		t.Errorf("%d warnings logged, want 100 and a count of 150 more:\n%s", n, stderr.String())
	}
}

// TestVersionJSON: `sluice version --json` names the build; without
// -ldflags stamps, the version falls back to "dev" (or the module's) and Go's
// own version is always there.
func TestVersionJSON(t *testing.T) {
	code, out, _ := runCLI("version", "--json")
	var b buildInfo
	if err := json.Unmarshal([]byte(out), &b); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %q", code, err, out)
	}
	if b.Version == "" || b.Commit == "" || b.Date == "" || b.GoVersion != runtime.Version() ||
		b.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version --json: %+v", b)
	}
	if code, out, _ := runCLI("version"); code != 0 || !strings.HasPrefix(out, "sluice "+b.Version+"\n") ||
		!strings.Contains(out, "go:       "+runtime.Version()) {
		t.Errorf("version: %d %q", code, out)
	}
	if code, _, errOut := runCLI("version", "--yaml"); code != exitUsage || !strings.Contains(errOut, "--json") {
		t.Errorf("version --yaml: %d %q", code, errOut)
	}
}
