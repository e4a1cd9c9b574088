package status

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/redact"
)

// fakeAgent is an Agent whose graph and status the test sets.
type fakeAgent struct {
	mu sync.Mutex
	g  Graph
	st metrics.Status
}

func (a *fakeAgent) Graph() Graph {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.g
}

func (a *fakeAgent) Status() metrics.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// testAgent is r1 (netcat, one interceptor) -> c1 (memory) -> group g1
// (failover: k1, k2), with counters registered in a fresh registry.
func testAgent() (*fakeAgent, *metrics.Registry, *metrics.SourceCounters, *metrics.ChannelCounters, *metrics.SinkCounters) {
	reg := metrics.NewRegistry("a1")
	src := metrics.NewSourceCounters("r1", "netcat")
	ch := metrics.NewChannelCounters("c1", "memory")
	size := int64(0)
	ch.SetSize(func() int64 { return size }, func() int64 { return 1000 })
	k1 := metrics.NewSinkCounters("k1", "null")
	k2 := metrics.NewSinkCounters("k2", "null")
	for _, s := range []*metrics.Set{src.Set, ch.Set, k1.Set, k2.Set} {
		reg.Add(s)
	}
	a := &fakeAgent{
		g: Graph{
			Sources: []SourceSpec{{Name: "r1", Type: "netcat", Interceptors: []Named{{"ts", "timestamp"}},
				Selector: SelectorSpec{Type: "replicating"}, Channels: []string{"c1"}}},
			Channels:   []ChannelSpec{{Name: "c1", Type: "memory", Bytes: func() (int64, int64) { return 2048, 1 << 20 }}},
			SinkGroups: []GroupSpec{{Name: "g1", Processor: "failover", Sinks: []string{"k1", "k2"}}},
			Sinks:      []SinkSpec{{Name: "k1", Type: "null", Channel: "c1", Group: "g1"}, {Name: "k2", Type: "null", Channel: "c1", Group: "g1"}},
		},
		st: metrics.Status{Agent: "a1", State: "running", Components: []metrics.ComponentStatus{
			{Kind: "source", Name: "r1", Type: "netcat", State: "running"},
			{Kind: "channel", Name: "c1", Type: "memory", State: "running"},
			{Kind: "sink", Name: "k1", Type: "null", State: "running", Reason: "cannot reach downstream"},
			{Kind: "sink", Name: "k2", Type: "null", State: "running"},
		}},
	}
	return a, reg, src, ch, k1
}

func node(t *testing.T, s Snapshot, id string) Node {
	t.Helper()
	for _, n := range s.Nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("no node %s in %+v", id, s.Nodes)
	return Node{}
}

