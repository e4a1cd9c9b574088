// Package tlsconf reads Flume's SSL properties (ssl, keystore*, truststore*,
// trust-all-certs, include-/exclude-protocols, include-/exclude-cipher-suites)
// into Go TLS configurations. Stores are read as Flume users have them:
// Java keystores (JKS, Flume's default keystore-type), PKCS#12 and PEM,
// told apart by their content as Java does; JCEKS is refused with the
// command that converts it. Sources may also require client certificates
// (truststore and client-auth, sluice's addition: Flume's sources have no
// client authentication).
//
// Reading the properties (in a constructor) only checks them; the files are
// read by ServerConfig and ClientConfig, which components call in Start.
package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

var versions = map[string]uint16{
	"TLSv1":   tls.VersionTLS10,
	"TLSv1.1": tls.VersionTLS11,
	"TLSv1.2": tls.VersionTLS12,
	"TLSv1.3": tls.VersionTLS13,
}

// ClientAuth is whether a server asks its clients for a certificate.
type ClientAuth string

const (
	ClientAuthNone      ClientAuth = "none"      // no client certificate asked for
	ClientAuthRequested ClientAuth = "requested" // verified if the client sends one
	ClientAuthRequired  ClientAuth = "required"  // a client without a trusted certificate is refused
)

// Settings are the SSL properties of one component.
type Settings struct {
	Enabled bool

	// The certificate and key this side presents: a server's, or a
	// client's for client authentication.
	Keystore, KeystorePassword, KeystoreType string
	// KeyPassword decrypts the private key when the keystore protects it
	// with its own password (Kafka's ssl.key.password); "" means
	// KeystorePassword, as Java's key manager uses it.
	KeyPassword string
	// KeyAlias names the private key entry to use when the keystore holds
	// several (sluice's keystore-alias).
	KeyAlias string
	// Client side: whom to trust. Server side with ClientAuth: which
	// certificate authorities sign the clients' certificates.
	TrustAll                                       bool
	Truststore, TruststorePassword, TruststoreType string
	// VerifyHostname checks that the server's certificate names the host
	// dialed (sluice's verify-hostname, default true). Flume checks only
	// the chain; false does the same, for certificates that do not name
	// the host a config dials (an IP address, an alias).
	VerifyHostname bool
	// ClientAuth (servers) asks clients for a certificate signed by an
	// authority of the truststore; "" is none.
	ClientAuth ClientAuth
	// Names are the properties the stores come from, for errors.
	Names Names

	minVersion, maxVersion uint16
	ciphers                []uint16
}

// Names are the full property names behind a Settings' stores, so an
// error reading a store names the setting to fix.
type Names struct {
	Keystore, KeystorePassword, KeyPassword, KeyAlias string
	Truststore, TruststorePassword                    string
}

func (n Names) or(def Names) Names {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return Names{
		Keystore: pick(n.Keystore, def.Keystore), KeystorePassword: pick(n.KeystorePassword, def.KeystorePassword),
		KeyPassword: pick(n.KeyPassword, def.KeyPassword), KeyAlias: pick(n.KeyAlias, def.KeyAlias),
		Truststore: pick(n.Truststore, def.Truststore), TruststorePassword: pick(n.TruststorePassword, def.TruststorePassword),
	}
}

var plainNames = Names{Keystore: "keystore", KeystorePassword: "keystore-password", KeyAlias: "keystore-alias",
	Truststore: "truststore", TruststorePassword: "truststore-password"}

const jceksWhy = "JCEKS stores are not read by sluice; convert it with " +
	"`keytool -importkeystore -srcstoretype JCEKS -srckeystore store.jceks -destkeystore store.p12 -deststoretype PKCS12` " +
	"and set %s = PKCS12"

// ServerKeys names the server properties whose spelling varies: Flume's
// HTTP source also reads enableSSL, keystorePassword and excludeProtocols.
type ServerKeys struct {
	SSL, KeystorePassword, ExcludeProtocols string
}

// FlumeServerKeys are the names every Flume server component reads.
var FlumeServerKeys = ServerKeys{SSL: "ssl", KeystorePassword: "keystore-password", ExcludeProtocols: "exclude-protocols"}

// ReadServer reads the SSL properties of a server (a source): ssl,
// keystore, keystore-password, keystore-type (JKS, PKCS12 or PEM; a PEM
// keystore holds the certificate chain and the private key), sluice's
// keystore-alias, the protocol and cipher suite lists, and sluice's client
// authentication: truststore, truststore-password, truststore-type and
// client-auth (none, requested or required; required when a truststore is
// set).
func ReadServer(p *config.Props) Settings { return ReadServerKeys(p, FlumeServerKeys) }

