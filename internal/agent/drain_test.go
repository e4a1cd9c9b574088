package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// collector takes one event per request after a pause, and records the
// bodies and the most requests it ever had in progress at once.
type collector struct {
	pause    time.Duration
	inFlight atomic.Int32
	maxIn    atomic.Int32

	mu     sync.Mutex
	bodies map[string]int
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for m := c.maxIn.Load(); n > m && !c.maxIn.CompareAndSwap(m, n); m = c.maxIn.Load() {
	}
	body, _ := io.ReadAll(r.Body)
	time.Sleep(c.pause)
	c.mu.Lock()
	c.bodies[string(body)]++
	c.mu.Unlock()
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bodies)
}

// sinkTo is r1 (netcat on port) -> channel ch (memory) -> k1 (http to url).
func sinkTo(port int, ch, url string) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = %[2]s
a1.sinks = k1
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %[1]d
a1.sources.r1.channels = %[2]s
a1.channels.%[2]s.type = memory
a1.channels.%[2]s.capacity = 10000
a1.sinks.k1.type = http
a1.sinks.k1.endpoint = %[3]s
a1.sinks.k1.channel = %[2]s
`, port, ch, url)
}

// TestReloadHoldsNamesOfDrain: a reload moves sink k1 from channel c1,
// which it removes, to a new channel c2. The old k1 drains c1 in the
// background; the new k1 (same name, same downstream) waits for that drain,
// and says so with the events left, while the new c2 and r1 run at once.
// The two k1 never run together, and every event arrives.
func TestReloadHoldsNamesOfDrain(t *testing.T) {
	col := &collector{pause: 5 * time.Millisecond, bodies: map[string]int{}}
	srv := httptest.NewServer(col)
	defer srv.Close()
	port := testutil.FreePort(t)
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, sinkTo(port, "c1", srv.URL))
	a := agenttest.Start(t, agent.Options{File: file, ShutdownTimeout: time.Minute})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	sendLines(t, addr, 0, 400)

	testutil.WriteFile(t, file, sinkTo(port, "c2", srv.URL))
	if err := a.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	byName := func() map[string]metrics.ComponentStatus {
		m := map[string]metrics.ComponentStatus{}
		for _, c := range a.Status().Components {
			m[c.Kind+" "+c.Name] = c
		}
		return m
	}
	st := byName()
	if c := st["channel c1"]; c.State != "draining" || c.Left == nil || *c.Left == 0 || !strings.HasPrefix(c.Note, "removed by a reload; draining: ") {
		t.Fatalf("channel c1 after the reload: %+v, want draining with events left", c)
	}
	if c := st["sink k1"]; c.State != "starting" || c.Left == nil ||
		!strings.Contains(c.Reason, "waiting for the sink k1 of the previous configuration to drain channel c1 (") {
		t.Errorf("sink k1 after the reload: %+v, want waiting for the drain with the events left", c)
	}
	if c := st["channel c2"]; c.State != "running" {
		t.Errorf("channel c2 after the reload: %+v, want running at once", c)
	}
	graph := a.Graph()
	var chans []string
	for _, c := range graph.Channels {
		chans = append(chans, c.Name)
	}
	if fmt.Sprint(chans) != "[c2 c1]" {
		t.Errorf("graph channels %v during the drain, want [c2 c1] (c1 drawn while it drains)", chans)
	}
	sendLines(t, addr, 400, 50) // into c2 at once, delivered after the drain
	testutil.WaitFor(t, 20*time.Second, "450 events delivered", func() bool { return col.count() == 450 })
	testutil.WaitFor(t, 20*time.Second, "sink k1 running", func() bool { return byName()["sink k1"].State == "running" })
	st = byName()
	if _, ok := st["channel c1"]; ok || len(a.Graph().Channels) != 1 {
		t.Errorf("channel c1 still shown after its drain: %+v", st)
	}
	if m := col.maxIn.Load(); m != 1 {
		t.Errorf("%d requests at once: the old and the new k1 ran together", m)
	}
}
