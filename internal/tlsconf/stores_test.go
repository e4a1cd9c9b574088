package tlsconf

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// handshake runs a TLS handshake between scfg and ccfg over loopback TCP
// and returns the server's and the client's errors. The client also reads,
// since under TLS 1.3 it learns of a refused certificate only then.
func handshake(t *testing.T, scfg, ccfg *tls.Config) (srvErr, cliErr error) {
	t.Helper()
	a, b := tcpPair(t)
	errc := make(chan error, 1)
	go func() {
		sc := tls.Server(a, scfg)
		err := sc.Handshake()
		if err == nil {
			_, err = sc.Write([]byte("x"))
		}
		errc <- err
		a.Close()
	}()
	cc := tls.Client(b, ccfg)
	cliErr = cc.Handshake()
	if cliErr == nil {
		_, cliErr = cc.Read(make([]byte, 1))
	}
	return <-errc, cliErr
}

func serverSettings(t *testing.T, props map[string]string) Settings {
	t.Helper()
	p := config.FromMap("a1.sources.r1.", props)
	s := ReadServer(p)
	if err := p.Err(); err != nil {
		t.Fatalf("config problems: %v", err)
	}
	return s
}

func clientConfig(t *testing.T, props map[string]string, host string) *tls.Config {
	t.Helper()
	p := config.FromMap("a1.sinks.k1.", props)
	c, err := ReadClient(p).ClientConfig(host)
	if err != nil || p.Err() != nil {
		t.Fatalf("client config: %v %v", err, p.Err())
	}
	return c
}

// checkStores is what a Flume user's stores must do in sluice: the JKS
// keystore (Flume's default keystore-type, so no type is set) serves a
// client that trusts the JKS truststore and checks the host name; the same
// key converted to PKCS#12 serves too, even where the config still says
// JKS (Java reads either whatever the type says).
func checkStores(t *testing.T, dir string) {
	for _, tc := range []struct{ name, keystore, typ string }{
		{"jks", "server.keystore.jks", ""},
		{"pkcs12 declared JKS", "server.keystore.p12", "JKS"},
		{"pkcs12", "server.keystore.p12", "PKCS12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props := map[string]string{"ssl": "true", "keystore": filepath.Join(dir, tc.keystore), "keystore-password": testutil.KeystoreServerPass}
			if tc.typ != "" {
				props["keystore-type"] = tc.typ
			}
			scfg, err := serverSettings(t, props).ServerConfig()
			if err != nil {
				t.Fatal(err)
			}
			ccfg := clientConfig(t, map[string]string{"ssl": "true", "truststore": filepath.Join(dir, "client.truststore.jks"),
				"truststore-password": testutil.KeystoreTrustPass}, "localhost")
			if srvErr, cliErr := handshake(t, scfg, ccfg); srvErr != nil || cliErr != nil {
				t.Fatalf("handshake: server %v, client %v", srvErr, cliErr)
			}
		})
	}
}

func TestJKSStores(t *testing.T) { checkStores(t, filepath.Dir(testutil.Keystore(t, "ca-cert"))) }

// TestKeytoolStoresAsMade runs make.sh, keytool and openssl making the
// stores as the committed fixtures were made, into a temp dir, and checks
// the fresh stores. About a minute of JVM starts, so it runs with
// SLUICE_KEYTOOL=1 (go test -run TestKeytoolStoresAsMade ./internal/tlsconf/).
func TestKeytoolStoresAsMade(t *testing.T) {
	if os.Getenv("SLUICE_KEYTOOL") == "" {
		t.Skip("set SLUICE_KEYTOOL=1 to make the keystores with keytool and check them")
	}
	if _, err := exec.LookPath("keytool"); err != nil {
		t.Fatalf("keytool (openjdk-17-jre-headless) is needed: %v", err)
	}
	dir := t.TempDir()
	out, err := exec.Command(testutil.Keystore(t, "make.sh"), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("make.sh: %v\n%s", err, out)
	}
	checkStores(t, dir)
	checkClientAuth(t, dir)
}

