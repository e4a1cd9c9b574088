package agent_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/status"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// graphConf has every kind of node the status page draws: interceptors,
// both selectors (one channel optional), a sink group and a lone sink.
func graphConf(ncPort, httpPort int) string {
	return fmt.Sprintf(`a1.sources = web api
a1.channels = main audit
a1.sinks = k1 k2 k3
a1.sinkgroups = g1
a1.sources.web.type = netcat
a1.sources.web.bind = 127.0.0.1
a1.sources.web.port = %d
a1.sources.web.channels = main audit
a1.sources.web.selector.optional = audit
a1.sources.web.interceptors = ts h
a1.sources.web.interceptors.ts.type = timestamp
a1.sources.web.interceptors.h.type = org.apache.flume.interceptor.HostInterceptor$Builder
a1.sources.api.type = http
a1.sources.api.bind = 127.0.0.1
a1.sources.api.port = %d
a1.sources.api.channels = main audit
a1.sources.api.selector.type = multiplexing
a1.sources.api.selector.header = kind
a1.sources.api.selector.mapping.audit = audit
a1.sources.api.selector.optional.web = audit
a1.sources.api.selector.default = main
a1.channels.main.type = memory
a1.channels.main.byteCapacity = 1048576
a1.channels.main.byteCapacityBufferPercentage = 0
a1.channels.audit.type = memory
a1.sinkgroups.g1.sinks = k1 k2
a1.sinkgroups.g1.processor.type = failover
a1.sinks.k1.type = null
a1.sinks.k1.channel = main
a1.sinks.k2.type = null
a1.sinks.k2.channel = main
a1.sinks.k3.type = null
a1.sinks.k3.channel = audit
`, ncPort, httpPort)
}

