package testutil

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Cert is a self-signed certificate for tests, which is also its own CA,
// and its key.
type Cert struct {
	X509 *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// SelfSigned returns a new P-256 certificate for a server named hosts (DNS
// names, or IP addresses written as such; the first is also the common
// name), valid from an hour ago for a day.
func SelfSigned(t testing.TB, hosts ...string) Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if len(hosts) > 0 {
		tmpl.Subject = pkix.Name{CommonName: hosts[0]}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{X509: cert, Key: key}
}

// CertPEM is the certificate, PEM-encoded.
func (c Cert) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.X509.Raw})
}

// KeyPEM is the key, PEM-encoded as "EC PRIVATE KEY" (SEC 1).
func (c Cert) KeyPEM() []byte {
	der, err := x509.MarshalECPrivateKey(c.Key)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// TLS is the certificate and key as a server presents them.
func (c Cert) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.X509.Raw}, PrivateKey: c.Key, Leaf: c.X509}
}

// Files writes the certificate and the key as PEM files in a directory of
// the test's and returns their paths.
func (c Cert) Files(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, c.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, c.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
