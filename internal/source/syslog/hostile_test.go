package syslogsource

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestTCPHostileInputLogged: the inputs of issue 13's syslog row (a 10 MB
// line, 1 MB of random bytes, a 1,000,000,000-byte octet count) are each
// told at WARN with the peer, once per reason however often they repeat,
// and counted per reason; the source holds no message beyond eventSize.
func TestTCPHostileInputLogged(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100000, 1000, time.Second)
	var logs testutil.LogBuffer
	_, reg, addrs := newSourceLogged(t, "syslogtcp", nil, pl, slog.New(slog.NewTextHandler(&logs, nil)))
	done := make(chan struct{})
	go func() { // the sink
		defer close(done)
		for counter(reg, "EventAcceptedCount") < 1 || len(pl.Take(t, 1000, 300*time.Millisecond)) > 0 {
		}
	}()
	long := "<13>Jun 15 11:22:33 host app: " + strings.Repeat("z", 10<<20) + "\n"
	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	counted := "1000000000 <13>Jun 15 11:22:33 host app: " + strings.Repeat("c", 100000)
	for _, in := range [][]byte{[]byte(long), random, []byte(counted), []byte(long), []byte(counted)} {
		send(t, addrs[0], string(in))
	}
	<-done
	if n := counter(reg, "OversizeMessageCount"); n < 4 {
		t.Errorf("OversizeMessageCount = %d, want at least 4 (two long lines, two octet counts)", n)
	}
	if n := counter(reg, "InvalidMessageCount"); n < 1 {
		t.Errorf("InvalidMessageCount = %d, want random bytes counted", n)
	}
	if n := logs.Count("longer than eventSize"); n != 1 {
		t.Errorf("%d oversize warnings, want 1 within the throttle interval:\n%.3000s", n, logs.String())
	}
	if n := logs.Count("without a valid <PRI> header"); n != 1 {
		t.Errorf("%d invalid-message warnings, want 1:\n%.3000s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "peer=127.0.0.1:") {
		t.Errorf("the warnings lack the level or the peer:\n%.3000s", logs.String())
	}
}

// TestTCPHonestServedAtLimit: with maxConnections idle connections held
// (on two ports of a multiport source), a new client's messages arrive:
// the connection idle longest is closed for it.
func TestTCPHonestServedAtLimit(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	_, reg, addrs := newSource(t, "multiport_syslogtcp", map[string]string{"ports": "0 0", "maxConnections": "10"}, pl)
	if len(addrs) != 2 {
		t.Fatalf("addrs %v", addrs)
	}
	for i := range 12 {
		c, err := net.Dial("tcp", addrs[i%2])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if !testutil.Eventually(func() bool { return counter(reg, "OpenConnectionCount") == 10 }, 5*time.Second) {
		t.Fatalf("OpenConnectionCount %d, want 10", counter(reg, "OpenConnectionCount"))
	}
	send(t, addrs[1], "<13>Jun 15 11:22:33 host app: honest\n")
	got := pl.Drain(t, 1, 5*time.Second)
	if len(got) != 1 || !strings.HasSuffix(string(got[0].Body), "honest") {
		t.Fatalf("got %q, want the honest message", sourcetest.Bodies(got))
	}
	if n := counter(reg, "ConnectionEvictedCount"); n < 1 {
		t.Errorf("ConnectionEvictedCount %d, want at least 1", n)
	}
}

// TestTCPTrickleClosed: a message sent a byte at a time is closed after
// the progress timeout.
func TestTCPTrickleClosed(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	_, reg, addrs := newSource(t, "syslogtcp", map[string]string{"progressTimeout": "300", "minBytesPerSecond": "100"}, pl)
	c, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for _, b := range []byte("<13>Jun 15 11:22:33 host app: slow " + strings.Repeat("s", 200)) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if !testutil.ClosedByServer(c, 5*time.Second) {
		t.Fatal("the trickling connection was not closed")
	}
	if n := counter(reg, "ConnectionTooSlowCount"); n != 1 {
		t.Errorf("ConnectionTooSlowCount %d, want 1", n)
	}
}

// TestUDPReceiveBuffer: syslogudp asks for a 4 MiB receive buffer by
// default (the kernel's default is about 208 KiB), and receiveBufferSize
// when set.
func TestUDPReceiveBuffer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads SO_RCVBUF as Linux reports it")
	}
	max := 0
	if b, err := os.ReadFile("/proc/sys/net/core/rmem_max"); err == nil {
		max, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	for _, tt := range []struct {
		props map[string]string
		want  int
	}{
		{nil, 4 << 20},
		{map[string]string{"receiveBufferSize": "1048576"}, 1 << 20},
	} {
		pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
		s, _, _ := newSource(t, "syslogudp", tt.props, pl)
		u := s.(*UDPSource)
		u.mu.Lock()
		conn := u.sock.Conn
		u.mu.Unlock()
		rc, err := conn.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		if cerr := rc.Control(func(fd uintptr) { v, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); cerr != nil {
			t.Fatal(cerr)
		}
		want := tt.want
		if os.Geteuid() != 0 && max > 0 && max < want {
			want = max
		}
		if v/2 < want {
			t.Errorf("props %v: receive buffer %d bytes, want %d", tt.props, v/2, want)
		}
	}
}

// TestUDPInvalidLogged: datagrams that make no event, and those without a
// valid priority, are counted per reason and told once each.
func TestUDPInvalidLogged(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	var logs testutil.LogBuffer
	_, reg, addrs := newSourceLogged(t, "syslogudp", nil, pl, slog.New(slog.NewTextHandler(&logs, nil)))
	c, err := net.Dial("udp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 50 {
		c.Write([]byte("<"))
	}
	for range 30 {
		c.Write([]byte("no priority"))
	}
	c.Write([]byte("<13>Jun 15 11:22:33 host app: fine"))
	pl.Drain(t, 31, 5*time.Second)
	if n := counter(reg, "UnreadableMessageCount"); n != 50 {
		t.Errorf("UnreadableMessageCount %d, want 50", n)
	}
	if n := counter(reg, "InvalidMessageCount"); n != 30 {
		t.Errorf("InvalidMessageCount %d, want 30", n)
	}
	if n := logs.Count("makes no event"); n != 1 {
		t.Errorf("%d unreadable warnings, want 1:\n%s", n, logs.String())
	}
	if n := logs.Count("without a valid <PRI> header"); n != 1 {
		t.Errorf("%d invalid warnings, want 1:\n%s", n, logs.String())
	}
}

// TestTCPStoppingCloses: once the agent closed the source's processor, a
// connection that sends is no longer read and is closed, instead of being
// held while the put is retried as if the channel were full.
func TestTCPStoppingCloses(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	_, _, addrs := newSource(t, "syslogtcp", nil, pl)
	c, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := pl.Processor.(*flow.ChannelProcessor).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("<13>Jun 15 11:22:33 host app: late\n"))
	if !testutil.ClosedByServer(c, 3*time.Second) {
		t.Fatal("the connection was not closed")
	}
	if n := pl.Channel.Len(); n != 0 {
		t.Errorf("%d events put after the processor closed", n)
	}
}
