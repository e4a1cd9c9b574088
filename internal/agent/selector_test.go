package agent_test

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// The User Guide's load_balancing selector through a running agent: netcat
// into four channels, each drained by its own null sink; every line is
// accepted once and round robin gives each channel a quarter.
func TestLoadBalancingSelectorAgent(t *testing.T) {
	port := testutil.FreePort(t)
	conf := fmt.Sprintf(`a1.sources = r1
a1.channels = c1 c2 c3 c4
a1.sinks = k1 k2 k3 k4
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1 c2 c3 c4
a1.sources.r1.selector.type = load_balancing
a1.sources.r1.selector.policy = round_robin
`, port)
	for i := 1; i <= 4; i++ {
		conf += fmt.Sprintf("a1.channels.c%[1]d.type = memory\na1.sinks.k%[1]d.type = null\na1.sinks.k%[1]d.channel = c%[1]d\n", i)
	}
	file := filepath.Join(t.TempDir(), "lb.properties")
	testutil.WriteFile(t, file, conf)
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0"})

	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Repeat("line\n", 400))); err != nil {
		t.Fatal(err)
	}
	base := "http://" + a.HTTPAddr()
	testutil.WaitFor(t, 20*time.Second, "every sink to deliver", func() bool {
		m := flumeMetrics(t, base)
		n := 0
		for i := 1; i <= 4; i++ {
			var k int
			if _, err := fmt.Sscan(m[fmt.Sprintf("SINK.k%d", i)]["EventDrainSuccessCount"], &k); err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n == 400
	})
	m := flumeMetrics(t, base)
	for i := 1; i <= 4; i++ {
		if got := m[fmt.Sprintf("CHANNEL.c%d", i)]["EventPutSuccessCount"]; got != "100" {
			t.Errorf("channel c%d took %s of 400 events, want 100 (round robin)", i, got)
		}
	}
	if got := m["SOURCE.r1"]["EventAcceptedCount"]; got != "400" {
		t.Errorf("source accepted %s, want 400", got)
	}
}
