package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a component that must be configured with a port before it listens.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

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
