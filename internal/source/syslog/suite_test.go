package syslogsource_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
	syslogsource "github.com/sluicehq/sluice/internal/source/syslog"
)

// TestSourceSuite runs the source contract against the syslog sources.
// Syslog has no acknowledgement: over TCP the source pushes back by not
// reading and refuses by closing the connection; over UDP what the socket
// cannot hold is dropped and counted. Input that is not syslog is
// delivered tagged, as Flume does, so it closes nothing.
func TestSourceSuite(t *testing.T) {
	notSyslog := []byte("this is not syslog\n\x00\xff\n")
	for _, h := range []sourcetest.Harness{
		{Type: "syslogtcp", New: syslogsource.NewTCP, Props: map[string]string{"host": "127.0.0.1", "port": "0"},
			Dial: dialStream, Malformed: notSyslog, MalformedKept: true},
		{Type: "multiport_syslogtcp", New: syslogsource.NewMultiport, Props: map[string]string{"host": "127.0.0.1", "ports": "0"},
			Dial: dialStream, Malformed: notSyslog, MalformedKept: true},
		{Type: "syslogudp", New: syslogsource.NewUDP, Props: map[string]string{"host": "127.0.0.1", "port": "0"},
			Dial: func(ctx context.Context, addr string) (sourcetest.Session, error) {
				return sourcetest.DatagramSession(ctx, addr, line)
			},
			Lossy: true},
	} {
		t.Run(h.Type, func(t *testing.T) { sourcetest.RunSourceSuite(t, h) })
	}
}

// line is an RFC 3164 message whose body ends with body.
func line(body string) string { return "<13>Jan  1 00:00:00 host app: " + body }

// streamSender writes newline-framed messages.
type streamSender struct{ c net.Conn }

func dialStream(ctx context.Context, addr string) (sourcetest.Session, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return streamSender{c}, nil
}

func (s streamSender) Send(ctx context.Context, bodies []string) error {
	var b strings.Builder
	for _, body := range bodies {
		fmt.Fprintf(&b, "%s\n", line(body))
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.c.SetWriteDeadline(dl)
	}
	_, err := s.c.Write([]byte(b.String()))
	return err
}

func (s streamSender) ClosedBySource(wait time.Duration) bool {
	return sourcetest.ClosedBySource(s.c, wait)
}

func (s streamSender) Close() error { return s.c.Close() }
