package avrosource

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestBadInputIsLogged: a connection closed for what it sent is logged
// with the peer and the reason; a repeat of the same kind within the
// throttle window is counted, not logged again, so a hostile peer cannot
// flood the log.
func TestBadInputIsLogged(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, 100*time.Millisecond)
	var logs testutil.LogBuffer
	s := newSourceLogged(t, map[string]string{"stall-timeout": "200"}, slog.New(slog.NewTextHandler(&logs, nil)))
	addr := start(t, s, pl.Processor)

	send := func(b []byte) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("got a reply, want the connection closed")
		}
		return c.LocalAddr().String()
	}
	wait := func(substr string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(logs.String(), substr) {
			if time.Now().After(deadline) {
				t.Fatalf("log lacks %q:\n%s", substr, logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// An HTTP request reads as a pack header with an absurd frame count.
	garbage := send([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	wait("peer=" + garbage)
	if l := logs.String(); !strings.Contains(l, "sent bad data") || !strings.Contains(l, "frame count") {
		t.Fatalf("the warning does not say what was wrong:\n%s", l)
	}
	absurd := send([]byte{0, 0, 0, 1, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff})
	stalled := send([]byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 100, 1, 2})
	wait("peer=" + stalled)
	if l := logs.String(); !strings.Contains(l, "timeout") {
		t.Fatalf("the stall's warning does not say so:\n%s", l)
	}
	if strings.Contains(logs.String(), "peer="+absurd) {
		t.Errorf("a second bad-data warning within the throttle window was logged:\n%s", logs.String())
	}
	if got := counter(s, "EventReadFail"); got != "2" {
		t.Errorf("EventReadFail = %s, want 2 (garbage and the absurd length; a stall is not bad data)", got)
	}
}
