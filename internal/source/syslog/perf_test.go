package syslogsource_test

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// startAgent runs an agent with a syslog source of type typ on a free port,
// a memory channel and a null sink, and returns it with the port.
func startAgent(t *testing.T, typ string, batch int) (*agent.Agent, int) {
	t.Helper()
	port := testutil.FreePort(t)
	portKey := "port"
	if strings.Contains(strings.ToLower(typ), "multiport") {
		portKey = "ports"
	}
	conf := fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = %s
a1.sources.r1.host = 127.0.0.1
a1.sources.r1.%s = %d
a1.sources.r1.batchSize = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 100000
a1.channels.c1.transactionCapacity = %d
a1.sinks.k1.type = null
a1.sinks.k1.batchSize = %d
a1.sinks.k1.channel = c1
`, typ, portKey, port, batch, batch, batch)
	a := agenttest.StartConf(t, conf)
	return a, port
}

// TestAgentTypes starts each syslog source by its Flume alias and by its
// Flume class name in a whole agent and sends it one message.
func TestAgentTypes(t *testing.T) {
	for _, typ := range []string{"syslogtcp", "org.apache.flume.source.SyslogTcpSource", "multiport_syslogtcp",
		"org.apache.flume.source.MultiportSyslogTCPSource"} {
		t.Run(typ, func(t *testing.T) {
			a, port := startAgent(t, typ, 100)
			c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("<13>Jun 15 11:22:33 host hello\n"))
			c.Close()
			deadline := time.Now().Add(5 * time.Second)
			for testutil.Counter(a.Metrics(), metrics.KindSink, "k1", "EventDrainSuccessCount") != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the message did not reach the sink")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// TestPerfTCP measures syslogtcp -> memory -> null throughput in a whole
// agent: conns connections each send n RFC 5424 messages (as logger writes
// them, ~110 bytes) as fast as they can. Opt in with SLUICE_PERF=1:
//
//	SLUICE_PERF=1 go test -run TestPerfTCP -v ./internal/source/syslog/
func TestPerfTCP(t *testing.T) {
	testutil.RequirePerf(t)
	for _, c := range []struct {
		typ       string
		framing   string
		conns, n  int
		batchSize int
	}{
		{"syslogtcp", "newline", 4, 250000, 1000},
		{"syslogtcp", "octet", 4, 250000, 1000},
		{"multiport_syslogtcp", "newline", 4, 250000, 1000},
	} {
		t.Run(c.typ+"-"+c.framing, func(t *testing.T) {
			a, port := startAgent(t, c.typ, c.batchSize)
			payloads := make([][]byte, c.conns)
			for i := range payloads {
				var b strings.Builder
				for j := range c.n {
					m := fmt.Sprintf("<134>1 2026-12-02T13:06:07.%06d+00:00 web-%d app 4242 - - request %d served in 12ms", j%1000000, i, j)
					if c.framing == "octet" {
						b.WriteString(strconv.Itoa(len(m)) + " " + m)
					} else {
						b.WriteString(m + "\n")
					}
				}
				payloads[i] = []byte(b.String())
			}
			total := int64(c.conns * c.n)
			cpu0 := testutil.CPUTime()
			start := time.Now()
			var wg sync.WaitGroup
			for _, p := range payloads {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
					if err != nil {
						t.Error(err)
						return
					}
					defer conn.Close()
					if _, err := conn.Write(p); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			deadline := time.Now().Add(2 * time.Minute)
			for testutil.Counter(a.Metrics(), metrics.KindSink, "k1", "EventDrainSuccessCount") < total {
				if time.Now().After(deadline) {
					t.Fatalf("only %d of %d events drained", testutil.Counter(a.Metrics(), metrics.KindSink, "k1", "EventDrainSuccessCount"), total)
				}
				time.Sleep(2 * time.Millisecond)
			}
			el := time.Since(start)
			cpu := testutil.CPUTime() - cpu0
			bytes := 0
			for _, p := range payloads {
				bytes += len(p)
			}
			t.Logf("%s %s: %d events in %v: %.0f events/s, %.1f MiB/s; CPU (whole process, senders included) %.2f µs/event, %.2f cores",
				c.typ, c.framing, total, el.Round(time.Millisecond), float64(total)/el.Seconds(), float64(bytes)/el.Seconds()/(1<<20),
				float64(cpu.Microseconds())/float64(total), cpu.Seconds()/el.Seconds())
		})
	}
}
