// Package tlsconf reads Flume's SSL properties (ssl, keystore*, truststore*,
// trust-all-certs, include-/exclude-protocols, include-/exclude-cipher-suites)
// into Go TLS configurations, with Go-native key material: PKCS#12 and PEM
// stores. Java's JKS stores are refused with the command that converts them.
//
// Reading the properties (in a constructor) only checks them; the files are
// read by Config, which components call in Start.
package tlsconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/sluicehq/sluice/internal/config"
)

var versions = map[string]uint16{
	"TLSv1":   tls.VersionTLS10,
	"TLSv1.1": tls.VersionTLS11,
	"TLSv1.2": tls.VersionTLS12,
	"TLSv1.3": tls.VersionTLS13,
}

// Settings are the SSL properties of one component.
type Settings struct {
	Enabled bool

	// Server side: the certificate and key.
	Keystore, KeystorePassword, KeystoreType string
	// Client side: whom to trust.
	TrustAll                                       bool
	Truststore, TruststorePassword, TruststoreType string
	// VerifyHostname checks that the server's certificate names the host
	// dialed (sluice's verify-hostname, default true). Flume checks only
	// the chain; false does the same, for certificates that do not name
	// the host a config dials (an IP address, an alias).
	VerifyHostname bool

	minVersion, maxVersion uint16
	ciphers                []uint16
}

const jksHint = "JKS stores are not supported (JKS is Flume's default type); convert it with " +
	"`keytool -importkeystore -srckeystore store.jks -destkeystore store.p12 -deststoretype PKCS12` " +
	"and set %s = PKCS12, or use a PEM file and %s = PEM"

// ServerKeys names the server properties whose spelling varies: Flume's
// HTTP source also reads enableSSL, keystorePassword and excludeProtocols.
type ServerKeys struct {
	SSL, KeystorePassword, ExcludeProtocols string
}

// FlumeServerKeys are the names every Flume server component reads.
var FlumeServerKeys = ServerKeys{SSL: "ssl", KeystorePassword: "keystore-password", ExcludeProtocols: "exclude-protocols"}

// ReadServer reads the SSL properties of a server (a source): ssl,
// keystore, keystore-password, keystore-type (PKCS12 or PEM; a PEM keystore
// holds the certificate chain and the private key), and the protocol and
// cipher suite lists.
func ReadServer(p *config.Props) Settings { return ReadServerKeys(p, FlumeServerKeys) }

// ReadServerKeys is ReadServer with the varying property names given.
func ReadServerKeys(p *config.Props, k ServerKeys) Settings {
	s := Settings{Enabled: p.Bool(k.SSL, false)}
	s.Keystore = p.String("keystore", "")
	s.KeystorePassword = p.String(k.KeystorePassword, "")
	s.KeystoreType = p.Enum("keystore-type", "jks", "JKS", "PKCS12", "PEM")
	s.readVersions(p, k.ExcludeProtocols)
	if !s.Enabled {
		return s
	}
	if strings.TrimSpace(s.Keystore) == "" {
		p.Errorf("keystore", "ssl is true but no keystore is set; set keystore to a PKCS#12 file (keystore-type = PKCS12) or a PEM file with the certificate chain and private key (keystore-type = PEM)")
	}
	if s.KeystoreType == "jks" {
		p.Errorf("keystore-type", jksHint, "keystore-type", "keystore-type")
	}
	return s
}

// ReadClient reads the SSL properties of a client (a sink): ssl,
// trust-all-certs, truststore, truststore-password, truststore-type (PKCS12
// or PEM; without a truststore the system roots are trusted), sluice's
// verify-hostname (true), and the protocol and cipher suite lists.
func ReadClient(p *config.Props) Settings {
	s := Settings{Enabled: p.Bool("ssl", false)}
	s.TrustAll = p.Bool("trust-all-certs", false)
	s.VerifyHostname = p.Bool("verify-hostname", true)
	s.Truststore = p.String("truststore", "")
	s.TruststorePassword = p.String("truststore-password", "")
	s.TruststoreType = p.Enum("truststore-type", "jks", "JKS", "PKCS12", "PEM")
	s.readVersions(p, "exclude-protocols")
	if s.Enabled && s.Truststore != "" && s.TruststoreType == "jks" {
		p.Errorf("truststore-type", jksHint, "truststore-type", "truststore-type")
	}
	return s
}

