package syslogsource

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// newSource builds a source of type typ (syslogtcp, syslogudp,
// multiport_syslogtcp) on 127.0.0.1 port 0 with extra properties, starts it
// into a fresh pipeline and returns its metrics set and address(es).
func newSource(tb testing.TB, typ string, props map[string]string, pl *sourcetest.Pipeline) (flow.Source, *metrics.Registry, []string) {
	tb.Helper()
	return newSourceLogged(tb, typ, props, pl, nil)
}

// newSourceLogged is newSource with the source logging to log (nil: nowhere).
func newSourceLogged(tb testing.TB, typ string, props map[string]string, pl *sourcetest.Pipeline, log *slog.Logger) (flow.Source, *metrics.Registry, []string) {
	tb.Helper()
	m := map[string]string{"host": "127.0.0.1"}
	if typ == "multiport_syslogtcp" {
		m["ports"] = "0"
	} else {
		m["port"] = "0"
	}
	for k, v := range props {
		m[k] = v
	}
	p := config.FromMap("a1.sources.r1.", m)
	env := sourcetest.Env("r1", typ)
	if log != nil {
		env.Logger = log
	}
	var s flow.Source
	var err error
	switch typ {
	case "syslogtcp":
		s, err = NewTCP(env, p)
	case "syslogudp":
		s, err = NewUDP(env, p)
	case "multiport_syslogtcp":
		s, err = NewMultiport(env, p)
	}
	if err != nil {
		tb.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	var addrs []string
	switch s := s.(type) {
	case *TCPSource:
		for _, a := range s.Addrs() {
			addrs = append(addrs, a.String())
		}
	case *MultiportSource:
		for _, a := range s.Addrs() {
			addrs = append(addrs, a.String())
		}
	case *UDPSource:
		addrs = append(addrs, s.Addr().String())
	}
	return s, env.Metrics, addrs
}

func counter(reg *metrics.Registry, name string) int64 {
	return testutil.Counter(reg, metrics.KindSource, "r1", name)
}

func send(tb testing.TB, addr string, chunks ...string) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	for _, ch := range chunks {
		if _, err := c.Write([]byte(ch)); err != nil {
			tb.Fatal(err)
		}
	}
}

func TestTCPFramings(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1000, 100, time.Second)
	_, reg, addrs := newSource(t, "syslogtcp", nil, pl)
	msgA := "<13>1 2026-06-15T11:22:33Z host1 app - - [x] octet\nwith newline"
	// Newline framed, octet counted, split across writes and mixed on one connection.
	send(t, addrs[0],
		"<13>Jun 15 11:22:33 host0 one\n<14>Jun 15 11:22:33 host0 tw",
		"o\n"+strconv.Itoa(len(msgA))+" "+msgA[:10], msgA[10:],
		"12 <13>abc\n\nxyz\n", // 12 bytes: "<13>abc\n\nxyz" minus nothing
		"<10>last without newline")
	got := pl.Drain(t, 5, 5*time.Second)
	want := []string{"one", "two", "app - - [x] octet\nwith newline", "<13>abc\n\nxyz", "<10>last without newline"}
	if bodies := sourcetest.Bodies(got); strings.Join(bodies, "|") != strings.Join(want, "|") {
		t.Fatalf("bodies %q, want %q", bodies, want)
	}
	if got[2].Headers.Value("host") != "host1" || got[2].Headers.Value("timestamp") != "1781522553000" {
		t.Errorf("octet-counted headers %v", got[2].Headers)
	}
	if got[0].Headers.Value("host") != "host0" || got[0].Headers.Value(HeaderSeverity) != "5" || got[1].Headers.Value(HeaderSeverity) != "6" {
		t.Errorf("newline headers %v %v", got[0].Headers, got[1].Headers)
	}
	if !testutil.Eventually(func() bool { return counter(reg, "EventAcceptedCount") == 5 }, time.Second) {
		t.Errorf("EventAcceptedCount %d, want 5", counter(reg, "EventAcceptedCount"))
	}
}

