// Package kdc runs a real MIT Kerberos KDC (Debian's krb5-kdc and
// krb5-admin-server, which scripts/test.sh installs) for tests: its own
// realm, database and configuration in a temp dir, listening on a loopback
// port, with ticket lifetimes short enough that renewals happen within a
// test. Principals and keytabs are made with kadmin.local.
package kdc

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// Realm is the test realm.
const Realm = "SLUICE.TEST"

// Options are the realm's ticket lifetimes.
type Options struct {
	// TicketLifetime is the longest a ticket lives (the realm's max_life,
	// and krb5.conf's ticket_lifetime); 0 means 10 minutes.
	TicketLifetime time.Duration
	// RenewLifetime is how long a ticket may be renewed (max_renewable_life,
	// renew_lifetime); 0 means 1 hour.
	RenewLifetime time.Duration
}

// KDC is a running KDC.
type KDC struct {
	Dir      string
	Addr     string // 127.0.0.1:port, UDP and TCP
	Krb5Conf string // a krb5.conf for clients of this realm
	env      []string
}

// Require skips the test when the KDC's programs are missing, except in CI
// (CI=true), where scripts/test.sh installs them, so a missing one fails.
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"krb5kdc", "kdb5_util", "kadmin.local"} {
		testutil.SystemTool(t, bin, "krb5-kdc and krb5-admin-server")
	}
}

func secs(d, def time.Duration) int {
	if d <= 0 {
		d = def
	}
	return int((d + time.Second - 1) / time.Second)
}

// Start creates the realm and starts its KDC, stopped at the end of the
// test. The realm's database is made with kdb5_util create -s.
func Start(t testing.TB, o Options) *KDC {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	life, renew := secs(o.TicketLifetime, 10*time.Minute), secs(o.RenewLifetime, time.Hour)
	var k *KDC
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		k = &KDC{Dir: dir, Addr: fmt.Sprintf("127.0.0.1:%d", port), Krb5Conf: filepath.Join(dir, "krb5.conf")}
		k.env = append(os.Environ(), "KRB5_CONFIG="+k.Krb5Conf, "KRB5_KDC_PROFILE="+filepath.Join(dir, "kdc.conf"),
			"KRB5CCNAME=FILE:"+filepath.Join(dir, "ccache"))
		kdcConf := fmt.Sprintf(`[kdcdefaults]
 kdc_ports = %[2]d
 kdc_tcp_ports = %[2]d
[realms]
 %[3]s = {
  database_name = %[1]s/principal
  acl_file = %[1]s/kadm5.acl
  key_stash_file = %[1]s/stash
  max_life = %[4]ds
  max_renewable_life = %[5]ds
  default_principal_flags = +preauth
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }
[logging]
 kdc = FILE:%[1]s/kdc.log
`, dir, port, Realm, life, renew)
		krb5Conf := fmt.Sprintf(`[libdefaults]
 default_realm = %[1]s
 dns_lookup_kdc = false
 dns_lookup_realm = false
 rdns = false
 ticket_lifetime = %[3]ds
 renew_lifetime = %[4]ds
 default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96

[realms]
 %[1]s = {
  kdc = %[2]s
 }
`, Realm, k.Addr, life, renew)
		write(t, filepath.Join(dir, "kdc.conf"), kdcConf)
		write(t, k.Krb5Conf, krb5Conf)
		write(t, filepath.Join(dir, "kadm5.acl"), "*/admin@"+Realm+" *\n")
		if attempt == 0 {
			k.run(t, "kdb5_util", "create", "-s", "-r", Realm, "-P", "sluice-master-key")
		}
		if lastErr = k.startKDC(t, port); lastErr == nil {
			return k
		}
	}
	t.Fatalf("start krb5kdc: %v", lastErr)
	return nil
}

func (k *KDC) startKDC(t testing.TB, port int) error {
	bin, _ := testutil.LookSystemTool("krb5kdc")
	cmd := exec.Command(bin, "-n", "-r", Realm)
	cmd.Env = k.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(k.Dir, "kdc.log"))
			return fmt.Errorf("krb5kdc exited: %s\n%s", out.String(), lastLines(string(log), 5))
		default:
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond); err == nil {
			_ = c.Close() // only a probe
			break
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("krb5kdc did not listen on port %d within 10 s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(stop)
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	// The KDC also listens on UDP: the port must be free there too.
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	_ = pc.Close() // only a probe
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func write(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (k *KDC) run(t testing.TB, bin string, args ...string) string {
	t.Helper()
	p, err := testutil.LookSystemTool(bin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p, args...)
	cmd.Env = k.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Kadmin runs one kadmin.local query, such as "modprinc -expire now flume".
func (k *KDC) Kadmin(t testing.TB, query string) string {
	t.Helper()
	out := k.run(t, "kadmin.local", "-r", Realm, "-q", query)
	if strings.Contains(out, "kadmin.local: ") && !strings.Contains(query, "getprinc") && !strings.Contains(query, "listprincs") {
		// kadmin.local exits 0 on a failed query and says why on its output.
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "kadmin.local: ") || strings.Contains(l, " while ") {
				t.Fatalf("kadmin.local -q %q: %s", query, out)
			}
		}
	}
	return out
}

// AddPrincipal creates name (such as "flume/localhost") with random keys
// and writes them to a new keytab in the KDC's dir, whose path it returns.
func (k *KDC) AddPrincipal(t testing.TB, name string) string {
	t.Helper()
	k.Kadmin(t, "addprinc -randkey "+name)
	return k.Keytab(t, name)
}

// Keytab writes name's current keys to a new keytab and returns its path.
// (ktadd gives the principal new keys, so an older keytab of it no longer
// works: that is how a test makes a stale keytab.)
func (k *KDC) Keytab(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(k.Dir, strings.NewReplacer("/", "_", "@", "_").Replace(name)+fmt.Sprintf("-%d.keytab", time.Now().UnixNano()))
	k.Kadmin(t, "ktadd -k "+path+" "+name)
	return path
}

// Log returns the KDC's log: one line per ticket it issued or refused.
func (k *KDC) Log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k.Dir, "kdc.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
