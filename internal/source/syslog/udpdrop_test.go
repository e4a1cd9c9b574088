package syslog

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestUDPDropsCounted floods a syslogudp source whose channel is full: what
// the kernel drops must show in DatagramDropCount, so that delivered plus
// dropped accounts for every datagram sent. It takes seconds and needs a
// kernel that reports drops (gVisor accepts SO_RXQ_OVFL but reports none), so
// it is opt-in:
//
//	SLUICE_LONG=1 go test -run TestUDPDropsCounted -v ./internal/source/syslog/
func TestUDPDropsCounted(t *testing.T) {
	if os.Getenv("SLUICE_LONG") == "" {
		t.Skip("set SLUICE_LONG=1 to run")
	}
	if runtime.GOOS != "linux" {
		t.Skip("kernel drop counts are read on Linux only")
	}
	pl := sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
	_, reg, addrs := newSource(t, "syslogudp", map[string]string{"batchSize": "10"}, pl)
	c, err := net.Dial("udp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 20000
	msg := []byte("<13>Jun 15 11:22:33 host flood flood flood flood flood flood flood flood")
	for range n {
		c.Write(msg)
	}
	if !sourcetest.Eventually(func() bool { return counter(reg, "DatagramDropCount") > 0 }, 5*time.Second) {
		t.Skip("the kernel dropped nothing or does not report drops (SO_RXQ_OVFL) here")
	}
	var got int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got += len(pl.Take(t, 10, 300*time.Millisecond))
		if int64(got)+counter(reg, "DatagramDropCount") >= n {
			break
		}
	}
	drops := counter(reg, "DatagramDropCount")
	if int64(got)+drops != n {
		t.Errorf("delivered %d + dropped %d = %d, want %d sent", got, drops, int64(got)+drops, n)
	}
	t.Logf("delivered %d, kernel dropped %d", got, drops)
}
