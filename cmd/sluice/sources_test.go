package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// startAgent runs `sluice agent args...` in process until the test ends,
// and returns its log.
func startAgent(t *testing.T, args ...string) (*testutil.LogBuffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testutil.LogBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"agent"}, args...), nil, io.Discard, &stderr) }()
	var once sync.Once
	code := -1
	stop := func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("agent did not stop; log:\n%s", stderr.String())
			}
		})
		return code
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", stderr.Tail(12000))
		}
	})
	return &stderr, stop
}

// answers reports whether a netcat source on port acknowledges a line.
func answers(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "x\n"); err != nil {
		return false
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && reply == "OK\n"
}

// TestSeveralConfFiles: -f given twice reads both, a key of the later file
// overriding the earlier one's; a problem names the file that set the key;
// a change of either file is picked up by polling.
func TestSeveralConfFiles(t *testing.T) {
	dir := t.TempDir()
	base, site := filepath.Join(dir, "base.properties"), filepath.Join(dir, "site.properties")
	p1, p2, p3 := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	testutil.WriteFile(t, base, netcatToNull(p1))
	testutil.WriteFile(t, site, fmt.Sprintf("# this site's port\na1.sources.r1.port = %d\na1.sinks.k1.batchSize = many\n", p2))

	code, out, _ := runCLI("validate", "-f", base, "-f", site, "-n", "a1")
	if want := site + `:3: a1.sinks.k1.batchSize: "many" is not a whole number`; code != 1 || strings.TrimSpace(out) != want {
		t.Fatalf("validate: exit %d\n%s\nwant:\n%s", code, out, want)
	}

	testutil.WriteFile(t, site, fmt.Sprintf("# this site's port\na1.sources.r1.port = %d\n", p2))
	startAgent(t, "-f", base, "--conf-file", site, "-n", "a1", "--poll-interval", "1")
	testutil.WaitFor(t, 20*time.Second, "the later file's port", func() bool { return answers(p2) })
	if answers(p1) {
		t.Error("the earlier file's port answers too")
	}
	testutil.WriteFile(t, site, fmt.Sprintf("# this site's port\na1.sources.r1.port = %d\n", p3))
	testutil.WaitFor(t, 20*time.Second, "the reload of the changed second file", func() bool { return answers(p3) })
}

// confServer serves one configuration with basic authentication, and can
// be told to fail.
type confServer struct {
	mu      sync.Mutex
	conf    string
	fail    bool
	fetches int
}

