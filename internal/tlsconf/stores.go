package tlsconf

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"
)

// Store formats, told apart by their first bytes as Java's keystore loader
// does (since Java 9 a store declared JKS that holds PKCS#12 loads, and
// the other way round), so the declared type only decides for a file
// that is neither.
const (
	kindJKS    = "jks"
	kindJCEKS  = "jceks"
	kindPKCS12 = "pkcs12"
	kindPEM    = "pem"
)

func storeKind(data []byte, declared string) string {
	switch {
	case bytes.HasPrefix(data, []byte{0xFE, 0xED, 0xFE, 0xED}):
		return kindJKS
	case bytes.HasPrefix(data, []byte{0xCE, 0xCE, 0xCE, 0xCE}):
		return kindJCEKS
	case bytes.Contains(data[:min(len(data), 4096)], []byte("-----BEGIN ")):
		return kindPEM
	case len(data) > 0 && data[0] == 0x30: // an ASN.1 SEQUENCE: PKCS#12's PFX
		return kindPKCS12
	}
	return strings.ToLower(declared)
}

func jceksHint(path string) string {
	return fmt.Sprintf("it is a JCEKS store, which sluice does not read; convert it with "+
		"keytool -importkeystore -srcstoretype JCEKS -srckeystore %s -destkeystore store.p12 -deststoretype PKCS12", path)
}

// errWrongPassword is what a store that fails its integrity check gives.
var errWrongPassword = errors.New("wrong password")

// keyEntry is one private key with its certificate chain, leaf first.
type keyEntry struct {
	alias string
	key   crypto.PrivateKey
	chain []*x509.Certificate
}

// loadCertificate reads the private key and certificate chain a server
// presents (or a client, for client authentication) from the store at
// path: JKS, PKCS#12 or PEM (the chain and key in one file). keyPass
// decrypts the key (Java keystores may protect it apart from the store;
// "" means storePass, as Java's KeyManagerFactory uses it); alias picks the
// key when the store holds several. The errors say what is wrong without
// the path, which the caller adds with the property that named it.
func loadCertificate(path, declared, storePass, keyPass, alias string, now time.Time) (tls.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return tls.Certificate{}, err
	}
	if keyPass == "" {
		keyPass = storePass
	}
	var entries []keyEntry
	switch storeKind(data, declared) {
	case kindJKS:
		entries, err = jksKeys(data, storePass, keyPass, alias)
	case kindJCEKS:
		return tls.Certificate{}, errors.New(jceksHint(path))
	case kindPKCS12:
		var e keyEntry
		var chain []*x509.Certificate
		var leaf *x509.Certificate
		e.key, leaf, chain, err = pkcs12.DecodeChain(data, storePass)
		if err != nil {
			return tls.Certificate{}, pkcs12Error(err)
		}
		e.chain = leafFirst(e.key, append([]*x509.Certificate{leaf}, chain...))
		entries = []keyEntry{e}
	case kindPEM:
		cert, err := tls.X509KeyPair(data, data)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("need the PEM certificate chain and private key in one file: %w", err)
		}
		e := keyEntry{key: cert.PrivateKey}
		for _, der := range cert.Certificate {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return tls.Certificate{}, err
			}
			e.chain = append(e.chain, c)
		}
		entries = []keyEntry{e}
	default:
		return tls.Certificate{}, errors.New("not a JKS, PKCS12 or PEM store")
	}
	if err != nil {
		return tls.Certificate{}, err
	}
	e := entries[0]
	if len(e.chain) == 0 {
		return tls.Certificate{}, fmt.Errorf("the private key %q has no certificate", e.alias)
	}
	leaf := e.chain[0]
	what := "the certificate"
	if e.alias != "" {
		what = fmt.Sprintf("the certificate of %q", e.alias)
	}
	if now.After(leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("%s (%s) expired on %s; renew it", what, leaf.Subject, leaf.NotAfter.UTC().Format(time.DateTime+" MST"))
	}
	if now.Before(leaf.NotBefore) {
		return tls.Certificate{}, fmt.Errorf("%s (%s) is not valid before %s", what, leaf.Subject, leaf.NotBefore.UTC().Format(time.DateTime+" MST"))
	}
	cert := tls.Certificate{PrivateKey: e.key, Leaf: leaf}
	for _, c := range e.chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return cert, nil
}

// leafFirst puts the certificate of key first: a PKCS#12 store that
// keytool made holds its trusted certificates as bags too, in no set
// order, and DecodeChain takes the first bag for the leaf.
func leafFirst(key crypto.PrivateKey, certs []*x509.Certificate) []*x509.Certificate {
	signer, ok := key.(crypto.Signer)
	if !ok {
		return certs
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return certs
	}
	for i, c := range certs {
		if pub.Equal(c.PublicKey) {
			out := append([]*x509.Certificate{c}, certs[:i]...)
			return append(out, certs[i+1:]...)
		}
	}
	return certs
}

