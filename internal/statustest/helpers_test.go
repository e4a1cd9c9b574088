package statustest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/status"
	"github.com/sluicehq/sluice/internal/testutil"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// sluiceBinary builds cmd/sluice once for the package's tests.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "sluice-statustest-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "sluice")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// requireTool skips the test when a peer program is missing, or fails it
// under CI, where scripts/test.sh installs it.
func requireTool(t *testing.T, path, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(path); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing; scripts/test.sh installs it (Debian package %s)", path, pkg)
	}
	t.Skipf("%s is missing; scripts/test.sh installs it (Debian package %s)", path, pkg)
	return ""
}

// runningAgent is the agent binary running testdata/status.properties.
type runningAgent struct {
	HTTP    string // the monitoring address
	Netcat  string // source web
	API     string // source api (http)
	OutDir  string // sink files' directory
	cmd     *exec.Cmd
	log     *bytes.Buffer
	logMu   sync.Mutex
	stopped chan struct{}
}

func (a *runningAgent) Log() string {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	return a.log.String()
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startAgent runs the status test agent with extra arguments and waits
// until /healthz answers 200. It is stopped with SIGTERM at cleanup.
func startAgent(t *testing.T, extra ...string) *runningAgent {
	t.Helper()
	return startAgentFile(t, "testdata/status.properties", extra...)
}

// startAgentFile is startAgent with another configuration, which reads
// ${sys:webPort}, ${sys:apiPort} and ${sys:outDir} as it likes.
func startAgentFile(t *testing.T, conf string, extra ...string) *runningAgent {
	t.Helper()
	return startAgentWith(t, conf, func(a *runningAgent) bool {
		resp, err := http.Get("http://" + a.HTTP + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, extra...)
}

// startAgentWith is startAgentFile with its own test of readiness.
func startAgentWith(t *testing.T, conf string, ready func(*runningAgent) bool, extra ...string) *runningAgent {
	t.Helper()
	bin := sluiceBinary(t)
	a := &runningAgent{
		HTTP:    fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		Netcat:  fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		API:     fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		OutDir:  t.TempDir(),
		log:     &bytes.Buffer{},
		stopped: make(chan struct{}),
	}
	_, webPort, _ := net.SplitHostPort(a.Netcat)
	_, apiPort, _ := net.SplitHostPort(a.API)
	args := append([]string{"agent", "-f", conf, "-n", "a1", "--no-reload-conf",
		"-DwebPort=" + webPort, "-DapiPort=" + apiPort, "-DoutDir=" + a.OutDir, "--http", a.HTTP}, extra...)
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout = syncWriter{&a.logMu, a.log}
	a.cmd.Stderr = syncWriter{&a.logMu, a.log}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.cmd.Wait(); close(a.stopped) }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.stopped:
		case <-time.After(30 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.stopped
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", a.Log())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ready(a) {
			return a
		}
		select {
		case <-a.stopped:
			t.Fatalf("agent exited at start:\n%s", a.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not healthy within 20 s:\n%s", a.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshot reads the agent's /api/status.
func (a *runningAgent) snapshot(t *testing.T) status.Snapshot {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTP + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s status.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// load sends lines to source web (a connection, 50 lines at a time, each
// acknowledged) at about rate lines a second, and now and then a JSON batch
// to source api, until ctx ends. Lines are "line N". It returns once the
// first batch was acknowledged; done closes when it stops, and sent tells
// how many lines were acknowledged.
func load(t *testing.T, ctx context.Context, a *runningAgent, rate int) (done <-chan struct{}, sent func() int) {
	t.Helper()
	c, err := net.Dial("tcp", a.Netcat)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	first := make(chan error, 1)
	fin := make(chan struct{})
	go func() {
		defer close(fin)
		defer c.Close()
		br := bufio.NewReader(c)
		tick := time.NewTicker(time.Second * 50 / time.Duration(rate))
		defer tick.Stop()
		for batch := 0; ; batch++ {
			var b strings.Builder
			mu.Lock()
			base := n
			mu.Unlock()
			for i := range 50 {
				fmt.Fprintf(&b, "line %d\n", base+i)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, err := c.Write([]byte(b.String()))
			for i := 0; err == nil && i < 50; i++ {
				var line string
				if line, err = br.ReadString('\n'); err == nil && line != "OK\n" {
					err = fmt.Errorf("netcat replied %q", line)
				}
			}
			if err == nil {
				mu.Lock()
				n += 50
				mu.Unlock()
			}
			if batch == 0 {
				first <- err
			}
			if err != nil {
				return
			}
			if batch%20 == 0 {
				body := fmt.Sprintf(`[{"headers":{"kind":"audit"},"body":"api %d"},{"headers":{"kind":"web"},"body":"api %d"}]`, batch, batch)
				if resp, err := http.Post("http://"+a.API+"/", "application/json", strings.NewReader(body)); err == nil {
					resp.Body.Close()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	if err := <-first; err != nil {
		t.Fatalf("load: first batch: %v", err)
	}
	return fin, func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}