func (s *confServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetches++
	if u, p, ok := r.BasicAuth(); !ok || u != "flume" || p != "conf-pa55word" {
		w.Header().Set("WWW-Authenticate", `Basic realm="conf"`)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if s.fail {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, s.conf)
}

func (s *confServer) set(conf string, fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conf, s.fail = conf, fail
}

func (s *confServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

// TestConfURI runs an agent from --conf-uri against a local HTTP server
// with basic authentication: the configuration runs, a change on the
// server is picked up by polling, a server that fails keeps the running
// configuration (the failure logged once, not at every poll), and a wrong
// password refuses the start without printing it.
func TestConfURI(t *testing.T) {
	p1, p2 := testutil.FreePort(t), testutil.FreePort(t)
	cs := &confServer{conf: netcatToNull(p1)}
	srv := httptest.NewServer(cs)
	defer srv.Close()
	uri := srv.URL + "/agents/a1.properties"

	log, _ := startAgent(t, "--conf-uri", uri, "--conf-user", "flume", "--conf-password", "conf-pa55word", "-n", "a1", "--poll-interval", "1")
	testutil.WaitFor(t, 20*time.Second, "the served configuration", func() bool { return answers(p1) })

	cs.set(netcatToNull(p2), false)
	testutil.WaitFor(t, 20*time.Second, "the changed configuration", func() bool { return answers(p2) })

	cs.set("", true)
	n := cs.count()
	testutil.WaitFor(t, 20*time.Second, "three failed polls", func() bool { return cs.count() >= n+3 })
	if !answers(p2) {
		t.Fatalf("the running configuration stopped when the server failed; log:\n%s", log.String())
	}
	if c := strings.Count(log.String(), "configuration cannot be read; the running configuration stays"); c != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", c, log.String())
	}
	if !strings.Contains(log.String(), "503 Service Unavailable") {
		t.Errorf("the log does not say why:\n%s", log.String())
	}

	// Wrong credentials: the start fails, naming the URI, not the password.
	code, _, errOut := runCLI("agent", "--conf-uri", uri, "--conf-user", "flume", "--conf-password", "wrong-pa55word", "-n", "a1")
	if code != 1 || !strings.Contains(errOut, uri+": 401 Unauthorized; check --conf-user and --conf-password") {
		t.Fatalf("wrong password: exit %d, %q", code, errOut)
	}
	if strings.Contains(log.String()+errOut, "pa55word") {
		t.Error("a password was printed")
	}
}

// TestSourcelessAgentDrainsFileChannel: the agent's source fills a file
// channel while it has no sink (allowed, as in Flume); it stops; then the
// source is removed and a sink added, and the source-less agent drains
// every event the channel kept.
func TestSourcelessAgentDrainsFileChannel(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	channel := fmt.Sprintf("a1.channels = c1\na1.channels.c1.type = file\na1.channels.c1.checkpointDir = %s\na1.channels.c1.dataDirs = %s\n",
		filepath.Join(dir, "ck"), filepath.Join(dir, "data"))
	fill := filepath.Join(dir, "fill.properties")
	testutil.WriteFile(t, fill, channel+"a1.sources = r1\na1.sources.r1.type = seq\na1.sources.r1.totalEvents = 500\na1.sources.r1.channels = c1\n")
	drain := filepath.Join(dir, "drain.properties")
	testutil.WriteFile(t, drain, channel+fmt.Sprintf("a1.sinks = k1\na1.sinks.k1.type = file_roll\na1.sinks.k1.sink.directory = %s\n"+
		"a1.sinks.k1.sink.rollInterval = 0\na1.sinks.k1.channel = c1\n", out))
	for _, f := range []string{fill, drain} {
		if code, out, _ := runCLI("validate", "--strict", "-f", f, "-n", "a1"); code != 0 {
			t.Fatalf("validate --strict %s: exit %d\n%s", f, code, out)
		}
	}

	port := testutil.FreePort(t)
	log, stop := startAgent(t, "-f", fill, "-n", "a1", "--http", fmt.Sprintf("127.0.0.1:%d", port))
	testutil.WaitFor(t, 20*time.Second, "500 events in the file channel", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var m map[string]map[string]string
		return json.NewDecoder(resp.Body).Decode(&m) == nil && m["CHANNEL.c1"]["ChannelSize"] == "500"
	})
	if code := stop(); code != 0 {
		t.Fatalf("stopping the filling agent: exit %d; log:\n%s", code, log.String())
	}

	startAgent(t, "-f", drain, "-n", "a1")
	var lines []string
	testutil.WaitFor(t, 20*time.Second, "the 500 events in the sink's files", func() bool {
		lines = nil
		files, _ := filepath.Glob(filepath.Join(out, "*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			lines = append(lines, strings.Fields(string(b))...)
		}
		return len(lines) >= 500
	})
	sort.Slice(lines, func(i, j int) bool {
		return len(lines[i]) < len(lines[j]) || len(lines[i]) == len(lines[j]) && lines[i] < lines[j]
	})
	for i, l := range lines {
		if l != fmt.Sprint(i) {
			t.Fatalf("event %d is %q; want the seq source's bodies 0..499 exactly once", i, l)
		}
	}
}

// TestConfURIHTTPS: an https configuration URI is trusted through the JVM's
// trust store property, as Flume's would be; without it the server's
// self-signed certificate is refused.
func TestConfURIHTTPS(t *testing.T) {
	cs := &confServer{conf: netcatToNull(testutil.FreePort(t))}
	srv := httptest.NewUnstartedServer(cs)
	srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	testutil.WriteFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	args := []string{"validate", "--conf-uri", srv.URL + "/a1.properties", "--conf-user", "flume", "--conf-password", "conf-pa55word", "-n", "a1"}

	code, out, _ := runCLI(append(args, "-Djavax.net.ssl.trustStore="+ca, "-Djavax.net.ssl.trustStoreType=PEM")...)
	if code != 0 || !strings.Contains(out, "agent a1 is valid") {
		t.Fatalf("trusted: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(args...)
	if code != 1 || !strings.Contains(out, "certificate signed by unknown authority") {
		t.Fatalf("untrusted: exit %d\n%s", code, out)
	}
}