// TestStoreErrors: each way a store can be wrong is one error naming the
// property and the file, and saying what to do.
func TestStoreErrors(t *testing.T) {
	ks := func(name string) string { return testutil.Keystore(t, name) }
	for _, tc := range []struct {
		name string
		s    Settings
		want []string
	}{
		{"wrong store password", Settings{Keystore: ks("server.keystore.jks"), KeystorePassword: "nope"},
			[]string{"keystore " + ks("server.keystore.jks") + ": wrong password; check keystore-password"}},
		{"wrong key password", Settings{Keystore: ks("client.keystore.jks"), KeystorePassword: testutil.KeystoreClientPass,
			Names: Names{Keystore: "kafka.producer.ssl.keystore.location", KeystorePassword: "kafka.producer.ssl.keystore.password", KeyPassword: "kafka.producer.ssl.key.password"}},
			[]string{"kafka.producer.ssl.keystore.location " + ks("client.keystore.jks") + `: the private key "client" cannot be decrypted: wrong password for the key; set kafka.producer.ssl.key.password`}},
		{"several keys", Settings{Keystore: ks("two-keys.jks"), KeystorePassword: testutil.KeystoreServerPass},
			[]string{`it holds 2 private keys (first, second) and no alias says which to use; set the alias (keystore-alias)`}},
		{"unknown alias", Settings{Keystore: ks("two-keys.jks"), KeystorePassword: testutil.KeystoreServerPass, KeyAlias: "third"},
			[]string{`it holds no private key named "third" (its private keys: first, second) (keystore-alias)`}},
		{"expired", Settings{Keystore: ks("expired.keystore.jks"), KeystorePassword: testutil.KeystoreServerPass},
			[]string{`the certificate of "localhost" (CN=localhost) expired on `, "; renew it"}},
		{"jceks", Settings{Keystore: ks("server.keystore.jceks"), KeystorePassword: testutil.KeystoreServerPass},
			[]string{"it is a JCEKS store, which sluice does not read; convert it with keytool -importkeystore -srcstoretype JCEKS -srckeystore " + ks("server.keystore.jceks")}},
		{"truststore as keystore", Settings{Keystore: ks("client.truststore.jks"), KeystorePassword: testutil.KeystoreTrustPass},
			[]string{"it holds no private key (only trusted certificates: caroot)"}},
		{"missing", Settings{Keystore: ks("nope.jks")}, []string{"keystore " + ks("nope.jks") + ": open "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.s.Certificate()
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
	// The alias picks one key of several; the key password opens a key
	// protected apart from its store.
	for _, s := range []Settings{
		{Keystore: ks("two-keys.jks"), KeystorePassword: testutil.KeystoreServerPass, KeyAlias: "SECOND"},
		{Keystore: ks("client.keystore.jks"), KeystorePassword: testutil.KeystoreClientPass, KeyPassword: testutil.KeystoreClientKey},
	} {
		if _, err := s.Certificate(); err != nil {
			t.Errorf("%s: %v", filepath.Base(s.Keystore), err)
		}
	}
	for _, tc := range []struct {
		s    Settings
		want string
	}{
		{Settings{Enabled: true, Truststore: ks("server.truststore.jks"), TruststorePassword: "nope"}, "truststore " + ks("server.truststore.jks") + ": wrong password; check truststore-password"},
		{Settings{Enabled: true, Truststore: ks("server.truststore.p12"), TruststorePassword: "nope"}, "wrong password; check truststore-password"},
		{Settings{Enabled: true, Truststore: ks("server.keystore.jceks"), TruststorePassword: "nope"}, "JCEKS"},
	} {
		if _, err := tc.s.ClientConfig("localhost"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("truststore %s: %v, want %q", filepath.Base(tc.s.Truststore), err, tc.want)
		}
	}
	// As Java, a JKS truststore read without a password is used unchecked;
	// PKCS#12 ones with their password.
	for _, s := range []Settings{
		{Enabled: true, Truststore: ks("server.truststore.jks")},
		{Enabled: true, Truststore: ks("server.truststore.p12"), TruststorePassword: testutil.KeystoreTrustPass},
		{Enabled: true, Truststore: ks("ca-cert"), TruststoreType: "jks"}, // PEM, whatever the type says
	} {
		if c, err := s.ClientConfig("localhost"); err != nil || c.RootCAs == nil {
			t.Errorf("truststore %s: %v", filepath.Base(s.Truststore), err)
		}
	}
}

// checkClientAuth: a source with a truststore requires client
// certificates: a client without one is refused, one whose certificate
// the truststore's CA signed is accepted, one signed by nobody it trusts
// is refused; client-auth = requested lets a client without a
// certificate in but still refuses an untrusted one.
func checkClientAuth(t *testing.T, dir string) {
	client := func(keystore, storePass, keyPass string) *tls.Config {
		c := clientConfig(t, map[string]string{"ssl": "true", "truststore": filepath.Join(dir, "client.truststore.jks")}, "localhost")
		if keystore != "" {
			cert, err := Settings{Keystore: filepath.Join(dir, keystore), KeystorePassword: storePass, KeyPassword: keyPass}.Certificate()
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{cert}
		}
		return c
	}
	none := client("", "", "")
	trusted := client("client.keystore.jks", testutil.KeystoreClientPass, testutil.KeystoreClientKey)
	stranger := client("stranger.keystore.jks", testutil.KeystoreClientPass, "")
	// Go's client sends no certificate the server's CA list does not
	// name; a client that sends its certificate anyway must be refused.
	strangerCert := stranger.Certificates[0]
	stranger.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &strangerCert, nil }
	for _, tc := range []struct {
		name, auth string
		client     *tls.Config
		ok         bool
	}{
		{"required, no certificate", "", none, false},
		{"required, trusted", "", trusted, true},
		{"required, stranger", "", stranger, false},
		{"requested, no certificate", "requested", none, true},
		{"requested, trusted", "requested", trusted, true},
		{"requested, stranger", "requested", stranger, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props := map[string]string{"ssl": "true", "keystore": filepath.Join(dir, "server.keystore.jks"), "keystore-password": testutil.KeystoreServerPass,
				"truststore": filepath.Join(dir, "server.truststore.jks"), "truststore-password": testutil.KeystoreTrustPass}
			if tc.auth != "" {
				props["client-auth"] = tc.auth
			}
			scfg, err := serverSettings(t, props).ServerConfig()
			if err != nil {
				t.Fatal(err)
			}
			srvErr, cliErr := handshake(t, scfg, tc.client)
			if tc.ok && (srvErr != nil || cliErr != nil) {
				t.Fatalf("refused: server %v, client %v", srvErr, cliErr)
			}
			if !tc.ok && (srvErr == nil || cliErr == nil) {
				t.Fatalf("accepted: server %v, client %v", srvErr, cliErr)
			}
		})
	}
}

func TestClientAuth(t *testing.T) { checkClientAuth(t, filepath.Dir(testutil.Keystore(t, "ca-cert"))) }

// TestServerStoreProblems: settings that cannot work are refused when the
// config is read.
func TestServerStoreProblems(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{"ssl": "true", "keystore": "/k.jks", "client-auth": "required"}, "client-auth: client-auth = required needs the certificate authorities"},
		{map[string]string{"ssl": "true", "keystore": "/k.jceks", "keystore-type": "JCEKS"}, "keystore-type: JCEKS stores are not read by sluice"},
		{map[string]string{"ssl": "true"}, "keystore: ssl is true but no keystore is set"},
	} {
		p := config.FromMap("a1.sources.r1.", tc.props)
		ReadServer(p)
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.props, err, tc.want)
		}
	}
}