// ReadServerKeys is ReadServer with the varying property names given.
func ReadServerKeys(p *config.Props, k ServerKeys) Settings {
	s := Settings{Enabled: p.Bool(k.SSL, false)}
	s.Keystore = p.String("keystore", "")
	s.KeystorePassword = p.String(k.KeystorePassword, "")
	s.KeystoreType = p.Enum("keystore-type", "jks", "JKS", "PKCS12", "PEM", "JCEKS")
	s.KeyAlias = p.String("keystore-alias", "")
	s.Truststore = p.String("truststore", "")
	s.TruststorePassword = p.String("truststore-password", "")
	s.TruststoreType = p.Enum("truststore-type", "jks", "JKS", "PKCS12", "PEM", "JCEKS")
	def := ClientAuthNone
	if strings.TrimSpace(s.Truststore) != "" {
		def = ClientAuthRequired
	}
	s.ClientAuth = ClientAuth(p.Enum("client-auth", string(def), "none", "requested", "required"))
	s.Names = Names{Keystore: p.Full("keystore"), KeystorePassword: p.Full(k.KeystorePassword), KeyAlias: p.Full("keystore-alias"),
		Truststore: p.Full("truststore"), TruststorePassword: p.Full("truststore-password")}
	s.readVersions(p, k.ExcludeProtocols)
	if !s.Enabled {
		return s
	}
	if strings.TrimSpace(s.Keystore) == "" {
		p.Errorf("keystore", "%s is true but no keystore is set; set keystore to a Java keystore (JKS or PKCS12) or a PEM file with the certificate chain and private key (keystore-type = PEM)", k.SSL)
	}
	if s.KeystoreType == "jceks" {
		p.Errorf("keystore-type", jceksWhy, "keystore-type")
	}
	if s.TruststoreType == "jceks" {
		p.Errorf("truststore-type", jceksWhy, "truststore-type")
	}
	if s.ClientAuth != ClientAuthNone && strings.TrimSpace(s.Truststore) == "" {
		p.Errorf("client-auth", "client-auth = %s needs the certificate authorities that sign the clients' certificates; set truststore (JKS, PKCS12 or PEM)", s.ClientAuth)
	}
	return s
}

// ReadClient reads the SSL properties of a client (a sink): ssl,
// trust-all-certs, truststore, truststore-password, truststore-type (JKS,
// PKCS12 or PEM; without a truststore the system roots are trusted),
// sluice's verify-hostname (true), the protocol and cipher suite lists,
// and sluice's client certificate for a server that requires one:
// keystore, keystore-password, keystore-type, keystore-alias.
func ReadClient(p *config.Props) Settings {
	s := Settings{Enabled: p.Bool("ssl", false)}
	s.TrustAll = p.Bool("trust-all-certs", false)
	s.VerifyHostname = p.Bool("verify-hostname", true)
	s.Truststore = p.String("truststore", "")
	s.TruststorePassword = p.String("truststore-password", "")
	s.TruststoreType = p.Enum("truststore-type", "jks", "JKS", "PKCS12", "PEM", "JCEKS")
	s.Keystore = p.String("keystore", "")
	s.KeystorePassword = p.String("keystore-password", "")
	s.KeystoreType = p.Enum("keystore-type", "jks", "JKS", "PKCS12", "PEM", "JCEKS")
	s.KeyAlias = p.String("keystore-alias", "")
	s.Names = Names{Truststore: p.Full("truststore"), TruststorePassword: p.Full("truststore-password"),
		Keystore: p.Full("keystore"), KeystorePassword: p.Full("keystore-password"), KeyAlias: p.Full("keystore-alias")}
	s.readVersions(p, "exclude-protocols")
	if s.Keystore != "" && s.KeystoreType == "jceks" {
		p.Errorf("keystore-type", jceksWhy, "keystore-type")
	}
	if s.Truststore != "" && s.TruststoreType == "jceks" {
		p.Errorf("truststore-type", jceksWhy, "truststore-type")
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

// ServerConfig loads the keystore (and, with client authentication, the
// truststore) and returns the server's TLS configuration, or nil when ssl
// is off.
func (s Settings) ServerConfig() (*tls.Config, error) {
	if !s.Enabled {
		return nil, nil
	}
	cert, err := s.Certificate()
	if err != nil {
		return nil, err
	}
	c := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   s.minVersion,
		MaxVersion:   s.maxVersion,
		CipherSuites: s.ciphers,
	}
	switch s.ClientAuth {
	case ClientAuthRequired, ClientAuthRequested:
		pool, err := s.trustPool()
		if err != nil {
			return nil, err
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
		if s.ClientAuth == ClientAuthRequested {
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return c, nil
}

// Certificate loads the key and certificate chain of the keystore: a
// server's, or a client's for client authentication. A wrong password, a
// store with several keys and no alias, an expired certificate: each is
// one error naming the property and the file.
func (s Settings) Certificate() (tls.Certificate, error) {
	n := s.Names.or(plainNames)
	cert, err := loadCertificate(s.Keystore, s.KeystoreType, s.KeystorePassword, s.KeyPassword, s.KeyAlias, time.Now())
	if err != nil {
		hint := ""
		switch {
		case errors.Is(err, errWrongPassword) && strings.Contains(err.Error(), "for the key") && n.KeyPassword != "":
			hint = "; set " + n.KeyPassword + " to the key's password"
		case errors.Is(err, errWrongPassword):
			hint = "; check " + n.KeystorePassword
		case strings.Contains(err.Error(), "set the alias"), strings.Contains(err.Error(), "no private key named"):
			hint = " (" + n.KeyAlias + ")"
		}
		return tls.Certificate{}, fmt.Errorf("%s %s: %w%s", n.Keystore, s.Keystore, err, hint)
	}
	return cert, nil
}

func (s Settings) trustPool() (*x509.CertPool, error) {
	n := s.Names.or(plainNames)
	pool, err := loadTrustPool(s.Truststore, s.TruststoreType, s.TruststorePassword)
	if err != nil {
		hint := ""
		if errors.Is(err, errWrongPassword) {
			hint = "; check " + n.TruststorePassword
		}
		return nil, fmt.Errorf("%s %s: %w%s", n.Truststore, s.Truststore, err, hint)
	}
	return pool, nil
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
		pool, err := s.trustPool()
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if s.Keystore != "" {
		cert, err := s.Certificate()
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
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
