package syslogsource

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestUDPDropsCounted floods a syslogudp source whose channel is full, then
// stops it without another datagram: the datagrams the channel took plus
// DatagramDropCount is every datagram sent, exactly. The kernel's drops of
// the burst's tail are known from the socket alone (no datagram follows
// them), and what the socket or the source still held at the stop is
// counted too. The stop comes as the agent's does (intake closed first) or
// by the stop's deadline.
func TestUDPDropsCounted(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("kernel drop counts are read on Linux only")
	}
	for _, how := range []string{"intake closed", "stop deadline"} {
		t.Run(how, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 10, 10, 20*time.Millisecond)
			src, reg, addrs := newSource(t, "syslogudp", map[string]string{"batchSize": "10", "receiveBufferSize": "1"}, pl)
			c, err := net.Dial("udp", addrs[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const sent = 2000
			msg := []byte("<13>Jun 15 11:22:33 host flood flood flood flood flood flood flood flood")
			for range sent {
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(100 * time.Millisecond) // the burst reaches the socket
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if how == "intake closed" {
				if err := pl.Processor.(*flow.ChannelProcessor).Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				ctx = context.Background()
			}
			if err := src.Stop(ctx); err != nil && how == "intake closed" {
				t.Fatalf("stop: %v", err)
			}
			took := int64(pl.Channel.Len())
			drops := counter(reg, "DatagramDropCount")
			if accepted := counter(reg, "EventAcceptedCount"); accepted != took {
				t.Errorf("EventAcceptedCount %d, but the channel holds %d", accepted, took)
			}
			if took+drops != sent || drops == 0 {
				t.Errorf("channel %d + dropped %d = %d, want %d sent", took, drops, took+drops, sent)
			}
		})
	}
}
