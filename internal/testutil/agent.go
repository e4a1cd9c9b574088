package testutil

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// AgentProcess is one run of the agent binary (`sluice agent`), as an
// operator runs it: signals, exit codes, its log. StartAgent and RunAgent
// start one; it is killed at the end of the test if it still runs.
type AgentProcess struct {
	Cmd *exec.Cmd
	// Log is what the agent wrote to stdout and stderr.
	Log *LogBuffer

	t    testing.TB
	done chan struct{}
	err  error
}

// AgentCommand is `bin agent -f conf -n a1 --no-reload-conf args...`, for
// a test that sets the command's directory or environment before RunAgent.
func AgentCommand(bin, conf string, args ...string) *exec.Cmd {
	return exec.Command(bin, append([]string{"agent", "-f", conf, "-n", "a1", "--no-reload-conf"}, args...)...)
}

// StartAgent runs AgentCommand(bin, conf, args...) until the test ends.
func StartAgent(t testing.TB, bin, conf string, args ...string) *AgentProcess {
	t.Helper()
	return RunAgent(t, AgentCommand(bin, conf, args...))
}

// RunAgent starts cmd with its output in the process's Log (and in
// cmd.Stdout too when the test set one, such as a log shared by several
// runs). At the end of the test a process still running is killed, and
// the tail of its log is shown when the test failed, or always with
// SLUICE_TEST_LOG set.
func RunAgent(t testing.TB, cmd *exec.Cmd) *AgentProcess {
	t.Helper()
	p := &AgentProcess{Cmd: cmd, Log: &LogBuffer{}, t: t, done: make(chan struct{})}
	var out io.Writer = p.Log
	if cmd.Stdout != nil {
		out = io.MultiWriter(cmd.Stdout, p.Log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.Running() {
			_ = cmd.Process.Kill() // the test is over; how the process ends no longer matters
			<-p.done
		}
		if t.Failed() || os.Getenv("SLUICE_TEST_LOG") != "" {
			t.Logf("agent log:\n%s", p.Log.Tail(12000))
		}
	})
	return p
}

// Signal sends sig to the agent.
func (p *AgentProcess) Signal(sig os.Signal) {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// Done is closed when the process has exited.
func (p *AgentProcess) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *AgentProcess) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is how the process ended (exec.Cmd.Wait's error); nil before it ends.
func (p *AgentProcess) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Exit waits up to d for the process to end and returns its exit code
// (-1 when a signal ended it); it fails the test when the process does not
// end in time.
func (p *AgentProcess) Exit(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("the agent did not exit within %v", d)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatal(p.err)
	}
	return 0
}

// Stop sends SIGTERM and fails the test unless the agent exits with code 0
// within d; one that does not exit then is killed.
func (p *AgentProcess) Stop(d time.Duration) {
	p.t.Helper()
	if !p.Running() {
		return
	}
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			p.t.Fatalf("the agent's exit after SIGTERM: %v", p.err)
		}
	case <-time.After(d):
		_ = p.Cmd.Process.Kill() // the test fails below; the kill only ends the process
		<-p.done
		p.t.Fatalf("the agent did not exit within %v of SIGTERM", d)
	}
}

// WaitLog waits up to d for a JSON log record (--log-format json) whose
// msg is msg, and returns the first.
func (p *AgentProcess) WaitLog(msg string, d time.Duration) map[string]any {
	p.t.Helper()
	var recs []map[string]any
	if !Eventually(func() bool { recs = p.Log.Records(msg); return len(recs) > 0 }, d) {
		p.t.Fatalf("no log record %q within %v", msg, d)
	}
	return recs[0]
}

// WaitHealthy waits up to d until the agent's monitoring endpoint at addr
// (--http) says it is healthy (Healthy). It fails at once when the agent
// exits.
func (p *AgentProcess) WaitHealthy(addr string, d time.Duration) {
	p.t.Helper()
	p.WaitUntil(d, "the agent's /healthz to answer 200", func() bool { return Healthy(addr) })
}

// Healthy reports whether the agent whose monitoring endpoint is addr
// answers /healthz with 200 for the started agent (before, it answers
// "agent a1 is starting").
func Healthy(addr string) bool {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && !strings.Contains(string(b), "is starting")
}

// WaitUntil is WaitFor that fails at once, with the agent's exit, when the
// agent exits before cond holds.
func (p *AgentProcess) WaitUntil(d time.Duration, what string, cond func() bool) {
	p.t.Helper()
	exited := false
	WaitFor(p.t, d, what, func() bool {
		if !p.Running() {
			exited = true
			return true
		}
		return cond()
	})
	if exited && !cond() {
		p.t.Fatalf("the agent exited (%v) before %s", p.err, what)
	}
}
