package monitoring

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestTopAndTapOverTLSWithPassword: an agent serving its monitoring
// address over TLS with basic authentication answers `sluice top` and
// `sluice tap` given the CA and the password, and refuses them without.
func TestTopAndTapOverTLSWithPassword(t *testing.T) {
	bin := testutil.AgentBinary(t)
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	a := startAgentWith(t, "testdata/status.properties", func(a *runningAgent) bool {
		req, _ := http.NewRequest("GET", "https://"+a.HTTP+"/healthz", nil)
		req.SetBasicAuth("ops", "s3cret")
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "--allow-tap", "--http-tls-cert", cert, "--http-tls-key", key, "--http-user", "ops", "--http-password-file", pw)

	url := "https://" + a.HTTP
	out, err := exec.Command(bin, "top", "--once", "--http", url, "--http-ca", cert, "--http-user", "ops", "--http-password-file", pw).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "agent a1: running, healthy") || !strings.Contains(string(out), "audit-null") {
		t.Fatalf("top over TLS with the password: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "tap", "web", "--http", url, "--http-ca", cert, "--http-user", "ops", "--limit", "1", "--format", "json")
	cmd.Env = append(os.Environ(), "SLUICE_HTTP_PASSWORD=s3cret")
	tapOut := make(chan []byte, 1)
	go func() { b, _ := cmd.CombinedOutput(); tapOut <- b }()
	c, err := net.Dial("tcp", a.Netcat)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The tap connects when it connects (a loaded machine, a TLS
	// handshake): send until it has printed one event.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case b := <-tapOut:
			if !strings.Contains(string(b), `"body":"secret event"`) {
				t.Fatalf("tap over TLS with the password printed %s", b)
			}
			done = true
		case <-tick.C:
			if _, err := c.Write([]byte("secret event\n")); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatal("tap over TLS printed nothing in 20 s")
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"top", "--once", "--http", url, "--http-ca", cert}, "requires authentication"},
		{[]string{"top", "--once", "--http", url, "--http-ca", cert, "--http-user", "ops"}, "needs a password"},
		{[]string{"top", "--once", "--http", url, "--http-user", "ops", "--http-password-file", pw}, "certificate"},
		{[]string{"top", "--once", "--http", a.HTTP, "--http-user", "ops", "--http-password-file", pw}, "400"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), "SLUICE_HTTP_PASSWORD=")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v %s; want a failure saying %q", tc.args, err, out, tc.want)
		}
	}
}
