package tcpsink

import (
	"bufio"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, func() []string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var lines []string
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
					defer c.Close()
					sc := bufio.NewScanner(c)
					for sc.Scan() {
						mu.Lock()
						lines = append(lines, sc.Text())
						mu.Unlock()
					}
				}()
			}
		}()
		t.Cleanup(func() { ln.Close(); wg.Wait() })
		port := ln.Addr().(*net.TCPAddr).Port
		s, err := New(env, config.FromMap("a1.sinks.k1.", map[string]string{
			"hostname": "127.0.0.1", "port": strconv.Itoa(port)}))
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
