package netcatsource

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newUDP(t *testing.T, props map[string]string) *UDPSource {
	t.Helper()
	return sourcetest.New(t, NewUDP, sourcetest.Env("r1", "netcatudp"), sourcetest.Loopback(props)).(*UDPSource)
}

func TestUDPDatagramsBecomeEvents(t *testing.T) {
	for _, key := range []string{"remoteAddressHeader", "remoteAddress", ""} {
		t.Run("header key "+key, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			props := map[string]string{}
			if key != "" {
				props[key] = "src"
			}
			s := newUDP(t, props)
			start(t, s, pl.Processor)
			c, err := net.Dial("udp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Flume keeps a datagram up to its first newline.
			for _, d := range []string{"hello\n", "two\nlines", "no newline", "\n", "crlf\r\n"} {
				if _, err := c.Write([]byte(d)); err != nil {
					t.Fatal(err)
				}
			}
			got := pl.Drain(t, 5, 5*time.Second)
			want := []string{"hello", "two", "no newline", "", "crlf\r"}
			if !slices.Equal(sourcetest.Bodies(got), want) {
				t.Fatalf("bodies = %q, want %q", sourcetest.Bodies(got), want)
			}
			local := c.LocalAddr().(*net.UDPAddr)
			wantHeader := "/127.0.0.1:" + strconv.Itoa(local.Port)
			for _, e := range got {
				if key == "" {
					if len(e.Headers) != 0 {
						t.Errorf("headers %v without remoteAddressHeader", e.Headers)
					}
				} else if e.Headers.Value("src") != wantHeader {
					t.Errorf("header src = %q, want %q", e.Headers.Value("src"), wantHeader)
				}
			}
		})
	}
}

func TestUDPWaitsForChannelSpace(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 2, 2, 0)
	s := newUDP(t, nil)
	start(t, s, pl.Processor)
	c, err := net.Dial("udp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range []string{"a", "b", "c", "d"} {
		c.Write([]byte(d))
	}
	if !testutil.Eventually(func() bool { return s.counters.ChannelWriteFail.Load() > 0 }, 5*time.Second) {
		t.Fatal("the source never hit the full channel")
	}
	got := sourcetest.Bodies(pl.Drain(t, 4, 5*time.Second))
	if !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("bodies = %q, want a b c d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestJavaAddr(t *testing.T) {
	tests := map[string]string{
		"127.0.0.1:5140":         "/127.0.0.1:5140",
		"[::1]:80":               "/0:0:0:0:0:0:0:1:80",
		"[::ffff:10.0.0.1]:9":    "/10.0.0.1:9",
		"[2001:db8::ab:1]:65535": "/2001:db8:0:0:0:0:ab:1:65535",
	}
	for in, want := range tests {
		if got := string(appendJavaAddr(nil, netip.MustParseAddrPort(in))); got != want {
			t.Errorf("%s: got %q, want %q", in, got, want)
		}
	}
}
