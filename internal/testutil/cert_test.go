package testutil

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"
)

// A client that trusts the certificate's PEM completes a handshake with a
// server presenting it under each of its names, and not under another.
func TestSelfSigned(t *testing.T) {
	c := SelfSigned(t, "localhost", "127.0.0.1")
	certFile, keyFile := c.Files(t)
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CertPEM()) {
		t.Fatal("CertPEM is no certificate")
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"localhost", true}, {"127.0.0.1", true}, {"example.com", false}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			if a, err := ln.Accept(); err == nil {
				_ = tls.Server(a, &tls.Config{Certificates: []tls.Certificate{kp}}).Handshake()
				a.Close()
			}
		}()
		b, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b.SetDeadline(time.Now().Add(5 * time.Second))
		err = tls.Client(b, &tls.Config{RootCAs: pool, ServerName: tc.name}).Handshake()
		b.Close()
		ln.Close()
		if (err == nil) != tc.ok {
			t.Errorf("handshake as %s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
