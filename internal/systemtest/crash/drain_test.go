package crash

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/status"
	"github.com/sluicehq/sluice/internal/testutil"
)

// slowCollector is an HTTP server that takes one event per request, at most
// one request at a time, each after a pause: a downstream slower than the
// load. The http sink commits an event once its request is answered, so the
// events a channel holds are exactly those acknowledged and not yet
// received (give or take the one request in flight).
type slowCollector struct {
	srv   *httptest.Server
	pause time.Duration

	mu   sync.Mutex
	seen map[uint64]int
}

func newSlowCollector(pause time.Duration) *slowCollector {
	c := &slowCollector{pause: pause, seen: map[uint64]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seq, _, err := bench.ParseLine(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		time.Sleep(c.pause)
		c.seen[seq]++
		c.mu.Unlock()
	}))
	return c
}

func (c *slowCollector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

func (c *slowCollector) missing(acked []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range acked {
		if c.seen[s] == 0 {
			n++
		}
	}
	return n
}

// route is avro source rN on port -> memory channel cN -> sink kN, an http
// sink to endpoint.
func route(i, port int, endpoint string) string {
	return fmt.Sprintf(`a1.sources.r%[1]d.type = avro
a1.sources.r%[1]d.bind = 127.0.0.1
a1.sources.r%[1]d.port = %[2]d
a1.sources.r%[1]d.channels = c%[1]d
a1.channels.c%[1]d.type = memory
a1.channels.c%[1]d.capacity = 100000
a1.channels.c%[1]d.transactionCapacity = 1000
a1.sinks.k%[1]d.type = http
a1.sinks.k%[1]d.endpoint = %[3]s
a1.sinks.k%[1]d.channel = c%[1]d
`, i, port, endpoint)
}

// healthJSON is /healthz?format=json.
type healthJSON struct {
	Healthy bool `json:"healthy"`
	metrics.Status
}

func (h healthJSON) component(kind, name string) (metrics.ComponentStatus, bool) {
	for _, c := range h.Components {
		if c.Kind == kind && c.Name == name {
			return c, true
		}
	}
	return metrics.ComponentStatus{}, false
}

func getHealthJSON(addr string) (healthJSON, error) {
	var h healthJSON
	resp, err := http.Get("http://" + addr + "/healthz?format=json")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// drainPoll is one look at a draining agent: /healthz (text and JSON), and
// how many events the collector had before and after.
type drainPoll struct {
	code          int
	text          string
	json          healthJSON
	before, after int
}

// pollDrain reads /healthz and its JSON every 200 ms while cond holds
// (at most d) and returns what it saw.
func pollDrain(t *testing.T, addr string, col *slowCollector, d time.Duration, cond func() bool) []drainPoll {
	t.Helper()
	var polls []drainPoll
	for end := time.Now().Add(d); time.Now().Before(end) && cond(); time.Sleep(200 * time.Millisecond) {
		p := drainPoll{before: col.count()}
		var err error
		if p.json, err = getHealthJSON(addr); err != nil {
			continue // the agent may have just stopped
		}
		p.after = col.count()
		p.code, p.text = healthz(t, addr)
		polls = append(polls, p)
	}
	return polls
}

// checkDraining checks that the polls show channel ch and sink k draining,
// with the count of events ch holds: between what was acknowledged and not
// yet received after the request and before it (plus the request in
// flight), never growing. It returns how many polls showed a drain.
func checkDraining(t *testing.T, polls []drainPoll, ch, k string, acked int, note string) int {
	t.Helper()
	seen := 0
	last := int64(acked)
	for i, p := range polls {
		c, okc := p.json.component("channel", ch)
		s, oks := p.json.component("sink", k)
		if !okc || !oks || c.State != "draining" {
			continue
		}
		seen++
		if s.State != "draining" {
			t.Errorf("poll %d: channel %s drains but sink %s is %q (%s)", i, ch, k, s.State, s.Reason)
		}
		for _, x := range []metrics.ComponentStatus{c, s} {
			if x.Left == nil {
				t.Errorf("poll %d: %s %s drains with no count of events left: %+v", i, x.Kind, x.Name, x)
				continue
			}
			left := *x.Left
			if lo, hi := int64(acked-p.after-1), int64(acked-p.before+1); left < lo || left > hi {
				t.Errorf("poll %d: %s %s: %d events left; %d acknowledged and %d..%d received, so %d..%d", i, x.Kind, x.Name, left, acked, p.before, p.after, lo, hi)
			}
			if !strings.Contains(x.Note, note) || !strings.Contains(x.Note, fmt.Sprintf("%d events left", left)) {
				t.Errorf("poll %d: %s %s: note %q, want %q and the count %d", i, x.Kind, x.Name, x.Note, note, left)
			}
			if strings.Contains(x.Reason, "group") || strings.Contains(x.Note, "group") {
				t.Errorf("poll %d: %s %s speaks of a group, and there is none: %+v", i, x.Kind, x.Name, x)
			}
		}
		if left := *c.Left; left > last {
			t.Errorf("poll %d: channel %s holds %d events, more than the %d of the poll before", i, ch, left, last)
		} else {
			last = left
		}
		if want := "sink " + k + ": " + note + "draining channel " + ch + ": "; !strings.Contains(p.text, want) {
			t.Errorf("poll %d: /healthz says\n%s\nwant a line %q", i, p.text, want)
		}
	}
	return seen
}

// TestStopShowsDrain: SIGTERM with a downstream slower than the backlog.
// While the sinks drain, /healthz and its JSON say that the channel and
// its sink drain, with the events left, which match what the downstream
// has not received yet; the lone sink is not said to wait for a group.
// Every acknowledged event arrives and the exit status is 0.
func TestStopShowsDrain(t *testing.T) {
	dir := t.TempDir()
	col := newSlowCollector(time.Millisecond)
	defer col.srv.Close()
	port, httpPort := testutil.FreePort(t), testutil.FreePort(t)
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	conf := filepath.Join(dir, "a.properties")
	testutil.WriteFile(t, conf, "a1.sources = r1\na1.channels = c1\na1.sinks = k1\n"+route(1, port, col.srv.URL))
	p := startAgent(t, conf, "--shutdown-timeout", "60", "--http", httpAddr)
	if err := testutil.WaitAccepting(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	acked := sendAcked(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 0, 4000)
	p.Signal(syscall.SIGTERM)
	p.WaitLog("intake closed: sources refuse new events from now on", 10*time.Second)
	stopped := func() bool {
		select {
		case <-p.Done():
			return false
		default:
			return true
		}
	}
	polls := pollDrain(t, httpAddr, col, 60*time.Second, stopped)
	code := p.Exit(30 * time.Second)
	seen := checkDraining(t, polls, "c1", "k1", len(acked), "")
	t.Logf("%d polls, %d of them during the drain; exit %d", len(polls), seen, code)
	if seen < 2 {
		t.Fatalf("only %d polls showed the drain (want 2 or more): %+v", seen, polls)
	}
	for i, p := range polls {
		if p.json.State != "stopping" || p.json.Healthy || p.code != 503 || !strings.HasPrefix(p.text, "agent a1 is stopping\n") {
			t.Errorf("poll %d: %d %q, state %q healthy %v: want 503, agent a1 is stopping", i, p.code, p.text, p.json.State, p.json.Healthy)
		}
	}
	if code != 0 {
		t.Errorf("exit %d, want 0: the channel was drained", code)
	}
	if m := col.missing(acked); m > 0 {
		t.Errorf("%d acknowledged events never arrived", m)
	}
}

// TestReloadDrainsInBackground: a reload removes a route whose downstream
// is slower than its backlog. The reload is done at once: the removed
// channel and its sink drain in the background, shown as draining with the
// events left by /healthz (200: the running graph is healthy), its JSON,
// /api/status and `sluice top`. A second reload during that drain, adding
// an unrelated source, is applied at once (the new source accepts events
// within a second) while the drain goes on, and every event acknowledged
// into the removed channel arrives.
func TestReloadDrainsInBackground(t *testing.T) {
	dir := t.TempDir()
	col := newSlowCollector(time.Millisecond)
	defer col.srv.Close()
	live := newSlowCollector(0)
	defer live.srv.Close()
	p1, p2, p3, httpPort := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	httpAddr := addr(httpPort)
	conf := filepath.Join(dir, "a.properties")
	kept := route(1, p1, live.srv.URL)
	testutil.WriteFile(t, conf, "a1.sources = r1 r2\na1.channels = c1 c2\na1.sinks = k1 k2\n"+kept+route(2, p2, col.srv.URL))
	p := startAgent(t, conf, "--shutdown-timeout", "60", "--http", httpAddr)
	for _, port := range []int{p1, p2} {
		if err := testutil.WaitAccepting(addr(port), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	acked := sendAcked(t, addr(p2), 0, 5000)

	testutil.WriteFile(t, conf, "a1.sources = r1\na1.channels = c1\na1.sinks = k1\n"+kept)
	hup := time.Now()
	p.Signal(syscall.SIGHUP)
	rec := p.WaitLog("configuration reloaded", 10*time.Second)
	t.Logf("first reload logged %v after SIGHUP, with %d of %d events received", time.Since(hup).Round(time.Millisecond), col.count(), len(acked))
	if rec["draining"] != "c2" {
		t.Errorf("reload record %v: want draining=c2", rec)
	}
	draining := func() bool { return len(p.Log.Records("channels a reload removed are drained")) == 0 }
	if !draining() {
		t.Fatal("the drain ended before it could be seen; the test proves nothing")
	}

	// Seen from outside: /api/status (the page) and sluice top.
	var snap status.Snapshot
	resp, err := http.Get("http://" + httpAddr + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&snap)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]status.Node{}
	for _, n := range snap.Nodes {
		nodes[n.ID] = n
	}
	for _, id := range []string{"channel/c2", "sink/k2"} {
		if n := nodes[id]; n.State != "draining" || n.Left == nil || !strings.Contains(n.Note, "removed by a reload; draining") {
			t.Errorf("/api/status: %s is %+v, want draining with the events left", id, n)
		}
	}
	if !snap.Healthy {
		t.Errorf("/api/status: unhealthy during the drain: %v", snap.Problems)
	}
	top, err := exec.Command(testutil.AgentBinary(t), "top", "--once", "--http", httpAddr).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^sink +k2 +http +draining .*removed by a reload; draining channel c2: \d+ events left`).Match(top) {
		t.Errorf("sluice top --once: %v\n%s", err, top)
	}

	// A second reload during the drain adds a source: it takes effect at once.
	testutil.WriteFile(t, conf, "a1.sources = r1 r3\na1.channels = c1\na1.sinks = k1\n"+kept+
		fmt.Sprintf("a1.sources.r3.type = avro\na1.sources.r3.bind = 127.0.0.1\na1.sources.r3.port = %d\na1.sources.r3.channels = c1\n", p3))
	hup = time.Now()
	p.Signal(syscall.SIGHUP)
	var took time.Duration
	for {
		if st, err := sendOne(addr(p3), 900000); err == nil && st == avrorpc.OK {
			took = time.Since(hup)
			break
		}
		if time.Since(hup) > 30*time.Second {
			t.Fatal("the source added by the second reload never accepted an event")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stillDraining := draining()
	t.Logf("the second reload's source accepted an event %v after SIGHUP; the drain still ran: %v (%d of %d received)",
		took.Round(time.Millisecond), stillDraining, col.count(), len(acked))
	if took > time.Second {
		t.Errorf("the source added during the drain accepted its first event %v after SIGHUP, want within 1 s", took.Round(time.Millisecond))
	}
	if !stillDraining {
		t.Error("the drain ended before the second reload was tried; the test proves nothing")
	}

	polls := pollDrain(t, httpAddr, col, 60*time.Second, draining)
	seen := checkDraining(t, polls, "c2", "k2", len(acked), "removed by a reload; ")
	t.Logf("%d polls during the drain", seen)
	if seen < 1 {
		t.Errorf("no poll showed the drain: %+v", polls)
	}
	for i, p := range polls {
		if _, ok := p.json.component("channel", "c2"); ok && (p.code != 200 || !p.json.Healthy || !strings.HasPrefix(p.text, "ok\n")) {
			t.Errorf("poll %d: /healthz %d %q during the background drain, want 200 ok and the drain's lines", i, p.code, p.text)
		}
	}
	testutil.WaitFor(t, 60*time.Second, "the drain ends", func() bool { return !draining() })
	if m := col.missing(acked); m > 0 {
		t.Errorf("%d events acknowledged into the removed channel never arrived", m)
	}
	h, err := getHealthJSON(httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range h.Components {
		if c.Name == "c2" || c.Name == "k2" || c.State != "running" {
			t.Errorf("after the drain: %+v", c)
		}
	}
	if code, body := healthz(t, httpAddr); code != 200 || body != "ok\n" {
		t.Errorf("/healthz after the drain: %d %q", code, body)
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(30 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
}
