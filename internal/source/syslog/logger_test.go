package syslogsource

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestLogger sends RFC 3164 and RFC 5424 messages with the real logger
// tool over UDP, TCP with newlines and TCP with octet counting, to each
// source, and checks the events against what Flume makes of them.
func TestLogger(t *testing.T) {
	bin := testutil.SystemTool(t, "logger", "bsdutils")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	short, _, _ := strings.Cut(host, ".") // logger --rfc3164 sends the name up to its first dot
	for _, c := range []struct {
		name, typ string
		args      []string
		multiport bool
	}{
		{"udp-3164", "syslogudp", []string{"-d", "--rfc3164"}, false},
		{"udp-5424", "syslogudp", []string{"-d", "--rfc5424=notq"}, false},
		{"tcp-3164", "syslogtcp", []string{"-T", "--rfc3164"}, false},
		{"tcp-5424", "syslogtcp", []string{"-T", "--rfc5424=notq"}, false},
		{"tcp-5424-octet", "syslogtcp", []string{"-T", "--octet-count", "--rfc5424=notq"}, false},
		{"tcp-3164-octet", "syslogtcp", []string{"-T", "--octet-count", "--rfc3164"}, false},
		{"multiport-3164", "multiport_syslogtcp", []string{"-T", "--rfc3164"}, true},
		{"multiport-5424-octet", "multiport_syslogtcp", []string{"-T", "--octet-count", "--rfc5424=notq"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			_, reg, addrs := newSource(t, c.typ, map[string]string{"clientIPHeader": "clientIP"}, pl)
			_, port, _ := net.SplitHostPort(addrs[0])
			lines := []string{"first message", "second: with colon", "third \u00e9t\u00e9 unicode"}
			if c.typ == "syslogudp" {
				lines = lines[:1] // one datagram per logger run
			}
			args := append([]string{"-n", "127.0.0.1", "-P", port, "-t", "sluicetest", "-p", "local3.warn"}, c.args...)
			cmd := exec.Command(bin, args...)
			cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
			sent := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("logger %v: %v: %s", args, err, out)
			}
			got := pl.Drain(t, len(lines), 5*time.Second)
			if len(got) != len(lines) {
				t.Fatalf("got %d events %q, want %d", len(got), sourcetest.Bodies(got), len(lines))
			}
			is5424 := strings.Contains(strings.Join(c.args, " "), "5424")
			for i, e := range got {
				checkLoggerEvent(t, e, lines[i], is5424, c.multiport, host, short, sent)
			}
			if n := counter(reg, "EventReadFail"); n != 0 {
				t.Errorf("EventReadFail %d, want 0", n)
			}
		})
	}
}

func checkLoggerEvent(t *testing.T, e event.Event, line string, is5424, multiport bool, host, short string, sent time.Time) {
	t.Helper()
	h := e.Headers
	want := map[string]string{
		HeaderFacility: "19", // local3
		HeaderSeverity: "4",  // warning
		"clientIP":     "127.0.0.1",
	}
	body := "sluicetest: " + line
	if is5424 {
		want["host"] = host
		// After the hostname: APP-NAME PROCID MSGID STRUCTURED-DATA MSG.
		body = "sluicetest - - - " + line
	} else {
		want["host"] = short
	}
	if multiport {
		want[HeaderPriority] = "156"
		if is5424 {
			want[HeaderVersion] = "1"
		}
	} else {
		want["priority"] = "156"
		if is5424 {
			want["version"] = "1"
		}
	}
	for k, v := range want {
		if h.Value(k) != v {
			t.Errorf("header %s = %q, want %q (headers %v)", k, h.Value(k), v, h)
		}
	}
	if len(h) != len(want)+1 {
		t.Errorf("headers %v: want exactly %v and timestamp", h, want)
	}
	if string(e.Body) != body {
		t.Errorf("body %q, want %q", e.Body, body)
	}
	ms, err := strconv.ParseInt(h.Value("timestamp"), 10, 64)
	if err != nil {
		t.Fatalf("timestamp %q: %v", h.Value("timestamp"), err)
	}
	// RFC 3164 carries whole seconds; allow for that and a slow machine.
	if d := time.UnixMilli(ms).Sub(sent); d < -1500*time.Millisecond || d > 5*time.Second {
		t.Errorf("timestamp %s is %v from the send time %s", time.UnixMilli(ms), d, sent)
	}
}
