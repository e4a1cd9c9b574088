package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func netcatToNull(port int) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.sinks.k1.type = null
a1.sinks.k1.channel = c1
`, port)
}

func sendOne(t *testing.T, port int, line string) {
	t.Helper()
	var c net.Conn
	var err error
	for i := 0; i < 100; i++ { // the agent may still be starting
		if c, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || reply != "OK\n" {
		t.Fatalf("reply %q, %v", reply, err)
	}
}

// TestAgentCommand runs `sluice agent` in process until its context ends,
// as SIGTERM ends it, and expects exit code 0.
func TestAgentCommand(t *testing.T) {
	port := testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	if err := os.WriteFile(file, []byte(netcatToNull(port)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testutil.LogBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"agent", "-f", file, "-n", "a1", "--log-format", "json"}, nil, io.Discard, &stderr)
	}()
	sendOne(t, port, "hello")
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d; log:\n%s", c, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop")
	}
	if !strings.Contains(stderr.String(), `"msg":"agent stopped"`) {
		t.Errorf("json log lacks the stop message:\n%s", stderr.String())
	}
}

// TestAgentCommandStartFailure: a port already taken fails the start with
// the component named, and exit code 1.
func TestAgentCommandStartFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file := filepath.Join(t.TempDir(), "a.properties")
	if err := os.WriteFile(file, []byte(netcatToNull(ln.Addr().(*net.TCPAddr).Port)), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr testutil.LogBuffer
	if c := run(context.Background(), []string{"agent", "-f", file, "-n", "a1"}, nil, io.Discard, &stderr); c != 1 {
		t.Fatalf("exit %d, want 1", c)
	}
	if !strings.Contains(stderr.String(), "source r1 failed to start") {
		t.Errorf("log does not name the component:\n%s", stderr.String())
	}
}

// TestBinarySignals builds the real binary: SIGHUP reloads (the new source
// port answers), SIGTERM drains and exits 0.
func TestBinarySignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := testutil.AgentBinary(t)
	p1, p2 := testutil.FreePort(t), testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, netcatToNull(p1))
	p := testutil.StartAgent(t, bin, file)
	sendOne(t, p1, "before reload")
	testutil.WriteFile(t, file, netcatToNull(p2))
	p.Signal(syscall.SIGHUP)
	sendOne(t, p2, "after reload")
	p.Stop(20 * time.Second)
	stderr := p.Log
	for _, want := range []string{"configuration reloaded", "agent stopped"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestShutdownTimeoutFlag: --shutdown-timeout takes seconds, fractions too,
// and reaches the agent's options; nothing else is accepted.
func TestShutdownTimeoutFlag(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want time.Duration
	}{{"20", 20 * time.Second}, {"0.5", 500 * time.Millisecond}, {"90", 90 * time.Second}} {
		c, err := parse([]string{"agent", "-f", "x", "-n", "a1", "--shutdown-timeout", tc.arg})
		if err != nil {
			t.Fatalf("%s: %v", tc.arg, err)
		}
		if got := c.options().ShutdownTimeout; got != tc.want {
			t.Errorf("--shutdown-timeout %s: %v, want %v", tc.arg, got, tc.want)
		}
	}
	c, err := parse([]string{"agent", "-f", "x", "-n", "a1"})
	if err != nil || c.options().ShutdownTimeout != 0 {
		t.Errorf("no flag: %v %v, want 0 (the agent's default)", c.options().ShutdownTimeout, err)
	}
	for _, bad := range []string{"0", "-1", "abc", "1e9", "NaN"} {
		if _, err := parse([]string{"agent", "-f", "x", "-n", "a1", "--shutdown-timeout", bad}); err == nil || !strings.Contains(err.Error(), "--shutdown-timeout") {
			t.Errorf("--shutdown-timeout %s: %v, want refused", bad, err)
		}
	}
}