func pkcs12Error(err error) error {
	if errors.Is(err, pkcs12.ErrIncorrectPassword) {
		return errWrongPassword
	}
	return fmt.Errorf("read PKCS#12: %w", err)
}

// loadJKS reads a JKS store. With an empty password Java loads a store
// without checking its integrity (its entries are still read), and so does
// this: keystore-go fills the store before it compares the digest.
func loadJKS(data []byte, password string) (keystore.KeyStore, error) {
	ks := keystore.New()
	err := ks.Load(bytes.NewReader(data), []byte(password))
	if err != nil && strings.Contains(err.Error(), "invalid digest") {
		if password == "" && len(ks.Aliases()) > 0 {
			return ks, nil
		}
		return ks, errWrongPassword
	}
	if err != nil {
		return ks, fmt.Errorf("read JKS: %w", err)
	}
	return ks, nil
}

// jksKeys returns the private key entry of a JKS store to use: the one
// named alias, or the only one.
func jksKeys(data []byte, storePass, keyPass, alias string) ([]keyEntry, error) {
	ks, err := loadJKS(data, storePass)
	if err != nil {
		return nil, err
	}
	var keys, certs []string
	for _, a := range ks.Aliases() {
		switch {
		case ks.IsPrivateKeyEntry(a):
			keys = append(keys, a)
		case ks.IsTrustedCertificateEntry(a):
			certs = append(certs, a)
		}
	}
	slices.Sort(keys)
	switch {
	case alias != "":
		if !slices.Contains(keys, strings.ToLower(alias)) {
			return nil, fmt.Errorf("it holds no private key named %q (its private keys: %s)", alias, listOrNone(keys))
		}
		alias = strings.ToLower(alias) // JKS aliases are case-insensitive
	case len(keys) == 0:
		return nil, fmt.Errorf("it holds no private key (only trusted certificates: %s); a keystore holds the key and certificate this side presents", listOrNone(certs))
	case len(keys) > 1:
		return nil, fmt.Errorf("it holds %d private keys (%s) and no alias says which to use; set the alias", len(keys), strings.Join(keys, ", "))
	default:
		alias = keys[0]
	}
	pk, err := ks.GetPrivateKeyEntry(alias, []byte(keyPass))
	if err != nil && strings.Contains(err.Error(), "invalid digest") {
		return nil, fmt.Errorf("the private key %q cannot be decrypted: %w for the key", alias, errWrongPassword)
	}
	if err != nil {
		return nil, fmt.Errorf("the private key %q: %w", alias, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(pk.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("the private key %q: %w", alias, err)
	}
	e := keyEntry{alias: alias, key: key}
	for i, c := range pk.CertificateChain {
		cert, err := x509.ParseCertificate(c.Content)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of %q: %w", i, alias, err)
		}
		e.chain = append(e.chain, cert)
	}
	return []keyEntry{e}, nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// loadTrustPool reads the certificates a store trusts: JKS (its trusted
// certificate entries and, as Java's trust manager does, the first
// certificate of each key entry), PKCS#12 or PEM.
func loadTrustPool(path, declared, password string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	switch storeKind(data, declared) {
	case kindJKS:
		ks, err := loadJKS(data, password)
		if err != nil {
			return nil, err
		}
		for _, a := range ks.Aliases() {
			var der []byte
			switch {
			case ks.IsTrustedCertificateEntry(a):
				e, err := ks.GetTrustedCertificateEntry(a)
				if err != nil {
					return nil, fmt.Errorf("entry %q: %w", a, err)
				}
				der = e.Certificate.Content
			case ks.IsPrivateKeyEntry(a):
				chain, err := ks.GetPrivateKeyEntryCertificateChain(a)
				if err != nil || len(chain) == 0 {
					continue
				}
				der = chain[0].Content
			default:
				continue
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("entry %q: %w", a, err)
			}
			pool.AddCert(c)
			n++
		}
	case kindJCEKS:
		return nil, errors.New(jceksHint(path))
	case kindPKCS12:
		certs, err := pkcs12.DecodeTrustStore(data, password)
		if err != nil {
			return nil, pkcs12Error(err)
		}
		for _, c := range certs {
			pool.AddCert(c)
			n++
		}
	case kindPEM:
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
				return nil, err
			}
			pool.AddCert(c)
			n++
		}
	default:
		return nil, errors.New("not a JKS, PKCS12 or PEM store")
	}
	if n == 0 {
		return nil, errors.New("it holds no certificate")
	}
	return pool, nil
}
