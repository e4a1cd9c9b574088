package testutil

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// FreePort returns a port on 127.0.0.1 that was free for TCP and UDP a
// moment ago, for a component that must be configured with a port before it
// listens (an agent process, a peer's config).
//
// The port is drawn at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), not taken from a
// listen on port 0: a port from the ephemeral range is also what the kernel
// gives the next outgoing connection of any test running in parallel, which
// then holds it when the agent binds it ("address already in use"). A port
// is handed out once per test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	freePorts.Lock()
	defer freePorts.Unlock()
	for range 1000 {
		port := freePortMin + rand.IntN(freePortMax-freePortMin+1)
		if freePorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		_ = ln.Close() // only a probe
		if err != nil {
			continue
		}
		_ = pc.Close()
		freePorts.given[port] = true
		return port
	}
	t.Fatalf("no free port in %d-%d after 1000 tries", freePortMin, freePortMax)
	return 0
}

// The range FreePort draws from: below the default ephemeral range, above
// the ports services usually take.
const freePortMin, freePortMax = 20000, 32767

var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// RequirePerf skips a performance measurement unless SLUICE_PERF is set:
// they take tens of seconds and want a quiet machine.
func RequirePerf(t testing.TB) {
	if os.Getenv("SLUICE_PERF") == "" {
		t.Skip("set SLUICE_PERF=1 to run performance measurements")
	}
}

// EnvInt returns the positive integer in the environment variable name, or def.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// HealthOf is x's Health, or, for a component that does not report its
// health (flow.HealthReporter), a func that says so, so that a test checks
// the rest regardless.
func HealthOf(x any) func() error {
	if h, ok := x.(flow.HealthReporter); ok {
		return h.Health
	}
	return func() error { return fmt.Errorf("%T does not report its health (flow.HealthReporter)", x) }
}

// ServeConns accepts connections on a loopback port and runs serve on each
// in its own goroutine, closing the connection when serve returns and then
// sending serve's result to results (buffered for 16). At the end of the
// test ctx is cancelled, the listener closed and every serve waited for.
func ServeConns(t testing.TB, serve func(ctx context.Context, c net.Conn) error) (addr string, results <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := serve(ctx, c)
				_ = c.Close()
				ch <- err
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), ch
}

// Metric is the value set shows for the attribute name (a counter or a
// gauge, as /metrics prints it), or "" when it has none.
func Metric(set *metrics.Set, name string) string {
	v := ""
	set.Each(func(n, val string) {
		if n == name {
			v = val
		}
	})
	return v
}

// ComponentMetric is attribute attr of the metric set of the component
// of kind and name in reg, or "" when there is no such set or attribute.
func ComponentMetric(reg *metrics.Registry, kind metrics.Kind, name, attr string) string {
	for _, s := range reg.Sets() {
		if s.Kind == kind && s.Name == name {
			return Metric(s, attr)
		}
	}
	return ""
}

// Counter is ComponentMetric read as the integer a counter is, or -1 when
// there is no such counter.
func Counter(reg *metrics.Registry, kind metrics.Kind, name, attr string) int64 {
	v, err := strconv.ParseInt(ComponentMetric(reg, kind, name, attr), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// MemoryDir returns a new directory on a memory filesystem (/dev/shm, where
// Linux has one), removed when the test ends, else t.TempDir(). It is for
// tests of what a process kill or restart does to a file channel, which
// the page cache keeps whether or not the data reached a disk: there a
// shared CI disk whose fsyncs take seconds only times the test out and
// tests nothing more.
func MemoryDir(t testing.TB) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "sluice-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