func (s *Settings) readVersions(p *config.Props, excludeKey string) {
	include := p.Fields("include-protocols")
	exclude := p.Fields(excludeKey)
	if !p.Has(excludeKey) {
		exclude = []string{"SSLv3"}
	}
	allowed := []string{"TLSv1.2", "TLSv1.3"}
	if len(include) > 0 {
		allowed = nil
		for _, v := range include {
			if _, ok := versions[v]; !ok {
				p.Errorf("include-protocols", "protocol %q is not supported; use TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3", v)
				continue
			}
			allowed = append(allowed, v)
		}
	}
	for _, v := range exclude {
		if _, ok := versions[v]; !ok && v != "SSLv3" && v != "SSLv2Hello" {
			p.Errorf(excludeKey, "protocol %q is not known; use names such as TLSv1.1", v)
		}
		allowed = slices.DeleteFunc(allowed, func(a string) bool { return a == v })
	}
	for _, v := range allowed {
		n := versions[v]
		if s.minVersion == 0 || n < s.minVersion {
			s.minVersion = n
		}
		s.maxVersion = max(s.maxVersion, n)
	}
	if len(allowed) == 0 {
		p.Errorf("include-protocols", "the protocol settings leave no TLS version enabled")
	} else if len(allowed) != int(s.maxVersion-s.minVersion)+1 {
		// Go takes a version range: a gap would quietly enable what was excluded.
		p.Errorf(excludeKey, "the enabled TLS versions %s must form a contiguous range", strings.Join(allowed, ", "))
	}

	inc, exc := p.Fields("include-cipher-suites"), p.Fields("exclude-cipher-suites")
	if len(inc) == 0 && len(exc) == 0 {
		return
	}
	byName := map[string]uint16{}
	for _, cs := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		byName[cs.Name] = cs.ID
	}
	if len(inc) == 0 {
		for _, cs := range tls.CipherSuites() {
			inc = append(inc, cs.Name)
		}
	}
	for _, n := range exc {
		if _, ok := byName[n]; !ok {
			p.Errorf("exclude-cipher-suites", "cipher suite %q is not known to sluice", n)
		}
	}
	for _, n := range inc {
		id, ok := byName[n]
		if !ok {
			p.Errorf("include-cipher-suites", "cipher suite %q is not supported; use IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", n)
			continue
		}
		if !slices.Contains(exc, n) {
			s.ciphers = append(s.ciphers, id)
		}
	}
	if len(s.ciphers) == 0 {
		p.Errorf("include-cipher-suites", "the cipher suite settings leave no cipher suite enabled")
	}
}

// ServerConfig loads the keystore and returns the server's TLS
// configuration, or nil when ssl is off.
func (s Settings) ServerConfig() (*tls.Config, error) {
	if !s.Enabled {
		return nil, nil
	}
	cert, err := loadKeystore(s.Keystore, s.KeystoreType, s.KeystorePassword)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   s.minVersion,
		MaxVersion:   s.maxVersion,
		CipherSuites: s.ciphers,
	}, nil
}

// ClientConfig loads the truststore and returns the TLS configuration for
// connecting to serverName, or nil when ssl is off.
func (s Settings) ClientConfig(serverName string) (*tls.Config, error) {
	if !s.Enabled {
		return nil, nil
	}
	c := &tls.Config{
		ServerName:         serverName,
		MinVersion:         s.minVersion,
		MaxVersion:         s.maxVersion,
		CipherSuites:       s.ciphers,
		InsecureSkipVerify: s.TrustAll, //nolint:gosec // Flume's trust-all-certs, off by default
	}
	if s.Truststore != "" && !s.TrustAll {
		pool, err := loadTruststore(s.Truststore, s.TruststoreType, s.TruststorePassword)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if !s.TrustAll && !s.VerifyHostname {
		// Verify the chain as Go would, minus the name.
		roots := c.RootCAs
		c.InsecureSkipVerify = true //nolint:gosec // the chain is verified below
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return c, nil
}

func isJKS(data []byte) bool { return bytes.HasPrefix(data, []byte{0xFE, 0xED, 0xFE, 0xED}) }

func loadKeystore(path, typ, password string) (tls.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read keystore: %w", err)
	}
	if isJKS(data) {
		return tls.Certificate{}, fmt.Errorf("keystore %s is a JKS keystore; convert it with keytool -importkeystore -srckeystore %s -destkeystore ks.p12 -deststoretype PKCS12", path, path)
	}
	switch typ {
	case "pem":
		cert, err := tls.X509KeyPair(data, data)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("keystore %s: need the PEM certificate chain and private key in one file: %w", path, err)
		}
		return cert, nil
	case "pkcs12":
		key, leaf, chain, err := pkcs12.DecodeChain(data, password)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("keystore %s: read PKCS#12: %w", path, err)
		}
		cert := tls.Certificate{PrivateKey: key, Leaf: leaf, Certificate: [][]byte{leaf.Raw}}
		for _, c := range chain {
			cert.Certificate = append(cert.Certificate, c.Raw)
		}
		return cert, nil
	}
	return tls.Certificate{}, errors.New("keystore type " + typ + " is not supported")
}

func loadTruststore(path, typ, password string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read truststore: %w", err)
	}
	if isJKS(data) {
		return nil, fmt.Errorf("truststore %s is a JKS keystore; convert it with keytool -importkeystore -srckeystore %s -destkeystore ts.p12 -deststoretype PKCS12", path, path)
	}
	pool := x509.NewCertPool()
	switch typ {
	case "pem":
		n := 0
		for rest := data; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if b.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("truststore %s: %w", path, err)
			}
			pool.AddCert(c)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("truststore %s holds no PEM certificate", path)
		}
	case "pkcs12":
		certs, err := pkcs12.DecodeTrustStore(data, password)
		if err != nil {
			return nil, fmt.Errorf("truststore %s: read PKCS#12: %w", path, err)
		}
		for _, c := range certs {
			pool.AddCert(c)
		}
	default:
		return nil, errors.New("truststore type " + typ + " is not supported")
	}
	return pool, nil
}

// Dial connects to addr over TCP, through TLS when cfg is not nil (the
// handshake is part of the dial, bounded by ctx). Go's TCP connections
// have Nagle's algorithm off, as RPC clients want.
func Dial(ctx context.Context, addr string, cfg *tls.Config) (net.Conn, error) {
	if cfg != nil {
		d := tls.Dialer{Config: cfg}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}
