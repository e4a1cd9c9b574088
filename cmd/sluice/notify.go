package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/metrics"
)

// notifier tells a service manager how the agent is, with systemd's
// notification protocol (sd_notify(3)): one datagram of newline-separated
// VAR=value assignments to the socket in $NOTIFY_SOCKET. The unit runs with
// Type=notify, so systemd holds `systemctl start` (and the units ordered
// after sluice) until READY=1, which the agent sends once every component
// has started; a configuration that fails never sends it and the process
// exits 1 with its FILE:LINE lines on stderr, in the journal.
type notifier struct {
	addr *net.UnixAddr
	// watchdog is half of WatchdogSec, how often WATCHDOG=1 is due; 0 when
	// the unit sets no watchdog.
	watchdog time.Duration

	// health is the agent's status, as /healthz reads it.
	health func() metrics.Status

	mu     sync.Mutex
	reload string // how the last reload failed, or ""
	status string // the last STATUS= sent
}

// notifierFromEnv returns the notifier $NOTIFY_SOCKET asks for, or nil when
// the agent does not run under a service manager that listens. It unsets
// the protocol's variables, as sd_notify(3) offers to, so that the commands
// an exec source runs do not inherit them and speak for the agent.
func notifierFromEnv() *notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	usec, pid := os.Getenv("WATCHDOG_USEC"), os.Getenv("WATCHDOG_PID")
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} {
		_ = os.Unsetenv(k) // fails only for an invalid name
	}
	// A path or, with a leading @, a name in Linux's abstract namespace,
	// which net's unix sockets understand as such.
	if path == "" || (path[0] != '/' && path[0] != '@') {
		return nil
	}
	n := &notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
	if us, err := strconv.ParseInt(usec, 10, 64); err == nil && us > 0 &&
		(pid == "" || pid == strconv.Itoa(os.Getpid())) {
		n.watchdog = time.Duration(us) * time.Microsecond / 2
	}
	return n
}

// send sends one notification. A failure is returned, never fatal: the
// agent runs on whether or not its manager listens.
func (n *notifier) send(lines ...string) error {
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("notify %s: %w", n.addr.Name, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(lines, "\n"))); err != nil {
		return fmt.Errorf("notify %s: %w", n.addr.Name, err)
	}
	return nil
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, which systemd 253 and
// later want beside RELOADING=1 to tell this reload from an earlier one.
func monotonicUsec() string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return "0"
	}
	return strconv.FormatInt(ts.Nano()/1000, 10)
}

// lifecycle is the agent's Options.Notify: READY=1 once started and after
// each reload, RELOADING=1 when a reload begins. A reload that failed (a
// configuration with problems: the running one stays) is said in STATUS=,
// which `systemctl status` shows, until a reload succeeds.
func (n *notifier) lifecycle(ev agent.Lifecycle, err error) {
	switch ev {
	case agent.Reloading:
		_ = n.send("RELOADING=1", "MONOTONIC_USEC="+monotonicUsec(), "STATUS=reloading the configuration")
	case agent.Ready:
		n.mu.Lock()
		n.reload = ""
		if err != nil {
			first, _, _ := strings.Cut(err.Error(), "\n")
			n.reload = "last reload failed: " + first
		}
		n.mu.Unlock()
		_ = n.send("READY=1", "STATUS="+n.statusLine(true))
	}
}

// stopping is sent the moment a stop is asked for: systemd then knows the
// drain that follows is the stop it asked for.
func (n *notifier) stopping() {
	_ = n.send("STOPPING=1", "STATUS=stopping: draining the channels")
}

// statusLine is the STATUS= text: "running", or the health problems as
// /healthz says them, and the failed reload if any. It records the line as
// sent; unless force is set it returns "" when the line did not change.
func (n *notifier) statusLine(force bool) string {
	st := n.health()
	line := "running"
	if !st.Healthy() {
		line = "unhealthy: " + strings.Join(st.Problems(), "; ")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reload != "" {
		line += " (" + n.reload + ")"
	}
	line = strings.ReplaceAll(line, "\n", " ")
	if line == n.status && !force {
		return ""
	}
	n.status = line
	return line
}

// statusEvery is how often STATUS= follows the agent's health.
const statusEvery = 5 * time.Second

// watch keeps systemd's watchdog fed and STATUS= current until ctx ends.
//
// WATCHDOG=1 says the agent is alive, not that it is healthy: it is sent
// each time status (the /healthz answer) returns, whatever it says. A sink
// whose downstream is down makes the agent unhealthy, and a restart would
// not bring the downstream back: it would only stop intake and, with a
// memory channel, drop what the drain could not deliver. What a restart
// does cure is an agent that no longer answers (a deadlock); then the pings
// stop and systemd kills it with WatchdogSignal (SIGABRT: Go prints every
// goroutine's stack to the journal first) and restarts it.
func (n *notifier) watch(ctx context.Context) {
	every := statusEvery
	if n.watchdog > 0 && n.watchdog < every {
		every = n.watchdog
	}
	t := time.NewTicker(every)
	defer t.Stop()
	lastStatus := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := n.health() // blocks when the agent is wedged: no ping then
		var msg []string
		if n.watchdog > 0 {
			msg = append(msg, "WATCHDOG=1")
		}
		if st.State == "running" && time.Since(lastStatus) >= statusEvery {
			lastStatus = time.Now()
			if line := n.statusLine(false); line != "" {
				msg = append(msg, "STATUS="+line)
			}
		}
		if len(msg) > 0 {
			_ = n.send(msg...)
		}
	}
}
