package netcatsource_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/netcat"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestSourceSuite runs the source contract against the netcat source,
// whose sender waits for an OK per line and reads FAILED when the agent
// stops, and the netcatudp source, whose sender cannot be pushed back.
func TestSourceSuite(t *testing.T) {
	t.Run("netcat", func(t *testing.T) {
		sourcetest.RunSourceSuite(t, sourcetest.Harness{
			Type: "netcat", New: netcatsource.New, Props: sourcetest.Loopback(nil),
			Dial: dialLines, Acks: true, StoppingReply: "FAILED: agent is stopping",
			Malformed: []byte(strings.Repeat("x", 600) + "\n"), // over max-line-length (512)
		})
	})
	t.Run("netcatudp", func(t *testing.T) {
		sourcetest.RunSourceSuite(t, sourcetest.Harness{
			Type: "netcatudp", New: netcatsource.NewUDP, Props: sourcetest.Loopback(nil),
			Dial: func(ctx context.Context, addr string) (sourcetest.Session, error) {
				return sourcetest.DatagramSession(ctx, addr, func(body string) string { return body })
			},
			Lossy: true,
		})
	})
}

// lineSender writes lines and reads one answer per line, as a netcat
// client with ack-every-event does.
type lineSender struct {
	c net.Conn
	r *bufio.Reader
}

func dialLines(ctx context.Context, addr string) (sourcetest.Session, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &lineSender{c: c, r: bufio.NewReader(c)}, nil
}

func (s *lineSender) Send(ctx context.Context, bodies []string) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = s.c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := s.c.Write([]byte(strings.Join(bodies, "\n") + "\n")); err != nil {
		return err
	}
	for range bodies {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("read the answer: %w", err)
		}
		if line != "OK\n" {
			return fmt.Errorf("answered %q", line)
		}
	}
	return nil
}

func (s *lineSender) Close() error { return s.c.Close() }