// TestTCPBadInput sends what a broken or hostile sender sends and checks
// that every message is tagged as Flume tags it, counted, and that a huge
// octet count costs no more than eventSize.
func TestTCPBadInput(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1000, 100, time.Second)
	_, reg, addrs := newSource(t, "syslogtcp", map[string]string{"eventSize": "100"}, pl)
	huge := "999999999 <13>" + strings.Repeat("x", 300) // claims ~1 GB, sends 300 bytes, then closes
	send(t, addrs[0],
		"<10F> bad priority\n",
		"<1234> too long priority\n",
		"no priority at all\n",
		"<13>"+strings.Repeat("y", 150)+"\n", // longer than eventSize: Incomplete, then the rest is Invalid
		"<13>Jun 15 11:22:33 host bad utf8 \xff\xfe\n",
		"20 <13>truncated", // a frame cut short by the close follows
	)
	got := pl.Drain(t, 7, 5*time.Second)
	send(t, addrs[0], huge)
	got = append(got, pl.Drain(t, 1, 5*time.Second)...)
	type want struct{ status, body string }
	wants := []want{
		{StatusInvalid, "<10F> bad priority"},
		{StatusInvalid, "<1234> too long priority"},
		{StatusInvalid, "no priority at all"},
		{StatusIncomplete, "<13>" + strings.Repeat("y", 96)},
		{StatusInvalid, strings.Repeat("y", 54)},
		{"", "bad utf8 \uFFFD\uFFFD"},
		{StatusIncomplete, "<13>truncated"},
		{StatusIncomplete, "<13>" + strings.Repeat("x", 96)},
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d events %q, want %d", len(got), sourcetest.Bodies(got), len(wants))
	}
	for i, w := range wants {
		if got[i].Headers.Value(HeaderStatus) != w.status || string(got[i].Body) != w.body {
			t.Errorf("event %d: status %q body %q, want %q %q", i, got[i].Headers.Value(HeaderStatus), got[i].Body, w.status, w.body)
		}
	}
	// Invalid events and the truncated frame count as read failures.
	if n := counter(reg, "EventReadFail"); n != 5 {
		t.Errorf("EventReadFail %d, want 5", n)
	}
}

// TestTCPBackpressure fills a tiny channel: the source must stop reading,
// so the sender's writes block once the socket buffers are full, and
// everything must arrive, in order, once the channel drains.
func TestTCPBackpressure(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 20, 20, 50*time.Millisecond)
	_, reg, addrs := newSource(t, "syslogtcp", map[string]string{"batchSize": "20"}, pl)
	pad := strings.Repeat("p", 1000)
	blocked := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", addrs[0])
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		for i := 0; ; i++ {
			msg := []byte("<13>Jun 15 11:22:33 host m" + strconv.Itoa(i) + " " + pad + "\n")
			c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			n, err := c.Write(msg)
			if err == nil {
				continue
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				done <- err
				return
			}
			blocked <- i + 1
			c.SetWriteDeadline(time.Time{})
			_, err = c.Write(msg[n:])
			done <- err
			return
		}
	}()
	var n int
	select {
	case n = <-blocked:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("the sender never blocked although the channel was full")
	}
	if counter(reg, "ChannelWriteFail") == 0 {
		t.Error("ChannelWriteFail stayed 0 while the channel was full")
	}
	got := pl.Drain(t, n, 20*time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("got %d events, want %d", len(got), n)
	}
	for i, e := range got {
		if !strings.HasPrefix(string(e.Body), "m"+strconv.Itoa(i)+" ") {
			t.Fatalf("event %d is %.20q", i, e.Body)
		}
	}
	t.Logf("%d messages (%d KiB) were in flight when the sender blocked", n, n*len(pad)/1024)
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert := testutil.SelfSigned(t, "localhost")
	certPEM, keyPEM := cert.CertPEM(), cert.KeyPEM()
	ks := filepath.Join(dir, "server.pem")
	if err := os.WriteFile(ks, append(certPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	for _, typ := range []string{"syslogtcp", "multiport_syslogtcp"} {
		t.Run(typ, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			_, _, addrs := newSource(t, typ, map[string]string{"ssl": "true", "keystore": ks, "keystore-type": "PEM"}, pl)
			c, err := tls.Dial("tcp", addrs[0], &tls.Config{RootCAs: pool, ServerName: "localhost"})
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("<13>Jun 15 11:22:33 host over tls\n"))
			c.Close()
			got := pl.Drain(t, 1, 5*time.Second)
			if len(got) != 1 || string(got[0].Body) != "over tls" {
				t.Fatalf("got %q", sourcetest.Bodies(got))
			}
			// A plain-text client gets nothing in.
			send(t, addrs[0], "<13>Jun 15 11:22:33 host plain\n")
			if got := pl.Take(t, 10, 200*time.Millisecond); len(got) != 0 {
				t.Fatalf("plain text got through TLS: %q", sourcetest.Bodies(got))
			}
		})
	}
}

