package testutil

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePort checks that the ports FreePort hands out are outside the
// kernel's ephemeral range, never handed out twice, and free to bind for
// both TCP and UDP.
func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p < freePortMin || p > freePortMax {
			t.Fatalf("port %d outside %d-%d", p, freePortMin, freePortMax)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	p := FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pc.Close()
}