func getStatus(t *testing.T, c *http.Client, url string) status.Snapshot {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	var s status.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The status page's graph is the configuration as written: every node with
// its canonical type, the interceptors on their source, each selector's
// routes, the sink group between its channel and its sinks.
func TestStatusGraphFollowsConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.properties")
	nc := testutil.FreePort(t)
	testutil.WriteFile(t, file, graphConf(nc, testutil.FreePort(t)))
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0"})
	base := "http://" + a.HTTPAddr()
	sendLines(t, fmt.Sprintf("127.0.0.1:%d", nc), 0, 50)

	s := getStatus(t, http.DefaultClient, base+"/api/status")
	types := map[string]string{}
	byID := map[string]status.Node{}
	for _, n := range s.Nodes {
		types[n.ID] = n.Type
		byID[n.ID] = n
	}
	want := map[string]string{
		"source/web": "netcat", "selector/web": "replicating", "source/api": "http", "selector/api": "multiplexing",
		"channel/main": "memory", "channel/audit": "memory", "group/g1": "failover",
		"sink/k1": "null", "sink/k2": "null", "sink/k3": "null",
	}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("nodes\n got %v\nwant %v", types, want)
	}
	if ic := byID["source/web"].Interceptors; len(ic) != 2 || ic[0] != (status.Named{Name: "ts", Type: "timestamp"}) || ic[1].Name != "h" || ic[1].Type == "" {
		t.Errorf("web's interceptors %+v", ic)
	}
	if byID["selector/api"].Detail != "header kind" {
		t.Errorf("api's selector detail %q", byID["selector/api"].Detail)
	}
	var edges []string
	for _, e := range s.Edges {
		edge := e.From + ">" + e.To
		if e.Label != "" {
			edge += "[" + e.Label + "]"
		}
		if e.Optional {
			edge += "?"
		}
		edges = append(edges, edge)
	}
	wantEdges := "source/web>selector/web selector/web>channel/main selector/web>channel/audit? " +
		"source/api>selector/api selector/api>channel/main[kind=default] selector/api>channel/audit[kind=audit, web (optional)] " +
		"channel/main>group/g1 group/g1>sink/k1 group/g1>sink/k2 channel/audit>sink/k3"
	if got := strings.Join(edges, " "); got != wantEdges {
		t.Errorf("edges\n got %s\nwant %s", got, wantEdges)
	}
	// The memory channel reports its bytes against its byteCapacity.
	if f := byID["channel/main"].Fill; f == nil || f.ByteCapacity == nil || *f.ByteCapacity != 1048576 {
		t.Errorf("main's fill %+v, want a byte capacity of 1 MiB", f)
	}
	// Within a few samples the 50 events show in the counters.
	deadline := time.Now().Add(5 * time.Second)
	for {
		s = getStatus(t, http.DefaultClient, base+"/api/status")
		var src status.Node
		for _, n := range s.Nodes {
			if n.ID == "source/web" {
				src = n
			}
		}
		if src.Counters["EventAcceptedCount"] == "50" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("source web's counters never showed the 50 events: %v", src.Counters)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := httpGet(t, base+"/"); code != 200 || !strings.Contains(body, "ui/app.js") {
		t.Errorf("/ is not the status page: %d", code)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With a user set, every path needs the password, the status page and the
// Flume metrics alike.
func TestMonitoringBasicAuth(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.properties")
	testutil.WriteFile(t, file, graphConf(testutil.FreePort(t), testutil.FreePort(t)))
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0", HTTPUser: "ops", HTTPPassword: "pw"})
	base := "http://" + a.HTTPAddr()
	for _, p := range []string{"/", "/api/status", "/metrics", "/healthz", "/api/tap?component=main"} {
		if code, _ := httpGet(t, base+p); code != http.StatusUnauthorized {
			t.Errorf("%s without a password: %d, want 401", p, code)
		}
		req, _ := http.NewRequest("GET", base+p, nil)
		req.SetBasicAuth("ops", "pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 403, false: 200}[strings.HasPrefix(p, "/api/tap")]; resp.StatusCode != want {
			t.Errorf("%s with the password: %d, want %d", p, resp.StatusCode, want)
		}
	}
}

// A tap through the agent shows the events sent to a source, and a
// channel's tap what its sinks take; both end at their limit.
func TestTapThroughAgent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.properties")
	nc := testutil.FreePort(t)
	testutil.WriteFile(t, file, graphConf(nc, testutil.FreePort(t)))
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0", AllowTap: true})
	base := "http://" + a.HTTPAddr()
	type result struct {
		lines []status.TapLine
		err   error
	}
	tap := func(query string) <-chan result {
		resp, err := http.Get(base + "/api/tap?" + query) //nolint:bodyclose // closed below, by the reading goroutine
		out := make(chan result, 1)
		if err != nil {
			out <- result{err: err}
			return out
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out <- result{err: fmt.Errorf("%s: %s", resp.Status, b)}
			return out
		}
		go func() {
			defer resp.Body.Close()
			var r result
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var l status.TapLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					r.err = err
					break
				}
				r.lines = append(r.lines, l)
			}
			out <- r
		}()
		return out
	}
	src := tap("component=web&rate=1000&limit=5")
	ch := tap("component=audit&rate=1000&limit=3")
	sendLines(t, fmt.Sprintf("127.0.0.1:%d", nc), 0, 20)
	for name, c := range map[string]<-chan result{"source web": src, "channel audit": ch} {
		select {
		case r := <-c:
			if r.err != nil {
				t.Fatalf("%s: %v", name, r.err)
			}
			want := map[string]int{"source web": 5, "channel audit": 3}[name]
			if len(r.lines) != want {
				t.Fatalf("%s: %d lines, want its limit %d", name, len(r.lines), want)
			}
			for _, l := range r.lines {
				// bench.AppendLine's lines carry their sequence number first;
				// the timestamp and host interceptors ran before the tap.
				if l.Body == nil || !strings.Contains(*l.Body, " ") || l.Headers["timestamp"] == "" || l.Headers["host"] == "" {
					t.Errorf("%s: line %+v: want a sent line with the interceptors' headers", name, l)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no events within 20 s", name)
		}
	}
}

// After a reload the page draws the new graph, and a tap on a source the
// reload replaced keeps watching its successor of the same name.
func TestStatusAndTapFollowReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.properties")
	nc, api := testutil.FreePort(t), testutil.FreePort(t)
	conf := graphConf(nc, api)
	testutil.WriteFile(t, file, conf)
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0", AllowTap: true})
	base := "http://" + a.HTTPAddr()
	resp, err := http.Get(base + "/api/tap?component=web&rate=1000&limit=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	// web gets a third interceptor (so it is rebuilt) and a new sink k4 appears.
	conf = strings.Replace(conf, "interceptors = ts h\n", "interceptors = ts h s\na1.sources.web.interceptors.s.type = static\na1.sources.web.interceptors.s.key = tier\na1.sources.web.interceptors.s.value = edge\n", 1)
	conf = strings.Replace(conf, "a1.sinks = k1 k2 k3", "a1.sinks = k1 k2 k3 k4", 1) + "a1.sinks.k4.type = null\na1.sinks.k4.channel = audit\n"
	testutil.WriteFile(t, file, conf)
	if err := a.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := getStatus(t, http.DefaultClient, base+"/api/status")
		found := false
		for _, e := range s.Edges {
			found = found || (e.From == "channel/audit" && e.To == "sink/k4")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page's graph never showed sink k4 after the reload: %+v", s.Edges)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sendLines(t, fmt.Sprintf("127.0.0.1:%d", nc), 0, 5)
	var l status.TapLine
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatalf("the tap opened before the reload: %v", err)
	}
	if l.Headers["tier"] != "edge" {
		t.Fatalf("tap line %+v: want an event through the reloaded source (header tier=edge)", l)
	}
}
