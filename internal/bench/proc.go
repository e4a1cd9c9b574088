package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Peers a run can put between its sender and its receiver instead of a
// sluice agent, for the same load (PresetRun.Peer).
const (
	// PeerRsyslog is a private rsyslogd: its own config, work directory
	// and ports on loopback; imtcp in, omfwd over TCP out, each message
	// forwarded as it came (the raw line).
	PeerRsyslog = "rsyslog"
)

// proc is an agent (sluice or a peer) running as a process of its own, so
// that its CPU time and memory are its own and not the bench's.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan error
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go runs on.
const clockTick = 100

// procCPU returns the user and system CPU time pid has used so far
// (/proc/PID/stat fields 14 and 15, its threads included, the ones that
// exited too).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// procPeakRSS returns pid's peak resident set size (VmHWM) in bytes.
func procPeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// procAnon returns pid's resident anonymous memory (RssAnon) in bytes:
// the heap and stacks, without the pages of the executable that RSS also
// counts.
func procAnon(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: RssAnon: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no RssAnon", pid)
}

// procSwitches returns how many times pid's threads gave up a CPU
// (voluntary and involuntary context switches, /proc/PID/task/*/status),
// summed over the threads alive now. On a VM each switch that idles a CPU
// costs a halt and a wake-up, which at low rates is most of an agent's CPU
// time: the count tells where it went.
func procSwitches(pid int) (int64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // the thread exited meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/task/%s/status: %s: %w", pid, task.Name(), k, err)
			}
			sum += n
		}
	}
	return sum, nil
}

// watchAnon samples pid's RssAnon every 20 ms until stop is closed, and
// sends the largest it saw.
func watchAnon(pid int, stop <-chan struct{}, peak chan<- int64) {
	var max int64
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if v, err := procAnon(pid); err == nil && v > max {
			max = v
		}
		select {
		case <-stop:
			peak <- max
			return
		case <-t.C:
		}
	}
}

// startProc starts cmd with its output in logPath and waits until addr
// accepts connections (its source is listening).
func startProc(ctx context.Context, name string, cmd *exec.Cmd, logPath, addr string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); _ = logf.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return p, nil
		}
		select {
		case werr := <-p.done:
			p.done <- werr
			return nil, fmt.Errorf("bench: %s exited before it listened on %s: %v\n%s", name, addr, werr, p.logTail())
		case <-ctx.Done():
			_ = p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.stop()
			return nil, fmt.Errorf("bench: %s did not listen on %s within 30 s\n%s", name, addr, p.logTail())
		}
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop sends SIGTERM and waits for the process, killing it after 20 s.
func (p *proc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("bench: %s exited with %v\n%s", p.name, err, p.logTail())
		}
		return nil
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
		return fmt.Errorf("bench: %s did not stop within 20 s of SIGTERM; killed", p.name)
	}
}

// startSluiceProc runs `bin agent -f file -n name` with sys as -D
// properties.
func startSluiceProc(ctx context.Context, bin string, ac *AgentConfig, sys map[string]string, dir, inAddr string) (*proc, error) {
	args := []string{"agent", "-f", ac.File, "-n", ac.Name, "--no-reload-conf", "--log-level", "warn"}
	for k, v := range sys {
		args = append(args, "-D"+k+"="+v)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), ac.Env...)
	return startProc(ctx, "agent "+ac.Name+" of "+filepath.Base(ac.File), cmd, filepath.Join(dir, "agent.log"), inAddr)
}

// RsyslogPath is where rsyslogd is looked for (Debian's package).
var RsyslogPath = "/usr/sbin/rsyslogd"

// rsyslogConf is a private rsyslog: no system inputs or outputs, one TCP
// input and one TCP forward of each message as it came (%rawmsg%, the
// generated line), on the main queue's defaults. Octet-counted framing is
// off: a generated line starts with digits (its sequence number), which
// imtcp would take for a frame length.
const rsyslogConf = `global(workDirectory="%s")
module(load="imtcp")
template(name="raw" type="string" string="%%rawmsg%%\n")
ruleset(name="fwd") {
  action(type="omfwd" target="127.0.0.1" port="%s" protocol="tcp" template="raw")
}
input(type="imtcp" address="127.0.0.1" port="%s" ruleset="fwd" supportOctetCountedFraming="off")
`

// startRsyslog runs a private rsyslogd that reads lines on inPort and
// forwards them to outPort.
func startRsyslog(ctx context.Context, dir, inPort, outPort string) (*proc, error) {
	bin, err := exec.LookPath(RsyslogPath)
	if err != nil {
		return nil, fmt.Errorf("bench: the rsyslog row needs rsyslogd (Debian's rsyslog package; scripts/perf.sh installs it): %w", err)
	}
	work := filepath.Join(dir, "rsyslog")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	conf := filepath.Join(work, "rsyslog.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, rsyslogConf, work, outPort, inPort), 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-n", "-f", conf, "-i", filepath.Join(work, "rsyslogd.pid"))
	return startProc(ctx, "rsyslogd", cmd, filepath.Join(work, "rsyslogd.log"), net.JoinHostPort("127.0.0.1", inPort))
}
