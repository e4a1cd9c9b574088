package monitoring

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/status"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// runningAgent is the agent binary running testdata/status.properties.
type runningAgent struct {
	*testutil.AgentProcess
	HTTP   string // the monitoring address
	Netcat string // source web
	API    string // source api (http)
	OutDir string // sink files' directory
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
	return startAgentWith(t, conf, func(a *runningAgent) bool { return testutil.Healthy(a.HTTP) }, extra...)
}

// startAgentWith is startAgentFile with its own test of readiness.
func startAgentWith(t *testing.T, conf string, ready func(*runningAgent) bool, extra ...string) *runningAgent {
	t.Helper()
	a := &runningAgent{
		HTTP:   fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		Netcat: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		API:    fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		OutDir: t.TempDir(),
	}
	_, webPort, _ := net.SplitHostPort(a.Netcat)
	_, apiPort, _ := net.SplitHostPort(a.API)
	a.AgentProcess = testutil.StartAgent(t, testutil.AgentBinary(t), conf,
		append([]string{"-DwebPort=" + webPort, "-DapiPort=" + apiPort, "-DoutDir=" + a.OutDir, "--http", a.HTTP}, extra...)...)
	t.Cleanup(func() { a.Stop(30 * time.Second) })
	a.WaitUntil(20*time.Second, "the agent to be ready", func() bool { return ready(a) })
	return a
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
