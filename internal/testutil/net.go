package testutil

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// WaitAccepting dials addr until a TCP connection is accepted (a server
// that has started listening), for up to limit, and says why not when it
// never is.
func WaitAccepting(addr string, limit time.Duration) error {
	var err error
	ok := Eventually(func() bool {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, time.Second); err != nil {
			return false
		}
		_ = c.Close() // only a probe
		return true
	}, limit)
	if !ok {
		return fmt.Errorf("nothing accepts connections on %s after %v: %w", addr, limit, err)
	}
	return nil
}

// NextResult waits up to d for the next result ServeConns sends (a
// connection's serve returned), and fails the test when none comes.
func NextResult(t testing.TB, results <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-results:
		return err
	case <-time.After(d):
		t.Fatalf("no connection ended within %v", d)
		return nil
	}
}