func TestSamplerRatesLatencyWindowAndHealth(t *testing.T) {
	a, reg, src, _, k1 := testAgent()
	hist := reg.Latency(metrics.StageSource, "r1")
	for range 1000 {
		hist.Observe(50 * time.Millisecond) // before the first sample: not in any window
	}
	s := NewSampler(a, reg, time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	s.Sample(t0)
	src.EventReceived.Add(2000)
	src.EventAccepted.Add(1800)
	src.ChannelWriteFail.Add(3)
	k1.EventDrainSuccess.Add(500)
	for i := range 100 {
		hist.Observe(time.Duration(100+i) * time.Microsecond)
	}
	s.Sample(t0.Add(2 * time.Second))
	snap := s.Snapshot()

	r1 := node(t, snap, "source/r1")
	if r1.In == nil || *r1.In != 1000 || *r1.Out != 900 {
		t.Fatalf("source rates in %v out %v, want 1000 and 900 a second", r1.In, r1.Out)
	}
	if r1.Errors != 3 || r1.ErrorRate != 1.5 {
		t.Errorf("source errors %d (+%v/s), want 3 (+1.5/s)", r1.Errors, r1.ErrorRate)
	}
	if len(r1.Latency) != 1 || r1.Latency[0].Count != 100 || r1.Latency[0].P99 > int64(210*time.Microsecond) {
		t.Errorf("source latency %+v: want the 100 observations of the window (P99 about 199µs), not the older 50 ms", r1.Latency)
	}
	if len(r1.Interceptors) != 1 || r1.Counters["EventReceivedCount"] != "2000" {
		t.Errorf("source node %+v: want its interceptor and Flume counters", r1)
	}
	g1 := node(t, snap, "group/g1")
	if g1.Out == nil || *g1.Out != 250 {
		t.Errorf("group out %v, want the sum of its sinks (250/s)", g1.Out)
	}
	c1 := node(t, snap, "channel/c1")
	if c1.Fill == nil || c1.Fill.Capacity != 1000 || c1.Fill.Bytes == nil || *c1.Fill.Bytes != 2048 || *c1.Fill.ByteCapacity != 1<<20 {
		t.Errorf("channel fill %+v, want capacity 1000 and 2048 of 1 MiB bytes", c1.Fill)
	}
	k1n := node(t, snap, "sink/k1")
	if k1n.Reason != "cannot reach downstream" || snap.Healthy || len(snap.Problems) != 1 {
		t.Errorf("sink k1 reason %q, healthy %v, problems %q: the health now must show", k1n.Reason, snap.Healthy, snap.Problems)
	}

	// A minute later with nothing observed, the window is empty again.
	for i := range DefaultWindow {
		s.Sample(t0.Add(time.Duration(3+i) * time.Second))
	}
	if l := node(t, s.Snapshot(), "source/r1").Latency[0]; l.Count != 0 {
		t.Errorf("after a quiet minute the window holds %d observations, want 0", l.Count)
	}

	// A counter reset (a component restarted) gives no negative rate.
	src.Started()
	s.Sample(t0.Add(100 * time.Second))
	if r := node(t, s.Snapshot(), "source/r1"); *r.In < 0 {
		t.Errorf("rate after a counter reset: %v", *r.In)
	}
}

func TestSnapshotEdgesFollowTheGraph(t *testing.T) {
	a, reg, _, _, _ := testAgent()
	a.g.Sources[0].Channels = []string{"c1", "c2"}
	a.g.Sources[0].Selector = SelectorSpec{Type: "multiplexing", Header: "kind",
		Routes: map[string]string{"c1": "kind=web, default", "c2": "kind=audit (optional)"}, Optional: []string{"c2"}}
	a.g.Channels = append(a.g.Channels, ChannelSpec{Name: "c2", Type: "file"})
	a.g.Sinks = append(a.g.Sinks, SinkSpec{Name: "k3", Type: "logger", Channel: "c2"})
	s := NewSampler(a, reg, time.Second)
	s.Sample(time.Now())
	snap := s.Snapshot()
	var ids []string
	for _, n := range snap.Nodes {
		ids = append(ids, n.ID)
	}
	if got := strings.Join(ids, " "); got != "source/r1 selector/r1 channel/c1 channel/c2 group/g1 sink/k1 sink/k2 sink/k3" {
		t.Fatalf("nodes %s", got)
	}
	var edges []string
	for _, e := range snap.Edges {
		s := e.From + ">" + e.To
		if e.Label != "" {
			s += "[" + e.Label + "]"
		}
		if e.Optional {
			s += "?"
		}
		edges = append(edges, s)
	}
	want := "source/r1>selector/r1 selector/r1>channel/c1[kind=web, default] selector/r1>channel/c2[kind=audit (optional)]? " +
		"channel/c1>group/g1 group/g1>sink/k1 group/g1>sink/k2 channel/c2>sink/k3"
	if got := strings.Join(edges, " "); got != want {
		t.Fatalf("edges\n got %s\nwant %s", got, want)
	}
}

// Sinks are listed (and so stacked on the page) with each group's members
// together where the group's first member is, and sinks in no group keep
// their places around them; groups come in the same order.
func TestSnapshotOrdersSinksByGroup(t *testing.T) {
	a, reg, _, _, _ := testAgent()
	a.g.SinkGroups = []GroupSpec{{Name: "g1", Processor: "failover", Sinks: []string{"k2", "k4"}},
		{Name: "g0", Processor: "load_balance", Sinks: []string{"k5"}}, {Name: "empty", Processor: "failover"}}
	a.g.Sinks = []SinkSpec{{Name: "k1", Channel: "c1"}, {Name: "k4", Channel: "c1", Group: "g1"}, {Name: "k3", Channel: "c1"},
		{Name: "k2", Channel: "c1", Group: "g1"}, {Name: "k5", Channel: "c1", Group: "g0"}}
	s := NewSampler(a, reg, time.Second)
	s.Sample(time.Now())
	var ids []string
	for _, n := range s.Snapshot().Nodes {
		if n.Kind == "group" || n.Kind == "sink" {
			ids = append(ids, n.ID)
		}
	}
	want := "group/g1 group/g0 group/empty sink/k1 sink/k2 sink/k4 sink/k3 sink/k5"
	if got := strings.Join(ids, " "); got != want {
		t.Fatalf("order\n got %s\nwant %s", got, want)
	}
}

// A generator source has no input rate: what it puts out is its rate, in
// the node and in its history.
func TestGeneratorHasNoInputRate(t *testing.T) {
	a, reg, src, _, _ := testAgent()
	a.g.Sources[0].Type, a.g.Sources[0].Generator = "stress", true
	s := NewSampler(a, reg, time.Second)
	s.step = 2
	t0 := time.Now()
	s.Sample(t0)
	src.EventAccepted.Add(500)
	s.Sample(t0.Add(time.Second))
	n := node(t, s.Snapshot(), "source/r1")
	if !n.Generator || n.In != nil || n.Out == nil || *n.Out != 500 {
		t.Fatalf("generator node %+v: want no in, out 500", n)
	}
	h, _ := s.History("source/r1")
	if len(h.Points) != 1 || h.Points[0].Out != 250 || h.Points[0].In != 0 {
		t.Fatalf("history %+v: want one point with out 250 (500 over two samples)", h.Points)
	}
}

// A draining component's note and events left reach the snapshot, and
// its notes the snapshot's.
func TestSnapshotShowsDrain(t *testing.T) {
	a, reg, _, _, _ := testAgent()
	left := int64(1234)
	a.st.State = "stopping"
	a.st.Components[1] = metrics.ComponentStatus{Kind: "channel", Name: "c1", Type: "memory", State: "draining",
		Note: "draining: 1234 events left; deadline in 12s", Left: &left}
	s := NewSampler(a, reg, time.Second)
	s.Sample(time.Now())
	snap := s.Snapshot()
	n := node(t, snap, "channel/c1")
	if n.State != "draining" || n.Left == nil || *n.Left != left || n.Note != a.st.Components[1].Note || n.Reason != "" {
		t.Errorf("channel node %+v", n)
	}
	if len(snap.Notes) != 1 || snap.Notes[0] != "channel c1: draining: 1234 events left; deadline in 12s" {
		t.Errorf("notes %q", snap.Notes)
	}
}

// The history keeps a bounded ring of points, oldest first, however long
// the agent runs.
func TestHistoryIsBounded(t *testing.T) {
	a, reg, src, _, _ := testAgent()
	s := NewSampler(a, reg, time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range DefaultStep * (DefaultPoints + 50) {
		src.EventReceived.Add(10)
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	h, ok := s.History("source/r1")
	if !ok {
		t.Fatal("no history for source/r1")
	}
	if len(h.Points) != DefaultPoints || h.Step != DefaultStep {
		t.Fatalf("%d points every %v s, want %d every %d s", len(h.Points), h.Step, DefaultPoints, DefaultStep)
	}
	for i := 1; i < len(h.Points); i++ {
		if h.Points[i].Time <= h.Points[i-1].Time {
			t.Fatalf("points out of order at %d", i)
		}
	}
	if last := h.Points[len(h.Points)-1]; last.In != 10 || len(last.P50) != 1 || h.Stages[0] != "source" {
		t.Fatalf("last point %+v stages %v: want 10 events/s and the source stage", last, h.Stages)
	}
	if _, ok := s.History("source/nope"); ok {
		t.Fatal("history of a node that does not exist")
	}
}

func testServer(t *testing.T, allowTap bool) (*httptest.Server, *flow.Taps, *fakeAgent) {
	t.Helper()
	a, reg, _, _, _ := testAgent()
	a.g.Channels = append(a.g.Channels, ChannelSpec{Name: "r1", Type: "memory"}) // a channel named like the source
	s := NewSampler(a, reg, time.Second)
	s.Sample(time.Now())
	taps := flow.NewTaps()
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics here") })
	srv := httptest.NewServer(Handler(Config{Sampler: s, Taps: taps, AllowTap: allowTap, Next: next}))
	t.Cleanup(srv.Close)
	return srv, taps, a
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestHandlerRoutes(t *testing.T) {
	srv, _, _ := testServer(t, false)
	if code, body, h := get(t, srv.URL+"/"); code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, `src="ui/app.js"`) {
		t.Errorf("/: %d %q", code, body)
	}
	if code, body, _ := get(t, srv.URL+"/ui/app.js"); code != 200 || !strings.Contains(body, "api/status") {
		t.Errorf("/ui/app.js: %d", code)
	}
	code, body, _ := get(t, srv.URL+"/api/status")
	var snap Snapshot
	if err := json.Unmarshal([]byte(body), &snap); code != 200 || err != nil || snap.Agent != "a1" || len(snap.Nodes) == 0 || snap.Tap {
		t.Errorf("/api/status: %d %v %q", code, err, body)
	}
	if code, _, _ := get(t, srv.URL+"/api/history?id=channel/c1"); code != 200 {
		t.Errorf("/api/history: %d", code)
	}
	if code, _, _ := get(t, srv.URL+"/api/history?id=nope"); code != 404 {
		t.Errorf("/api/history of nothing: %d", code)
	}
	if code, body, _ := get(t, srv.URL+"/metrics"); code != 200 || body != "metrics here" {
		t.Errorf("/metrics must reach the metrics handler: %d %q", code, body)
	}
	req, _ := http.NewRequest("TRACE", srv.URL+"/", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Errorf("TRACE /: %v", err)
	} else if resp.Body.Close(); resp.StatusCode != 403 {
		t.Errorf("TRACE /: %s, want 403", resp.Status)
	}
	if code, body, _ := get(t, srv.URL+"/api/tap?component=r1&kind=source"); code != 403 || !strings.Contains(body, "--allow-tap") {
		t.Errorf("tap without --allow-tap: %d %q", code, body)
	}
}

// The page works with no internet access: nothing it loads comes from
// elsewhere.
func TestPageLoadsNothingFromElsewhere(t *testing.T) {
	ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//|fetch\(\s*["'](https?:)?//`)
	err := fs.WalkDir(webFiles, "web", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := webFiles.ReadFile(path)
		if m := ext.Find(b); m != nil {
			t.Errorf("%s loads %q from another host", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTapRequests(t *testing.T) {
	srv, taps, _ := testServer(t, true)
	for _, tc := range []struct {
		query string
		code  int
		body  string
	}{
		{"", 400, "component is required"},
		{"component=nope", 404, "has no source or channel"},
		{"component=k1", 400, `tap its channel "c1"`},
		{"component=r1", 400, "both a source and a channel"},
		{"component=r1&kind=sink", 400, "use source or channel"},
		{"component=c1&kind=source", 404, "no source"},
		{"component=c1&rate=0", 400, "rate"},
		{"component=c1&rate=1e9", 400, "rate"},
		{"component=c1&limit=-1", 400, "limit"},
	} {
		if code, body, _ := get(t, srv.URL+"/api/tap?"+tc.query); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("tap?%s: %d %q; want %d %q", tc.query, code, body, tc.code, tc.body)
		}
	}

	// A tap streams JSON lines of what passes, and ends at its limit.
	resp, err := http.Get(srv.URL + "/api/tap?component=r1&kind=source&rate=1000&limit=3")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("tap: %s", resp.Status)
	}
	point := taps.Point("source", "r1")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a source's output, until the tap is done
		evs := []event.Event{{Headers: event.HeadersOf(map[string]string{"host": "web-1"}), Body: []byte("hello")}, {Body: []byte{0xff, 0x00}}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				point.Offer(evs)
			}
		}
	}()
	var lines []TapLine
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l TapLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("bad line %q: %v", sc.Bytes(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want the limit of 3: %+v", len(lines), lines)
	}
	var text, binary bool
	for _, l := range lines {
		if l.Kind != "source" || l.Component != "r1" {
			t.Errorf("line %+v does not name source r1", l)
		}
		if l.Body != nil && *l.Body == "hello" && l.Headers["host"] == "web-1" {
			text = true
		}
		if l.BodyBase64 == "/wA=" {
			binary = true
		}
	}
	if !text || !binary {
		t.Errorf("lines %+v: want the text body with its header and the binary body in base64", lines)
	}
	deadline := time.Now().Add(5 * time.Second)
	for point.Watching() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if point.Watching() {
		t.Fatal("the tap still watches after its request ended")
	}
}

// A tap outlives the server's read and write timeouts: it may wait a long
// time for its first event.
func TestTapOutlivesServerTimeouts(t *testing.T) {
	a, reg, _, _, _ := testAgent()
	s := NewSampler(a, reg, time.Second)
	taps := flow.NewTaps()
	srv := httptest.NewUnstartedServer(Handler(Config{Sampler: s, Taps: taps, AllowTap: true}))
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/tap?component=r1&limit=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.Sleep(600 * time.Millisecond) // past both timeouts, nothing passed
	taps.Point("source", "r1").Offer([]event.Event{{Body: []byte("late")}})
	b, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(b), `"body":"late"`) {
		t.Fatalf("tap after the server's timeouts: %q, %v", b, err)
	}
}

// TestRedacted: what /api/status and the tap serve masks the agent's
// secrets: reasons, problems, names and event data, binary bodies too.
func TestRedacted(t *testing.T) {
	const secret = "tok-91ab"
	red := redact.New(secret)
	snap := Snapshot{Agent: "a1", Problems: []string{"sink k1: POST ?token=" + secret},
		Notes: []string{"sink k-" + secret + ": draining"},
		Nodes: []Node{{ID: "sink/k-" + secret, Name: "k-" + secret, Reason: "POST ?token=" + secret,
			Note: "draining to ?token=" + secret, Counters: map[string]string{"X": secret}}},
		Edges: []Edge{{From: "channel/c1", To: "sink/k-" + secret, Label: "h=" + secret}}}
	b, _ := json.Marshal(snap.redacted(red))
	if strings.Contains(string(b), secret) || strings.Count(string(b), `\u003csecret\u003e`) != 9 {
		t.Errorf("snapshot: %s", b)
	}
	if !strings.Contains(snap.Problems[0], secret) {
		t.Error("redacted changed the snapshot it was given")
	}
	for _, body := range [][]byte{[]byte("body " + secret), append([]byte{0xff, 0}, secret...)} {
		e := event.Event{Headers: event.HeadersOf(map[string]string{"auth": secret}), Body: body}
		l := tapLine("channel", "c1", e, red)
		b, _ := json.Marshal(l)
		raw, _ := base64.StdEncoding.DecodeString(l.BodyBase64)
		if strings.Contains(string(b), secret) || strings.Contains(string(raw), secret) || l.Headers["auth"] != redact.Mask {
			t.Errorf("tap line: %s", b)
		}
		if e.Headers.Value("auth") != secret {
			t.Error("tapLine changed the event's headers")
		}
	}
}
