package crash

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

// sendAcked sends n events numbered from first in batches of up to 100 on
// one connection and fails the test unless every batch is answered OK.
func sendAcked(t *testing.T, addr string, first uint64, n int) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := avrorpc.Dial(ctx, addr, avrorpc.ClientConfig{ConnectTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var acked []uint64
	for len(acked) < n {
		k := min(100, n-len(acked))
		base := first + uint64(len(acked))
		events := make([]event.Event, k)
		for i := range events {
			line := bench.AppendLine(nil, base+uint64(i), time.Now(), 100)
			events[i].Body = line[:len(line)-1]
		}
		st, err := c.AppendBatch(ctx, events)
		if err != nil || st != avrorpc.OK {
			t.Fatalf("send: %v %v", st, err)
		}
		for i := range k {
			acked = append(acked, base+uint64(i))
		}
	}
	return acked
}

// TestReloadChangedChannelKeepsEvents is the row: a channel whose
// settings change on SIGHUP while its sink is blocked on a dead downstream
// holds 100 acknowledged events; they all reach the downstream once it is
// up. A memory channel hands them to its replacement; a file channel's
// replacement reopens its files (the old one released them first).
func TestReloadChangedChannelKeepsEvents(t *testing.T) {
	for _, typ := range []string{"memory", "file"} {
		t.Run(typ, func(t *testing.T) {
			dir := t.TempDir()
			channel := func(capacity int) string {
				if typ == "file" {
					return fileChannel(dir, capacity*100)
				}
				return memoryChannel(capacity)
			}
			port, sinkPort := testutil.FreePort(t), testutil.FreePort(t)
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			conf := filepath.Join(dir, "a.properties")
			testutil.WriteFile(t, conf, avroToTCP(port, sinkPort, channel(1000)))
			p := startAgent(t, conf)
			if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			acked := sendAcked(t, addr, 0, 100)

			testutil.WriteFile(t, conf, avroToTCP(port, sinkPort, channel(500)))
			start := time.Now()
			p.Signal(syscall.SIGHUP)
			p.WaitLog("configuration reloaded", 30*time.Second)
			t.Logf("reload took %v", time.Since(start).Round(time.Millisecond))
			if typ == "memory" {
				rec := p.WaitLog("channel replaced: its events were handed to the new one", time.Second)
				if num(rec, "events") != 100 {
					t.Errorf("handover record %v: want events=100", rec)
				}
			}
			if err := testutil.WaitAccepting(addr, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			acked = append(acked, sendAcked(t, addr, 100, 10)...)

			rcv, err := listenOn(net.JoinHostPort("127.0.0.1", strconv.Itoa(sinkPort)), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer rcv.close()
			testutil.WaitFor(t, 30*time.Second, "every acknowledged event reaches the downstream", func() bool {
				return len(rcv.missing(acked)) == 0
			})
			if d, _ := rcv.dups(); d != 0 {
				t.Errorf("%d duplicates", d)
			}
			p.Signal(syscall.SIGTERM)
			if code := p.Exit(30 * time.Second); code != 0 {
				t.Errorf("exit %d after SIGTERM, want 0", code)
			}
		})
	}
}

// threeRoutes is r1->c1->k1 to live, r2->c2->k2 to slow, r3->c3->k3 to
// dead; with removed set, only the first route remains.
func threeRoutes(p1, p2, p3, live, slow, dead int, removed bool) string {
	route := func(i, src, sink int) string {
		return fmt.Sprintf(`a1.sources.r%[1]d.type = avro
a1.sources.r%[1]d.bind = 127.0.0.1
a1.sources.r%[1]d.port = %[2]d
a1.sources.r%[1]d.channels = c%[1]d
a1.channels.c%[1]d.type = memory
a1.channels.c%[1]d.capacity = 10000
a1.channels.c%[1]d.transactionCapacity = 1000
a1.sinks.k%[1]d.type = tcp
a1.sinks.k%[1]d.hostname = 127.0.0.1
a1.sinks.k%[1]d.port = %[3]d
a1.sinks.k%[1]d.batchSize = 100
a1.sinks.k%[1]d.channel = c%[1]d
`, i, src, sink)
	}
	if removed {
		return "a1.sources = r1\na1.channels = c1\na1.sinks = k1\n" + route(1, p1, live)
	}
	return "a1.sources = r1 r2 r3\na1.channels = c1 c2 c3\na1.sinks = k1 k2 k3\n" +
		route(1, p1, live) + route(2, p2, slow) + route(3, p3, dead)
}

// TestReloadRemovedChannels: a reload that removes a memory channel whose
// downstream is slow drains it (every acknowledged event arrives), and one
// whose downstream is down is reported as a stop reports it: an ERROR with
// the exact count, and the sluice_events_dropped_total counter. The route
// that stays keeps working.
func TestReloadRemovedChannels(t *testing.T) {
	dir := t.TempDir()
	live, err := listen(0)
	if err != nil {
		t.Fatal(err)
	}
	defer live.close()
	slow, err := listen(4000)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.close()
	p1, p2, p3, dead, httpPort := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	conf := filepath.Join(dir, "a.properties")
	testutil.WriteFile(t, conf, threeRoutes(p1, p2, p3, live.port(), slow.port(), dead, false))
	p := startAgent(t, conf, "--shutdown-timeout", "3", "--http", addr(httpPort))
	for _, port := range []int{p1, p2, p3} {
		if err := testutil.WaitAccepting(addr(port), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	viaSlow := sendAcked(t, addr(p2), 0, 3000)
	viaDead := sendAcked(t, addr(p3), 100000, 300)

	testutil.WriteFile(t, conf, threeRoutes(p1, p2, p3, live.port(), slow.port(), dead, true))
	p.Signal(syscall.SIGHUP)
	viaLive := sendAcked(t, addr(p1), 200000, 200) // during the reload
	if rec := p.WaitLog("configuration reloaded", 10*time.Second); rec["draining"] != "c2 c3" {
		t.Errorf("reload record %v: want draining=c2 c3", rec)
	}
	rec := p.WaitLog(drainDropped, 30*time.Second)
	if rec["level"] != "ERROR" || num(rec, "dropped") != len(viaDead) || rec["channels"] != "c2 c3" {
		t.Errorf("drain record %v: want ERROR with dropped=%d, channels=c2 c3", rec, len(viaDead))
	}
	var c3 map[string]any
	for _, r := range p.Log.Records("channel dropped events it still held: its sinks did not deliver them before the shutdown deadline") {
		if r["component"] != "c3" {
			t.Errorf("loss reported for %v: only c3 (downstream down) may lose events", r["component"])
		}
		c3 = r
	}
	if c3 == nil || c3["level"] != "ERROR" || num(c3, "events") != len(viaDead) || c3["why"] != "reload" {
		t.Errorf("c3 loss record %v: want ERROR, events=%d, why=reload", c3, len(viaDead))
	}
	if m := slow.missing(viaSlow); len(m) > 0 {
		t.Errorf("%d events acknowledged into the removed c2 never arrived (it was drained before the reload went on)", len(m))
	}
	viaLive = append(viaLive, sendAcked(t, addr(p1), 300000, 100)...)
	testutil.WaitFor(t, 20*time.Second, "the kept route delivers", func() bool { return len(live.missing(viaLive)) == 0 })
	resp, err := http.Get("http://" + addr(httpPort) + "/metrics/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`sluice_events_dropped_total{agent="a1",component="c3",reason="stopped_with_events"} %d`, len(viaDead))
	if !strings.Contains(string(body), want) {
		t.Errorf("/metrics/prometheus lacks %s", want)
	}
	if code, body := healthz(t, addr(httpPort)); code != 200 {
		t.Errorf("/healthz after the reload: %d %s", code, body)
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(30 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0 (c1 was drained)", code)
	}
}

// drainDropped is the message of the line that ends the drain of channels a
// reload removed when they dropped events.
const drainDropped = "channels a reload removed dropped events: their sinks did not deliver them before the shutdown deadline"

func avroOnly(port int) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = avro
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.sinks.k1.type = null
a1.sinks.k1.channel = c1
`, port)
}

// TestReloadRetriesBusyPort is the row: a reload moves a source to
// a port another process holds. /healthz says why the source is down; a
// SIGHUP that leaves it unchanged does not forget it; once the port is
// freed the source comes up by itself and /healthz turns 200. Then a move
// to a held port and on to a free one leaves no stale reason.
func TestReloadRetriesBusyPort(t *testing.T) {
	dir := t.TempDir()
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	conf := filepath.Join(dir, "a.properties")
	p1 := testutil.FreePort(t)
	testutil.WriteFile(t, conf, avroOnly(p1))
	p := startAgent(t, conf, "--http", httpAddr)
	if err := testutil.WaitAccepting(addr(p1), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "/healthz 200", func() bool { code, _ := healthz(t, httpAddr); return code == 200 })

	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p2 := held.Addr().(*net.TCPAddr).Port
	testutil.WriteFile(t, conf, avroOnly(p2))
	p.Signal(syscall.SIGHUP)
	p.WaitLog("configuration reloaded", 20*time.Second)
	code, body := healthz(t, httpAddr)
	t.Logf("/healthz with the port held: %d %s", code, body)
	if code != 503 || !strings.Contains(body, "source r1: not running: failed to start") || !strings.Contains(body, "address already in use") {
		t.Fatalf("/healthz with the port held: %d %q", code, body)
	}
	// A reload that leaves the failed source unchanged keeps retrying it.
	now := time.Now()
	if err := os.Chtimes(conf, now, now); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	testutil.WaitFor(t, 20*time.Second, "the second reload", func() bool { return len(p.Log.Records("configuration reloaded")) >= 2 })
	if code, _ := healthz(t, httpAddr); code != 503 {
		t.Fatalf("/healthz %d with the port still held", code)
	}
	// Enough failed starts that some are held back from the log.
	testutil.WaitFor(t, 30*time.Second, "a fourth failed start", func() bool {
		_, body := healthz(t, httpAddr)
		i := strings.Index(body, "(attempt ")
		n := 0
		if i >= 0 {
			_, _ = fmt.Sscanf(body[i:], "(attempt %d)", &n) // n stays 0 when it does not parse
		}
		return n >= 4
	})
	held.Close()
	freed := time.Now()
	testutil.WaitFor(t, 40*time.Second, "the source comes up on the freed port", func() bool {
		st, err := sendOne(addr(p2), 1)
		return err == nil && st == avrorpc.OK
	})
	t.Logf("source up %v after the port was freed", time.Since(freed).Round(time.Millisecond))
	if code, body := healthz(t, httpAddr); code != 200 {
		t.Fatalf("/healthz once the source runs: %d %q", code, body)
	}
	if recs := p.Log.Records("component started after failing to"); len(recs) != 1 || num(recs[0], "failures") < 4 || recs[0]["recovered_after"] == nil {
		t.Errorf("records of the source starting after its failures: %v, want one with failures >= 4 and recovered_after", recs)
	}

	// Held port, then a free one: nothing stale.
	held, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	testutil.WriteFile(t, conf, avroOnly(held.Addr().(*net.TCPAddr).Port))
	p.Signal(syscall.SIGHUP)
	testutil.WaitFor(t, 20*time.Second, "the third reload", func() bool { return len(p.Log.Records("configuration reloaded")) >= 3 })
	if code, _ := healthz(t, httpAddr); code != 503 {
		t.Fatalf("/healthz %d with the new port held", code)
	}
	p4 := testutil.FreePort(t)
	testutil.WriteFile(t, conf, avroOnly(p4))
	p.Signal(syscall.SIGHUP)
	testutil.WaitFor(t, 20*time.Second, "the fourth reload", func() bool { return len(p.Log.Records("configuration reloaded")) >= 4 })
	if code, body := healthz(t, httpAddr); code != 200 {
		t.Fatalf("/healthz after moving to a free port: %d %q (stale?)", code, body)
	}
	if st, err := sendOne(addr(p4), 2); err != nil || st != avrorpc.OK {
		t.Fatalf("send to the new port: %v %v", st, err)
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(30 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	// The failures of a source that started since are never told after
	// its start: not at the stop either.
	started := false
	for _, rec := range p.Log.Records("") {
		msg, _ := rec["msg"].(string)
		switch {
		case msg == "component started after failing to":
			started = true
		case started && strings.HasPrefix(msg, "component failed to start") && strings.HasSuffix(msg, "(repeated)"):
			t.Errorf("after the source started: %v", rec)
		}
	}
}

// TestStopDuringReloadDrain: SIGTERM while a reload drains a removed
// channel whose downstream is down stops intake at once on the sources the
// reload kept; the stop waits for that drain (whose deadline comes first),
// and its loss is the reload's, not the stop's.
func TestStopDuringReloadDrain(t *testing.T) {
	dir := t.TempDir()
	live, err := listen(0)
	if err != nil {
		t.Fatal(err)
	}
	defer live.close()
	p1, p2, p3, dead := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	conf := filepath.Join(dir, "a.properties")
	testutil.WriteFile(t, conf, threeRoutes(p1, p2, p3, live.port(), live.port(), dead, false))
	p := startAgent(t, conf, "--shutdown-timeout", "4")
	for _, port := range []int{p1, p3} {
		if err := testutil.WaitAccepting(addr(port), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	viaDead := sendAcked(t, addr(p3), 100000, 300)
	snd := newAvroSender(addr(p1), 1, 100, 5*time.Millisecond)
	defer snd.stop()
	testutil.WaitFor(t, 10*time.Second, "the kept route acknowledges", func() bool { return snd.ackedCount() >= 1000 })

	testutil.WriteFile(t, conf, threeRoutes(p1, p2, p3, live.port(), live.port(), dead, true))
	p.Signal(syscall.SIGHUP)
	time.Sleep(time.Second) // the reload is draining c3 (4 s), unable to
	p.Signal(syscall.SIGTERM)
	snd.setCutoff(time.Now().Add(500 * time.Millisecond))
	code := p.Exit(30 * time.Second)
	acked := snd.stop()
	t.Logf("exit %d; kept route: %d acknowledged; calls after the cutoff: %d refused, %d OK",
		code, len(acked), snd.refusedAfter.Load(), snd.okAfter.Load())
	if n := snd.okAfter.Load(); n > 0 {
		t.Errorf("%d calls to the kept source sent more than 500 ms after SIGTERM were answered OK (during the reload's drain)", n)
	}
	if snd.refusedAfter.Load() == 0 {
		t.Error("no call after the cutoff: the test proves nothing")
	}
	if code != 0 {
		t.Errorf("exit %d, want 0: c1 drains, and c3's loss belongs to the reload", code)
	}
	rec := p.WaitLog(drainDropped, time.Second)
	if num(rec, "dropped") != len(viaDead) {
		t.Errorf("reload record %v: want dropped=%d", rec, len(viaDead))
	}
	if m := live.missing(acked); len(m) > 0 {
		t.Errorf("%d events acknowledged on the kept route never arrived", len(m))
	}
}
