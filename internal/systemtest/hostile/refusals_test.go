package hostile

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestRefusalsCountedAndThrottled runs the real agent with every kind of
// TLS listener it has (the syslogtcp, avro and http sources, and the
// monitoring port with --http-tls-cert) and a plain http source, and
// treats them as a careless or hostile network would:
//
//   - 300 clients each fail a TLS handshake on every TLS listener (they do
//     not trust the agent's certificate, so they abort with an alert): each
//     failure is counted (TLSHandshakeFailCount; on the monitoring port
//     sluice_monitoring_tls_handshake_fail_total) and the log says so a
//     couple of times per listener, not 300;
//   - a client sends an HTTP request's headers a byte at a time: the http
//     source closes it by its progress rule (progressTimeout, here 12 s),
//     counts it (ConnectionTooSlowCount) and says so, where net/http's fixed
//     10 s ReadHeaderTimeout used to cut it with no count and no line.
func TestRefusalsCountedAndThrottled(t *testing.T) {
	const clients = 300
	dir := t.TempDir()
	cert := testutil.SelfSigned(t, "localhost", "127.0.0.1")
	ks := filepath.Join(dir, "server.pem")
	if err := os.WriteFile(ks, append(cert.CertPEM(), cert.KeyPEM()...), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := cert.Files(t)
	ports := map[string]int{}
	for _, s := range []string{"syslogtcp", "avro", "https", "http"} {
		ports[s] = testutil.FreePort(t)
	}
	tlsKeys := "ssl = true\n%[1]s.keystore = " + ks + "\n%[1]s.keystore-type = PEM\n"
	conf := fmt.Sprintf(`a1.sources = syslogtcp avro https http
a1.channels = c1
a1.sinks = k1
a1.sources.syslogtcp.type = syslogtcp
a1.sources.syslogtcp.host = 127.0.0.1
a1.sources.syslogtcp.port = %d
a1.sources.syslogtcp.channels = c1
a1.sources.syslogtcp.%s
a1.sources.avro.type = avro
a1.sources.avro.bind = 127.0.0.1
a1.sources.avro.port = %d
a1.sources.avro.channels = c1
a1.sources.avro.%s
a1.sources.https.type = http
a1.sources.https.bind = 127.0.0.1
a1.sources.https.port = %d
a1.sources.https.channels = c1
a1.sources.https.%s
a1.sources.http.type = http
a1.sources.http.bind = 127.0.0.1
a1.sources.http.port = %d
a1.sources.http.progressTimeout = 12000
a1.sources.http.channels = c1
a1.channels.c1.type = memory
a1.sinks.k1.type = null
a1.sinks.k1.channel = c1
`, ports["syslogtcp"], fmt.Sprintf(tlsKeys, "a1.sources.syslogtcp"), ports["avro"], fmt.Sprintf(tlsKeys, "a1.sources.avro"),
		ports["https"], fmt.Sprintf(tlsKeys, "a1.sources.https"), ports["http"])
	confFile := filepath.Join(dir, "agent.properties")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	monitor := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	p := testutil.StartAgent(t, testutil.AgentBinary(t), confFile, "--log-format", "json",
		"--http", monitor, "--http-tls-cert", certFile, "--http-tls-key", keyFile)
	logs := p.Log
	pool := x509.NewCertPool()
	pool.AddCert(cert.X509)
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	get := func(path string) (string, error) {
		resp, err := trusting.Get("https://" + monitor + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	p.WaitUntil(20*time.Second, "the agent to be healthy", func() bool {
		body, err := get("/healthz")
		return err == nil && strings.HasPrefix(body, "ok")
	})

	// The slow sender, meanwhile: a request's headers at 5 bytes a second.
	var slow struct {
		sync.WaitGroup
		closedAfter time.Duration
		err         error
	}
	slow.Add(1)
	go func() {
		defer slow.Done()
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(ports["http"]))
		if err != nil {
			slow.err = err
			return
		}
		defer c.Close()
		start := time.Now()
		head := "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Padding: " + strings.Repeat("a", 200)
		for i := range len(head) {
			if _, err := c.Write([]byte{head[i]}); err != nil {
				slow.closedAfter = time.Since(start)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		slow.err = fmt.Errorf("the connection was still open after %v of trickled headers", time.Since(start))
	}()

	// 300 clients that do not trust the agent's certificate, on every TLS
	// listener.
	distrust := &tls.Config{ServerName: "localhost", RootCAs: x509.NewCertPool()}
	listeners := map[string]string{
		"syslogtcp": "127.0.0.1:" + strconv.Itoa(ports["syslogtcp"]),
		"avro":      "127.0.0.1:" + strconv.Itoa(ports["avro"]),
		"https":     "127.0.0.1:" + strconv.Itoa(ports["https"]),
		"monitor":   monitor,
	}
	for name, addr := range listeners {
		for i := range clients {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, distrust)
			if err == nil {
				c.Close()
				t.Fatalf("%s: client %d completed a handshake it should have refused", name, i)
			}
		}
	}

	// Counted: every failed handshake, on every listener.
	sources := func() map[string]map[string]string {
		body, err := get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]map[string]string
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	promValue := func(name string) string {
		body, err := get("/metrics/prometheus")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, name+"{") {
				return line[strings.LastIndex(line, " ")+1:]
			}
		}
		return "absent"
	}
	want := strconv.Itoa(clients)
	var got map[string]map[string]string
	var monitorCount string
	deadline := time.Now().Add(5 * time.Second) // the last failures are counted as the agent sees the alerts
	for {
		got, monitorCount = sources(), promValue("sluice_monitoring_tls_handshake_fail_total")
		if (got["SOURCE.syslogtcp"]["TLSHandshakeFailCount"] == want && got["SOURCE.avro"]["TLSHandshakeFailCount"] == want &&
			got["SOURCE.https"]["TLSHandshakeFailCount"] == want && monitorCount == want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range []string{"syslogtcp", "avro", "https"} {
		if n := got["SOURCE."+s]["TLSHandshakeFailCount"]; n != want {
			t.Errorf("%s: TLSHandshakeFailCount %q after %d failed handshakes", s, n, clients)
		}
	}
	if monitorCount != want {
		t.Errorf("monitoring port: sluice_monitoring_tls_handshake_fail_total %s after %d failed handshakes", monitorCount, clients)
	}

	slow.Wait()
	if slow.err != nil {
		t.Fatal(slow.err)
	}
	t.Logf("the trickled request was closed after %v", slow.closedAfter.Round(time.Millisecond))
	if slow.closedAfter < 11*time.Second {
		t.Errorf("the trickled request was closed after %v, before its 12 s progress window ended (net/http's own timeout?)", slow.closedAfter)
	}
	if n := sources()["SOURCE.http"]["ConnectionTooSlowCount"]; n != "1" {
		t.Errorf("http source: ConnectionTooSlowCount %q after one trickled request", n)
	}

	// Told: each listener's refusals a couple of times, not once each.
	count := func(source, msg string) int {
		n := 0
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["source"] == source && strings.HasPrefix(rec["msg"].(string), msg) {
				n++
			}
		}
		return n
	}
	for _, s := range []string{"syslogtcp", "avro", "https", "monitoring"} {
		n := count(s, "closed a connection whose TLS handshake failed")
		t.Logf("%s: %d lines for %d failed handshakes", s, n, clients)
		if n < 1 || n > 3 {
			t.Errorf("%s: %d lines for %d failed handshakes, want 1 to 3", s, n, clients)
		}
	}
	if n := count("http", "closed a connection whose message arrived below the minimum rate"); n != 1 {
		t.Errorf("http source: %d lines for the trickled request, want 1", n)
	}
}
