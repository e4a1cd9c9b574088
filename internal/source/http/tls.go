package httpsource

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/sluicehq/sluice/internal/config"
)

// tlsSettings are Flume's SSL properties of the HTTP source.
type tlsSettings struct {
	enabled                bool
	keystore               string
	password               string
	storeType              string // "pkcs12" or "pem"
	includeProtocols       []string
	excludeProtocols       []string
	includeCiphers         []string
	excludeCiphers         []string
	minVersion, maxVersion uint16
	ciphers                []uint16
}

var tlsVersions = map[string]uint16{
	"TLSv1":   tls.VersionTLS10,
	"TLSv1.1": tls.VersionTLS11,
	"TLSv1.2": tls.VersionTLS12,
	"TLSv1.3": tls.VersionTLS13,
}

// readTLS reads the SSL properties (with Flume's deprecated spellings
// enableSSL, keystorePassword and excludeProtocols) and checks them.
func readTLS(p *config.Props) tlsSettings {
	var t tlsSettings
	pick := func(key, old string) string {
		if p.Has(key) || !p.Has(old) {
			return key
		}
		return old
	}
	t.enabled = p.Bool(pick("ssl", "enableSSL"), false)
	t.keystore = p.String("keystore", "")
	t.password = p.String(pick("keystore-password", "keystorePassword"), "")
	t.storeType = p.Enum("keystore-type", "jks", "JKS", "PKCS12", "PEM")
	t.includeProtocols = p.Fields("include-protocols")
	excludeKey := pick("exclude-protocols", "excludeProtocols")
	t.excludeProtocols = p.Fields(excludeKey)
	if !p.Has(excludeKey) {
		t.excludeProtocols = []string{"SSLv3"}
	}
	t.includeCiphers = p.Fields("include-cipher-suites")
	t.excludeCiphers = p.Fields("exclude-cipher-suites")
	if !t.enabled {
		return t
	}
	if strings.TrimSpace(t.keystore) == "" {
		p.Errorf("keystore", "ssl is true but no keystore is set; set keystore to a PKCS#12 file (keystore-type = PKCS12) or a PEM file holding the certificate chain and private key (keystore-type = PEM)")
	}
	if t.storeType == "jks" {
		p.Errorf("keystore-type", "JKS keystores are not supported (JKS is the default in Flume); convert the keystore with "+
			"`keytool -importkeystore -srckeystore ks.jks -destkeystore ks.p12 -deststoretype PKCS12` and set keystore-type = PKCS12, or use keystore-type = PEM")
	}

	// Protocols: sluice speaks TLS 1.2 and 1.3 (and 1.0/1.1 on request), so
	// the lists become a version range.
	allowed := []string{"TLSv1.2", "TLSv1.3"}
	if len(t.includeProtocols) > 0 {
		allowed = nil
		for _, v := range t.includeProtocols {
			if _, ok := tlsVersions[v]; !ok {
				p.Errorf("include-protocols", "protocol %q is not supported; use TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3", v)
				continue
			}
			allowed = append(allowed, v)
		}
	}
	for _, v := range t.excludeProtocols {
		if _, ok := tlsVersions[v]; !ok && v != "SSLv3" && v != "SSLv2Hello" {
			p.Errorf(excludeKey, "protocol %q is not known; use names such as TLSv1.1", v)
		}
		allowed = slices.DeleteFunc(allowed, func(a string) bool { return a == v })
	}
	for _, v := range allowed {
		n := tlsVersions[v]
		if t.minVersion == 0 || n < t.minVersion {
			t.minVersion = n
		}
		t.maxVersion = max(t.maxVersion, n)
	}
	if len(allowed) == 0 {
		p.Errorf("include-protocols", "the protocol settings leave no TLS version enabled")
	} else if len(allowed) != int(t.maxVersion-t.minVersion)+1 {
		p.Errorf(excludeKey, "the enabled TLS versions %s must form a contiguous range", strings.Join(allowed, ", "))
	}

	// Cipher suites (TLS 1.2 and below; TLS 1.3 suites are fixed in Go).
	byName := map[string]uint16{}
	for _, cs := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		byName[cs.Name] = cs.ID
	}
	if len(t.includeCiphers) > 0 || len(t.excludeCiphers) > 0 {
		names := t.includeCiphers
		if len(names) == 0 {
			for _, cs := range tls.CipherSuites() {
				names = append(names, cs.Name)
			}
		}
		for _, n := range t.excludeCiphers {
			if _, ok := byName[n]; !ok {
				p.Errorf("exclude-cipher-suites", "cipher suite %q is not known to sluice", n)
			}
		}
		for _, n := range names {
			id, ok := byName[n]
			if !ok {
				p.Errorf("include-cipher-suites", "cipher suite %q is not supported; use IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", n)
				continue
			}
			if !slices.Contains(t.excludeCiphers, n) {
				t.ciphers = append(t.ciphers, id)
			}
		}
		if len(t.ciphers) == 0 {
			p.Errorf("include-cipher-suites", "the cipher suite settings leave no cipher suite enabled")
		}
	}
	return t
}

// config loads the key material and returns the server's TLS configuration.
func (t tlsSettings) config() (*tls.Config, error) {
	cert, err := loadKeystore(t.keystore, t.storeType, t.password)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   t.minVersion,
		MaxVersion:   t.maxVersion,
		CipherSuites: t.ciphers,
	}, nil
}

func loadKeystore(path, typ, password string) (tls.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read keystore: %w", err)
	}
	switch typ {
	case "pem":
		cert, err := tls.X509KeyPair(data, data)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("keystore %s: need a PEM certificate chain and private key in one file: %w", path, err)
		}
		return cert, nil
	case "pkcs12":
		if bytes.HasPrefix(data, []byte{0xFE, 0xED, 0xFE, 0xED}) {
			return tls.Certificate{}, fmt.Errorf("keystore %s is a JKS keystore, not PKCS#12; convert it with keytool -importkeystore -deststoretype PKCS12", path)
		}
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
	return tls.Certificate{}, errors.New("keystore-type " + typ + " is not supported")
}
