package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestUDPDropsAddUp runs the real binary with a UDP source (syslogudp fed by
// util-linux's logger, netcatudp by a plain UDP sender) whose socket buffer
// is the kernel's smallest and whose sink is slow, so that a burst of 20,000
// datagrams overflows the socket and the kernel drops much of it, the tail
// included. After the burst nothing more is sent. Then every datagram is
// accounted for: delivered (what the sink's server received) plus the
// source's DatagramDropCount is what was sent, exactly; the drop is told in
// one WARN line; SIGTERM then stops the agent with exit 0.
func TestUDPDropsAddUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := testutil.AgentBinary(t)
	for _, typ := range []string{"syslogudp", "netcatudp"} {
		t.Run(typ, func(t *testing.T) { testUDPDropsAddUp(t, bin, typ) })
	}
}

func testUDPDropsAddUp(t *testing.T, bin, typ string) {
	const sent = 20000
	var logger string
	if typ == "syslogudp" {
		logger = testutil.SystemTool(t, "logger", "bsdutils")
	}
	// The sink's downstream: slow enough that the channel fills and the
	// source stops reading while the burst lasts.
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(200 * time.Microsecond)
		mu.Lock()
		got[string(b)]++
		mu.Unlock()
	}))
	defer srv.Close()
	delivered := func() (n, dup int) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range got {
			n += c
			dup += c - 1
		}
		return n, dup
	}

	port := testutil.FreePort(t)
	host := "bind"
	if typ == "syslogudp" {
		host = "host"
	}
	conf := fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = %s
a1.sources.r1.%s = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.receiveBufferSize = 1
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 1000
a1.channels.c1.transactionCapacity = 100
a1.sinks.k1.type = http
a1.sinks.k1.endpoint = %s/ingest
a1.sinks.k1.channel = c1
`, typ, host, port, srv.URL)
	dir := t.TempDir()
	file := filepath.Join(dir, "a.properties")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	p := testutil.StartAgent(t, bin, file, "--http", addr)
	stderr := p.Log
	p.WaitUntil(20*time.Second, "the source to listen", func() bool { return strings.Contains(stderr.String(), typ+" source listening") })

	// The burst, then silence.
	target := fmt.Sprintf("127.0.0.1:%d", port)
	if typ == "syslogudp" {
		var lines strings.Builder
		for i := range sent {
			fmt.Fprintf(&lines, "burst message %05d\n", i)
		}
		in := filepath.Join(dir, "lines")
		if err := os.WriteFile(in, []byte(lines.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(logger, "--udp", "--server", "127.0.0.1", "--port", strconv.Itoa(port),
			"--tag", "burst", "--file", in).CombinedOutput()
		if err != nil {
			t.Fatalf("logger: %v\n%s", err, out)
		}
	} else {
		c, err := net.Dial("udp", target)
		if err != nil {
			t.Fatal(err)
		}
		for i := range sent {
			if _, err := fmt.Fprintf(c, "burst message %05d\n", i); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}

	// Every datagram ends delivered or counted once the channel is empty
	// and the counts have stood still for longer than the source's drop
	// check interval.
	var drops, accepted int64
	var n, dup int
	stable, last := time.Now(), ""
	deadline := time.Now().Add(60 * time.Second)
	for {
		src, ch := flumeMetrics(t, addr, "SOURCE.r1"), flumeMetrics(t, addr, "CHANNEL.c1")
		drops, _ = strconv.ParseInt(src["DatagramDropCount"], 10, 64)
		accepted, _ = strconv.ParseInt(src["EventAcceptedCount"], 10, 64)
		n, dup = delivered()
		now := fmt.Sprint(drops, accepted, n, ch["ChannelSize"])
		if now != last {
			stable, last = time.Now(), now
		} else if ch["ChannelSize"] == "0" && time.Since(stable) > 1500*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts never settled: dropped %d, accepted %d, delivered %d, channel %s; log:\n%s",
				drops, accepted, n, ch["ChannelSize"], stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: sent %d, delivered %d, dropped %d", typ, sent, n, drops)
	if drops == 0 {
		t.Fatalf("nothing dropped: the burst did not overflow the socket; the test proves nothing here")
	}
	if dup != 0 || int64(n) != accepted {
		t.Errorf("delivered %d (%d duplicates), but the source accepted %d", n, dup, accepted)
	}
	if int64(n)+drops != sent {
		t.Errorf("delivered %d + dropped %d = %d, want %d sent", n, drops, int64(n)+drops, sent)
	}

	p.Stop(20 * time.Second)
	// One WARN when the drops started (a "(repeated)" summary may follow
	// if they went on past a check of the count).
	first := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "the kernel dropped") && !strings.Contains(line, "(repeated)") {
			first++
		}
	}
	if first != 1 {
		t.Errorf("%d drop warnings, want 1; log:\n%s", first, stderr.String())
	}
}

// flumeMetrics returns the attributes of component key (such as
// "SOURCE.r1") from the agent's /metrics.
func flumeMetrics(t *testing.T, addr, key string) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var all map[string]map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		t.Fatal(err)
	}
	return all[key]
}