func TestMultiport(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	_, reg, addrs := newSource(t, "multiport_syslogtcp", map[string]string{
		"ports": "0 0", "portHeader": "port", "clientIPHeader": "ip", "clientHostnameHeader": "hn", "eventSize": "80",
	}, pl)
	if len(addrs) != 2 {
		t.Fatalf("listening on %v, want two ports", addrs)
	}
	send(t, addrs[0], "<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - msg one\n")
	send(t, addrs[1], "<13>Jun 15 11:22:33 host \xff invalid utf8\n<13>no header\n<13>1 - host "+strings.Repeat("z", 80)+"\n")
	got := pl.Drain(t, 5, 5*time.Second)
	if len(got) != 5 {
		t.Fatalf("got %q", sourcetest.Bodies(got))
	}
	byPort := map[string][]event.Event{}
	for _, e := range got {
		byPort[e.Headers.Value("port")] = append(byPort[e.Headers.Value("port")], e)
	}
	_, p0, _ := net.SplitHostPort(addrs[0])
	_, p1, _ := net.SplitHostPort(addrs[1])
	e := byPort[p0][0]
	if string(e.Body) != "su - ID47 - msg one" || e.Headers.Value("timestamp") != "1065910455003" || e.Headers.Value(HeaderPriority) != "34" ||
		e.Headers.Value(HeaderVersion) != "1" || e.Headers.Value("host") != "mymachine.example.com" || e.Headers.Value("ip") != "127.0.0.1" || e.Headers.Value("hn") != "localhost" {
		t.Errorf("port %s event: %v %q", p0, e.Headers, e.Body)
	}
	es := byPort[p1]
	if len(es) != 4 {
		t.Fatalf("port %s: %d events", p1, len(es))
	}
	if es[0].Headers.Value(HeaderStatus) != StatusInvalid || string(es[0].Body) != "<13>Jun 15 11:22:33 host \xff invalid utf8" {
		t.Errorf("invalid UTF-8: %v %q", es[0].Headers, es[0].Body)
	}
	if es[1].Headers.Value(HeaderStatus) != StatusInvalid {
		t.Errorf("no header: %v %q", es[1].Headers, es[1].Body)
	}
	if es[2].Headers.Value(HeaderStatus) != StatusIncomplete || len(es[2].Body) != 80-len("<13>1 - host ") {
		t.Errorf("cut line: %v %q", es[2].Headers, es[2].Body)
	}
	if n := counter(reg, "EventReadFail"); n < 2 {
		t.Errorf("EventReadFail %d, want at least 2", n)
	}
}

func TestUDP(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	_, reg, addrs := newSource(t, "syslogudp", map[string]string{"clientIPHeader": "ip", "keepFields": "hostname"}, pl)
	c, err := net.Dial("udp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range []string{"<13>Jun 15 11:22:33 host one\nignored rest", "", "<", "<1x bad"} {
		c.Write([]byte(d))
	}
	got := pl.Drain(t, 2, 5*time.Second)
	if len(got) != 2 || string(got[0].Body) != "host one" || got[0].Headers.Value("ip") != "127.0.0.1" ||
		got[1].Headers.Value(HeaderStatus) != StatusInvalid || string(got[1].Body) != "<1x bad" {
		t.Fatalf("got %q %v", sourcetest.Bodies(got), got)
	}
	// The empty datagram and "<" make no event and count as read failures,
	// as Flume's failed Integer.parseInt does; "<1x" is Invalid and counted.
	if !testutil.Eventually(func() bool { return counter(reg, "EventReadFail") == 3 }, time.Second) {
		t.Errorf("EventReadFail %d, want 3", counter(reg, "EventReadFail"))
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []struct {
		typ   string
		props map[string]string
		err   string
	}{
		{"syslogtcp", map[string]string{}, "port: missing required property"},
		{"syslogtcp", map[string]string{"port": "70000"}, "out of range"},
		{"syslogtcp", map[string]string{"port": "1", "format.regex": "x"}, "custom syslog formats"},
		{"syslogtcp", map[string]string{"port": "1", "framing": "octet"}, "not one of auto, newline"},
		{"syslogtcp", map[string]string{"port": "1", "ssl": "true"}, "no keystore"},
		{"syslogtcp", map[string]string{"port": "1", "eventSize": "0"}, "out of range"},
		{"syslogudp", map[string]string{"port": "x"}, "not a whole number"},
		{"multiport_syslogtcp", map[string]string{}, "ports: missing required property"},
		{"multiport_syslogtcp", map[string]string{"ports": "1 x"}, `"x" is not a port number`},
		{"multiport_syslogtcp", map[string]string{"ports": "1", "charset.default": "EBCDIC"}, "not supported"},
		{"multiport_syslogtcp", map[string]string{"ports": "1", "charset.port.2": "UTF-8"}, "not one of the ports"},
		{"multiport_syslogtcp", map[string]string{"ports": "1 2", "charset.port.2": "ISO-8859-1", "readBufferBytes": "2048", "numProcessors": "4", "portHeader": "p"}, ""},
		{"syslogtcp", map[string]string{"port": "1", "host": "0.0.0.0", "eventSize": "5", "keepFields": "all", "clientIPHeader": "a", "clientHostnameHeader": "b", "batchSize": "10", "framing": "newline"}, ""},
		{"syslogudp", map[string]string{"port": "1", "eventSize": "5000", "keepFields": "priority timestamp"}, ""},
	} {
		p := config.FromMap("a1.sources.r1.", c.props)
		env := sourcetest.Env("r1", c.typ)
		switch c.typ {
		case "syslogtcp":
			_, _ = NewTCP(env, p) // the problems are recorded in p
		case "syslogudp":
			_, _ = NewUDP(env, p)
		default:
			_, _ = NewMultiport(env, p)
		}
		p.Unused()
		err := p.Err()
		if c.err == "" {
			if err != nil {
				t.Errorf("%s %v: %v", c.typ, c.props, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s %v: error %v, want %q", c.typ, c.props, err, c.err)
		}
	}
}
