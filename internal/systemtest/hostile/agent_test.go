package hostile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// agent is the real sluice binary running every network source with its
// default limits, into a memory channel drained by a null sink.
type agent struct {
	*testutil.AgentProcess
	http  string // metrics address
	ports map[string]int
}

func TestMain(m *testing.M) { testutil.Main(m) }

// sources are the network sources the agent runs, each on its own port.
var sources = []string{"avro", "http", "netcat", "netcatudp", "syslogtcp", "multiport", "syslogudp"}

func startAgent(t *testing.T) *agent {
	t.Helper()
	bin := testutil.AgentBinary(t) // $SLUICE_AGENT_BIN runs another build, as scripts/hostile.sh says
	dir := t.TempDir()
	a := &agent{ports: map[string]int{}}
	for _, s := range sources {
		a.ports[s] = testutil.FreePort(t)
	}
	a.http = "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	var b strings.Builder
	b.WriteString("a1.sources = " + strings.Join(sources, " ") + "\na1.channels = c1\na1.sinks = k1\n")
	for _, s := range sources {
		typ := s
		if s == "multiport" {
			typ = "multiport_syslogtcp"
		}
		fmt.Fprintf(&b, "a1.sources.%s.type = %s\na1.sources.%s.channels = c1\n", s, typ, s)
		switch typ {
		case "avro", "netcat", "netcatudp":
			fmt.Fprintf(&b, "a1.sources.%s.bind = 127.0.0.1\na1.sources.%s.port = %d\n", s, s, a.ports[s])
		case "http":
			fmt.Fprintf(&b, "a1.sources.%s.bind = 127.0.0.1\na1.sources.%s.port = %d\n", s, s, a.ports[s])
		case "syslogtcp", "syslogudp":
			fmt.Fprintf(&b, "a1.sources.%s.host = 127.0.0.1\na1.sources.%s.port = %d\n", s, s, a.ports[s])
		case "multiport_syslogtcp":
			fmt.Fprintf(&b, "a1.sources.%s.host = 127.0.0.1\na1.sources.%s.ports = %d\n", s, s, a.ports[s])
		}
	}
	b.WriteString("a1.channels.c1.type = memory\na1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n")
	conf := filepath.Join(dir, "agent.properties")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	a.AgentProcess = testutil.StartAgent(t, bin, conf, "--http", a.http)
	t.Cleanup(func() { a.Stop(30 * time.Second) })
	a.WaitHealthy(a.http, 20*time.Second)
	return a
}

func (a *agent) addr(source string) string { return "127.0.0.1:" + strconv.Itoa(a.ports[source]) }

// status reads a field of /proc/PID/status, in bytes for kB fields.
func (a *agent) status(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.Cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			f := strings.Fields(l[len(field)+1:])
			if len(f) == 0 {
				return -1
			}
			n, _ := strconv.ParseInt(f[0], 10, 64)
			if len(f) > 1 && f[1] == "kB" {
				n <<= 10
			}
			return n
		}
	}
	return -1
}

// peakRSS is the agent's peak resident set size (VmHWM).
func (a *agent) peakRSS() int64 { return a.status("VmHWM") }

// resetPeak makes VmHWM start again from the current RSS, so a row
// measures its own peak; it reports false where the kernel does not allow it.
func (a *agent) resetPeak() bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", a.Cmd.Process.Pid), []byte("5"), 0) == nil
}

// counter reads a source counter from /metrics.
func (a *agent) counter(source, name string) int64 {
	resp, err := http.Get("http://" + a.http + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var m map[string]map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return -1
	}
	n, err := strconv.ParseInt(m["SOURCE."+source][name], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// postJSON sends body to the http source and returns the status.
func (a *agent) postJSON(client *http.Client, body []byte) (int, error) {
	resp, err := client.Post("http://"+a.addr("http"), "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// dialMany opens n TCP connections to addr and returns them (the caller
// closes them); it stops at the first failure.
func dialMany(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Logf("dial %s after %d connections: %v", addr, len(conns), err)
			break
		}
		conns = append(conns, c)
	}
	return conns
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// raiseFileLimit lifts this process's open-files limit to its hard limit,
// for the tests that hold more than a thousand connections.
func raiseFileLimit(t *testing.T, want uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur < want {
		l.Cur = min(l.Max, want)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	if l.Cur < want {
		t.Skipf("needs %d open files, the limit is %d (raise it with ulimit -n)", want, l.Cur)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
