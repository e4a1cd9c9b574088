package syslogsource

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// sendPiledUp sends a message, then, while the source is busy with it,
// n messages of 256 bytes over TCP (or n datagrams); it returns the sizes
// of the batches after the first.
func sendPiledUp(t *testing.T, typ string, props map[string]string, p *sourcetest.HoldProcessor, n int) []int {
	t.Helper()
	_, _, addrs := newSource(t, typ, props, &sourcetest.Pipeline{Processor: p})
	network := "tcp"
	if typ == "syslogudp" {
		network = "udp"
	}
	c, err := net.Dial(network, addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := func(i int) []byte {
		m := "<13>Jun 15 11:22:33 host m" + strconv.Itoa(i) + " "
		return []byte(m + strings.Repeat("x", 255-len(m)) + "\n")
	}
	if _, err := c.Write(msg(0)); err != nil {
		t.Fatal(err)
	}
	<-p.First()
	var all []byte
	for i := 1; i <= n; i++ {
		if network == "udp" {
			if _, err := c.Write(msg(i)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		all = append(all, msg(i)...)
	}
	if _, err := c.Write(all); err != nil {
		t.Fatal(err)
	}
	if network == "udp" {
		time.Sleep(100 * time.Millisecond) // the reader queues them meanwhile
	}
	p.Release()
	sizes, _ := p.Wait(t, n+1, 10*time.Second)
	return sizes[1:]
}

// With batchSize left at its default a batch grows past 100 messages to the
// channels' transactionCapacity while messages are already there
// (flow.Batching); a batchSize that is set stays the maximum.
func TestTCPBatchGrowsToTransactionCapacity(t *testing.T) {
	for _, typ := range []string{"syslogtcp", "multiport_syslogtcp"} {
		t.Run(typ, func(t *testing.T) {
			p := sourcetest.NewHoldProcessor(1000)
			sizes := sendPiledUp(t, typ, nil, p, 3000)
			if !slices.Equal(sizes, []int{1000, 1000, 1000}) {
				t.Fatalf("batches %v after the first message; want [1000 1000 1000]", sizes)
			}
			p = sourcetest.NewHoldProcessor(1000)
			sizes = sendPiledUp(t, typ, map[string]string{"batchSize": "100"}, p, 3000)
			if m := slices.Max(sizes); m != 100 {
				t.Fatalf("batchSize 100: largest batch %d (batches %v), want 100", m, sizes)
			}
		})
	}
}

// A UDP batch grows too, up to what its queue holds (4 × batchSize
// datagrams, which bound the memory).
func TestUDPBatchGrowsToTransactionCapacity(t *testing.T) {
	p := sourcetest.NewHoldProcessor(1000)
	sizes := sendPiledUp(t, "syslogudp", nil, p, 800)
	if m := slices.Max(sizes); m <= DefaultBatchSize || m > 4*DefaultBatchSize {
		t.Fatalf("largest batch %d datagrams (batches %v); want more than the default %d, at most the queue's %d", m, sizes, DefaultBatchSize, 4*DefaultBatchSize)
	}
	p = sourcetest.NewHoldProcessor(1000)
	sizes = sendPiledUp(t, "syslogudp", map[string]string{"batchSize": "100"}, p, 800)
	if m := slices.Max(sizes); m > 100 {
		t.Fatalf("batchSize 100: largest batch %d (batches %v)", m, sizes)
	}
}

// Messages that come in parts, the first ending in a partial message (so
// its batch leaves unread bytes behind handled ones): the second part's
// batch is topped up, which moves the unread bytes to the front of the
// buffer even when nothing more came, and every message, of it and of the
// third part, must arrive once, in order.
func TestTCPToppedUpBatchAfterAPartialMessage(t *testing.T) {
	p := sourcetest.NewHoldProcessor(1000)
	p.Release()
	_, _, addrs := newSource(t, "syslogtcp", nil, &sourcetest.Pipeline{Processor: p})
	c, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var want []string
	msgs := func(from, n int) string {
		var b strings.Builder
		for i := from; i < from+n; i++ {
			m := fmt.Sprintf("<13>Jun 15 11:22:33 host m%05d ", i)
			m += strings.Repeat("x", 255-len(m))
			b.WriteString(m + "\n")
			want = append(want, m[len("<13>Jun 15 11:22:33 host "):])
		}
		return b.String()
	}
	first, second, third := msgs(0, 20), msgs(20, 100), msgs(120, 30)
	for _, part := range []string{first + second[:100], second[100:], third} {
		if _, err := c.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the source handles it before the next part
	}
	p.Wait(t, len(want), 10*time.Second)
	time.Sleep(50 * time.Millisecond) // nothing more may come
	sizes, bodies := p.Wait(t, len(want), 0)
	for i := range want {
		if bodies[i] != want[i] {
			t.Fatalf("message %d is %.12q, want %.12q (batches %v)", i, bodies[i], want[i], sizes)
		}
	}
}
