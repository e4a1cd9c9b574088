package main

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// fakeSystemd is the receiving end of $NOTIFY_SOCKET, as systemd holds it.
type fakeSystemd struct {
	t    *testing.T
	conn *net.UnixConn
	path string
	msgs chan string
}

func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	// A short directory: a unix socket path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeSystemd{t: t, conn: conn, path: path, msgs: make(chan string, 1000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(s.msgs)
				return
			}
			s.msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return s
}

// await returns the first message that has every one of the lines in want,
// failing the test after wait; the messages before it are returned too.
func (s *fakeSystemd) await(wait time.Duration, want ...string) (msg string, before []string) {
	s.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				s.t.Fatalf("notify socket closed while waiting for %q", want)
			}
			if hasLines(m, want...) {
				return m, before
			}
			before = append(before, m)
		case <-deadline:
			s.t.Fatalf("no notification with %q within %v; got %q", want, wait, before)
		}
	}
}

// hasLines reports whether every want is a line of msg, or the start of one
// when it ends in "=" or "*".
func hasLines(msg string, want ...string) bool {
	lines := strings.Split(msg, "\n")
next:
	for _, w := range want {
		for _, l := range lines {
			if l == w || (strings.HasSuffix(w, "*") && strings.HasPrefix(l, strings.TrimSuffix(w, "*"))) {
				continue next
			}
		}
		return false
	}
	return true
}

// TestSystemdNotify runs the real binary as systemd runs a Type=notify unit
// with WatchdogSec: READY=1 comes only once the source listens, WATCHDOG=1
// keeps coming while the agent answers (healthy or not), SIGHUP with a bad
// configuration is RELOADING=1 then READY=1 with the failure in STATUS=
// (the running configuration stays), a reload whose source cannot bind
// leaves the agent unhealthy in STATUS= and still fed, and SIGTERM sends
// STOPPING=1 before the exit.
func TestSystemdNotify(t *testing.T) {
	bin := testutil.AgentBinary(t)
	sd := newFakeSystemd(t)
	port := testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	if err := os.WriteFile(file, []byte(netcatToNull(port)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := testutil.AgentCommand(bin, file)
	// A 400 ms watchdog: systemd's WatchdogSec=0.4s; pings are due every 200 ms.
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sd.path, "WATCHDOG_USEC=400000")
	p := testutil.RunAgent(t, cmd)

	ready, before := sd.await(20*time.Second, "READY=1", "STATUS=running")
	for _, m := range before {
		if hasLines(m, "STOPPING=1") || hasLines(m, "RELOADING=1") {
			t.Errorf("before READY=1: %q", m)
		}
	}
	// READY=1 means intake runs: the port answers now, without retrying.
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("READY=1 (%q) sent before the source listens: %v", ready, err)
	}
	c.Close()
	sd.await(2*time.Second, "WATCHDOG=1")
	sd.await(2*time.Second, "WATCHDOG=1")

	// A bad configuration: the reload is refused, the agent keeps running.
	good, _ := os.ReadFile(file)
	if err := os.WriteFile(file, append(append([]byte(nil), good...), "a1.sinks.k1.batchSize = x\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	sd.await(10*time.Second, "RELOADING=1", "MONOTONIC_USEC=*")
	msg, _ := sd.await(10*time.Second, "READY=1")
	if !strings.Contains(msg, "STATUS=running (last reload failed: ") || !strings.Contains(msg, "batchSize") {
		t.Errorf("after a refused reload: %q", msg)
	}
	sendOne(t, port, "still running")

	// A configuration whose new source cannot bind: applied, unhealthy,
	// and the watchdog is still fed (a restart would not free the port).
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().(*net.TCPAddr).Port
	two := string(good) + "a1.sources = r1 r2\na1.sources.r2.type = netcat\na1.sources.r2.bind = 127.0.0.1\n" +
		"a1.sources.r2.port = " + strconv.Itoa(busy) + "\na1.sources.r2.channels = c1\n"
	if err := os.WriteFile(file, []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	sd.await(10*time.Second, "RELOADING=1")
	sd.await(10*time.Second, "READY=1")
	msg, _ = sd.await(15*time.Second, "STATUS=unhealthy: source r2*")
	sd.await(2*time.Second, "WATCHDOG=1")
	if strings.Contains(msg, "last reload failed") {
		t.Errorf("a reload that applied still reports the earlier failure: %q", msg)
	}

	p.Signal(syscall.SIGTERM)
	sd.await(10*time.Second, "STOPPING=1")
	if code := p.Exit(20 * time.Second); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// TestNotifyNoSocket: without $NOTIFY_SOCKET (or with a value that is no
// socket address) the agent notifies nobody; the variables systemd sets are
// not passed on to the commands an exec source runs.
func TestNotifyNoSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if n := notifierFromEnv(); n != nil {
		t.Fatalf("notifier %+v without NOTIFY_SOCKET", n)
	}
	t.Setenv("NOTIFY_SOCKET", "relative/path")
	if n := notifierFromEnv(); n != nil {
		t.Fatalf("notifier %+v for a relative path", n)
	}
	t.Setenv("NOTIFY_SOCKET", "@abstract")
	t.Setenv("WATCHDOG_USEC", "1000000")
	t.Setenv("WATCHDOG_PID", "1") // another process's watchdog
	n := notifierFromEnv()
	if n == nil || n.addr.Name != "@abstract" || n.watchdog != 0 {
		t.Fatalf("notifier %+v", n)
	}
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%q left in the environment", k, v)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "/run/x")
	t.Setenv("WATCHDOG_USEC", "3000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if n := notifierFromEnv(); n == nil || n.watchdog != 1500*time.Millisecond {
		t.Fatalf("notifier %+v: want pings every 1.5 s", n)
	}
}

// TestSystemdNotifyBadConfig: a configuration that cannot run never sends
// READY=1; the agent exits 1 with its FILE:LINE problems on stderr, which
// systemd puts in the journal, and the unit fails.
func TestSystemdNotifyBadConfig(t *testing.T) {
	bin := testutil.AgentBinary(t)
	sd := newFakeSystemd(t)
	file := filepath.Join(t.TempDir(), "bad.properties")
	if err := os.WriteFile(file, []byte(netcatToNull(testutil.FreePort(t))+"a1.channels.c1.capacity = lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "agent", "-f", file, "-n", "a1")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sd.path)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailed {
		t.Fatalf("exit %v, want %d; output:\n%s", err, exitFailed, out)
	}
	if !strings.Contains(string(out), file+":11: a1.channels.c1.capacity: ") {
		t.Errorf("no FILE:LINE problem in the output:\n%s", out)
	}
	select {
	case m := <-sd.msgs:
		t.Errorf("notified %q", m)
	case <-time.After(200 * time.Millisecond):
	}
}
