package crash

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestReloadStormUnderLoad: SIGHUPs in quick succession, each changing the
// channel (its capacity), while senders keep sending and the downstream is
// slower than the load; then SIGTERM. Every acknowledged event reaches the
// downstream, or is counted in the stop's ERROR (memory channel, exit 3);
// a file channel delivers every one of them after a restart.
func TestReloadStormUnderLoad(t *testing.T) {
	for _, typ := range []string{"memory", "file"} {
		t.Run(typ, func(t *testing.T) {
			dir := t.TempDir()
			channel := func(capacity int) string {
				if typ == "file" {
					return fileChannel(dir, capacity)
				}
				return memoryChannel(capacity)
			}
			rcv, err := listen(3000)
			if err != nil {
				t.Fatal(err)
			}
			defer rcv.close()
			port := testutil.FreePort(t)
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			conf := filepath.Join(dir, "a.properties")
			testutil.WriteFile(t, conf, avroToTCP(port, rcv.port(), channel(100000)))
			p := startAgent(t, conf, "--shutdown-timeout", "1")
			if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			snd := newAvroSender(addr, 2, 100, time.Millisecond)
			defer snd.stop()
			testutil.WaitFor(t, 30*time.Second, "a backlog of 5000 events", func() bool {
				return snd.ackedCount()-rcv.count() >= 5000
			})
			for i := range 6 {
				testutil.WriteFile(t, conf, avroToTCP(port, rcv.port(), channel(100000-1000*(i%2+1))))
				p.Signal(syscall.SIGHUP)
				time.Sleep(time.Duration(30+40*i) * time.Millisecond)
			}
			testutil.WaitFor(t, 30*time.Second, "every reload done", func() bool {
				return len(p.Log.Records("configuration reloaded")) >= 2
			})
			time.Sleep(500 * time.Millisecond)
			if typ == "memory" {
				// The stop must find more than the 1 s drain can deliver:
				// the senders were refused during the reloads and the
				// downstream may have caught up, so rebuild a backlog and
				// slow the downstream to 200 events/s first.
				testutil.WaitFor(t, 30*time.Second, "a backlog of 2000 events before the stop", func() bool {
					return snd.ackedCount()-rcv.count() >= 2000
				})
				rcv.limit.Store(200)
			}
			p.Signal(syscall.SIGTERM)
			code := p.Exit(30 * time.Second)
			acked := snd.stop()
			rcv.limit.Store(0)
			received := settle(rcv)
			missing := len(rcv.missing(acked))
			reported, inFlight := 0, 0
			for _, rec := range p.Log.Records("channel dropped events it still held: its sinks did not deliver them before the shutdown deadline") {
				reported += num(rec, "events")
			}
			for _, rec := range p.Log.Records("channel dropped events its sinks were delivering when the shutdown deadline cut them off: the downstream may or may not have them (in flight, outcome unknown)") {
				inFlight += num(rec, "events")
			}
			t.Logf("exit %d; reloads %d; acknowledged %d, received %d, missing %d, reported lost %d and in flight %d",
				code, len(p.Log.Records("configuration reloaded")), len(acked), received, missing, reported, inFlight)
			if typ == "memory" {
				if code != 3 {
					t.Fatalf("exit %d, want 3", code)
				}
				// Lost: never received; in flight: the batch the deadline cut
				// off, which the receiver may have in part.
				if reported > missing || missing > reported+inFlight || inFlight > 100 {
					t.Fatalf("reported %d lost and %d in flight, but %d acknowledged events never arrived", reported, inFlight, missing)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			p2 := startAgent(t, conf)
			// Started, so that SIGTERM finds its handler in place even when
			// nothing was left to deliver.
			p2.WaitLog("agent started", 30*time.Second)
			testutil.WaitFor(t, 60*time.Second, "every acknowledged event arrives after the restart", func() bool {
				return len(rcv.missing(acked)) == 0
			})
			p2.Signal(syscall.SIGTERM)
			if code := p2.Exit(30 * time.Second); code != 0 {
				t.Errorf("second run: exit %d", code)
			}
		})
	}
}

// TestStopWithStalledTCPPeer: the tcp sink's downstream accepts the
// connection and never reads, so the sink's write blocks once the socket
// buffers are full. SIGTERM must still stop the agent within the shutdown
// timeout plus a few seconds (the sink's write is cut off at the deadline,
// not left to its request-timeout of a minute), with exit status 3 and the
// memory channel's count of what it still held: lost, and the blocked batch
// in flight.
func TestStopWithStalledTCPPeer(t *testing.T) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never read
		}
	}()
	defer func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()
	dir := t.TempDir()
	port := testutil.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := filepath.Join(dir, "a.properties")
	testutil.WriteFile(t, conf, avroToTCP(port, ln.Addr().(*net.TCPAddr).Port, memoryChannel(100000))+
		"a1.sinks.k1.request-timeout = 60000\n")
	p := startAgent(t, conf, "--shutdown-timeout", "1")
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	acked := sendAcked(t, addr, 0, 100000) // 10 MB of lines: more than the socket buffers hold
	time.Sleep(500 * time.Millisecond)     // the sink's write is blocked by now
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.Exit(60 * time.Second)
	took := time.Since(start)
	t.Logf("exit %d after %v", code, took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("the stop took %v with --shutdown-timeout 1: the blocked write held it", took.Round(time.Millisecond))
	}
	if code != 3 {
		t.Fatalf("exit %d, want 3", code)
	}
	rec := p.WaitLog("agent stopped", time.Second)
	// The socket buffers between the sink and the peer hold at most 4 MiB
	// of the lines (100 bytes each) the sink counts as delivered; the rest
	// is what the channel drops: lost, and the blocked batch in flight.
	lost, inFlight := num(rec, "dropped"), num(rec, "in_flight_unknown")
	if n := lost + inFlight; n < len(acked)-45000 || n > len(acked) || inFlight > 100 {
		t.Errorf("reported %d lost and %d in flight of %d acknowledged; the peer read none of them", lost, inFlight, len(acked))
	}
}
