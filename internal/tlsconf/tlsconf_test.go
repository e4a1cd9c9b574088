package tlsconf

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPKCS12KeystoreAndPEMTruststore: a server with a PKCS#12 keystore and
// a client trusting a PEM truststore complete a TLS handshake.
func TestPKCS12KeystoreAndPEMTruststore(t *testing.T) {
	dir := t.TempDir()
	c := testutil.SelfSigned(t, "localhost")
	cert, key := c.X509, c.Key
	p12, err := pkcs12.Modern.Encode(key, cert, nil, "secret")
	if err != nil {
		t.Fatal(err)
	}
	ks := write(t, dir, "ks.p12", p12)
	ts := write(t, dir, "ts.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))

	sp := config.FromMap("s.", map[string]string{"ssl": "true", "keystore": ks, "keystore-password": "secret", "keystore-type": "PKCS12"})
	cp := config.FromMap("c.", map[string]string{"ssl": "true", "truststore": ts, "truststore-type": "PEM"})
	srv, cli := ReadServer(sp), ReadClient(cp)
	if err := sp.Err(); err != nil {
		t.Fatal(err)
	}
	if err := cp.Err(); err != nil {
		t.Fatal(err)
	}
	scfg, err := srv.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := cli.ClientConfig("localhost")
	if err != nil {
		t.Fatal(err)
	}
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() { errc <- tls.Server(a, scfg).Handshake() }()
	if err := tls.Client(b, ccfg).Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
}

// TestVerifyHostname: by default the server's certificate must name the
// host dialed; verify-hostname = false checks only the chain (as Flume
// does), and still refuses a certificate the truststore does not vouch for.
func TestVerifyHostname(t *testing.T) {
	dir := t.TempDir()
	c := testutil.SelfSigned(t, "localhost")
	cert, key := c.X509, c.Key
	other := testutil.SelfSigned(t, "localhost").X509
	ks := write(t, dir, "ks.pem", append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), pemKey(t, key)...))
	trusted := write(t, dir, "ts.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	untrusted := write(t, dir, "other.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Raw}))
	sp := config.FromMap("s.", map[string]string{"ssl": "true", "keystore": ks, "keystore-type": "PEM"})
	scfg, err := ReadServer(sp).ServerConfig()
	if err != nil || sp.Err() != nil {
		t.Fatal(err, sp.Err())
	}
	tests := []struct {
		name, host, truststore, verify string
		ok                             bool
	}{
		{"name matches", "localhost", trusted, "", true},
		{"name differs", "127.0.0.1", trusted, "", false},
		{"name differs, verify-hostname false", "127.0.0.1", trusted, "false", true},
		{"untrusted, verify-hostname false", "localhost", untrusted, "false", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]string{"ssl": "true", "truststore": tt.truststore, "truststore-type": "PEM"}
			if tt.verify != "" {
				m["verify-hostname"] = tt.verify
			}
			cp := config.FromMap("c.", m)
			ccfg, err := ReadClient(cp).ClientConfig(tt.host)
			if err != nil || cp.Err() != nil {
				t.Fatal(err, cp.Err())
			}
			a, b := tcpPair(t)
			defer a.Close()
			defer b.Close()
			go func() { _ = tls.Server(a, scfg).Handshake(); a.Close() }()
			err = tls.Client(b, ccfg).Handshake()
			if (err == nil) != tt.ok {
				t.Fatalf("handshake: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func pemKey(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestProtocols(t *testing.T) {
	p := config.FromMap("s.", map[string]string{"include-protocols": "TLSv1.3"})
	s := ReadServer(p)
	if p.Err() != nil || s.minVersion != tls.VersionTLS13 || s.maxVersion != tls.VersionTLS13 {
		t.Fatalf("TLSv1.3 only: %v %x %x", p.Err(), s.minVersion, s.maxVersion)
	}
	p = config.FromMap("s.", map[string]string{"include-protocols": "SSLv3"})
	ReadServer(p)
	if p.Err() == nil {
		t.Fatal("SSLv3 accepted")
	}
}

// Settings Go cannot express, or names it does not know, are problems, and
// Flume's HTTP source spellings are read where the caller names them.
func TestServerSettingProblems(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{"include-protocols": "TLSv1.1 TLSv1.2 TLSv1.3", "exclude-protocols": "TLSv1.2"}, "contiguous range"},
		{map[string]string{"exclude-cipher-suites": "TLS_NO_SUCH_SUITE"}, "not known to sluice"},
	} {
		p := config.FromMap("s.", tc.props)
		ReadServer(p)
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.props, err, tc.want)
		}
	}
	p := config.FromMap("s.", map[string]string{"enableSSL": "true", "keystorePassword": "pw", "excludeProtocols": "TLSv1.3", "keystore": "k.p12", "keystore-type": "PKCS12"})
	s := ReadServerKeys(p, ServerKeys{SSL: "enableSSL", KeystorePassword: "keystorePassword", ExcludeProtocols: "excludeProtocols"})
	if p.Err() != nil || !s.Enabled || s.KeystorePassword != "pw" || s.maxVersion != tls.VersionTLS12 {
		t.Fatalf("older spellings: %v %+v", p.Err(), s)
	}
}

// TestDial: without a TLS config Dial gives a plain TCP connection; with
// one, a TLS connection whose handshake is done, and a server that does
// not speak TLS fails the dial once ctx ends.
func TestDial(t *testing.T) {
	crt := testutil.SelfSigned(t, "localhost")
	cert, key := crt.X509, crt.Key
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	scfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}}
	serve := func(wrap bool) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if wrap {
					c = tls.Server(c, scfg)
				}
				go func() { defer c.Close(); io.Copy(c, c) }()
			}
		}()
		return ln.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	c, err := Dial(ctx, serve(false), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("plain dial gave %T", c)
	}
	c.Close()

	ccfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	c, err = Dial(ctx, serve(true), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	tc, ok := c.(*tls.Conn)
	if !ok || !tc.ConnectionState().HandshakeComplete {
		t.Fatalf("TLS dial gave %T, handshake complete %v", c, ok && tc.ConnectionState().HandshakeComplete)
	}
	c.Close()

	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if c, err := Dial(short, serve(false), ccfg); err == nil {
		c.Close()
		t.Fatal("a TLS dial to a server that does not speak TLS succeeded")
	}
}

// tcpPair is a connected pair of loopback TCP connections, closed at the
// end of the test. Unlike net.Pipe's they buffer, so a handshake that fails
// on one side while the other is still writing its flight does not hang.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if a, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
