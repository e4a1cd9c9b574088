package testutil

import (
	"path/filepath"
	"runtime"
	"testing"
)

// The Java keystores of internal/tlsconf/testdata/keystores, made with
// keytool by its make.sh as Kafka's security documentation (which Flume's
// User Guide points to) tells users to make them: a CA (ca-cert, PEM),
// JKS truststores that trust it, a server keystore whose key (alias
// localhost, for localhost and 127.0.0.1) the CA signed, a client keystore
// whose key (alias client) has its own password, the server's key as
// PKCS#12 and JCEKS, and stores that must be refused.
const (
	KeystoreServerPass = "serverpass"    // server.keystore.jks/.p12/.jceks, two-keys.jks, expired.keystore.jks
	KeystoreClientPass = "clientpass"    // client.keystore.jks (store), agent.keystore.jks, stranger.keystore.jks
	KeystoreClientKey  = "clientkeypass" // the private key in client.keystore.jks
	KeystoreTrustPass  = "trustpass"     // client.truststore.jks, server.truststore.jks/.p12
)

// Keystore returns the absolute path of the keystore fixture name.
func Keystore(t testing.TB, name string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the keystore fixtures")
	}
	return filepath.Join(filepath.Dir(file), "..", "tlsconf", "testdata", "keystores", name)
}
