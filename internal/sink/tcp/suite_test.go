package tcpsink

import (
	"bufio"
	"context"
	"net"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, func() []string) {
		var mu sync.Mutex
		var lines []string
		addr, _ := testutil.ServeConns(t, func(_ context.Context, c net.Conn) error {
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
			}
			return nil
		})
		host, port, _ := net.SplitHostPort(addr)
		s, err := New(env, config.FromMap("a1.sinks.k1.", map[string]string{
			"hostname": host, "port": port}))
		if err != nil {
			t.Fatal(err)
		}
		return s, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), lines...)
		}
	})
}
