package kerberos

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/testutil/kdc"
)

// guideJAAS is the sample JAAS file of Flume's User Guide (its Kafka
// sections), verbatim, beside the guide's example configurations.
const guideJAAS = "../config/testdata/flume-userguide/flume_jaas.conf"

// TestJAASFileFromFlumeGuide: the JAAS file of Flume's User Guide gives
// the keytab login of its KafkaClient section.
func TestJAASFileFromFlumeGuide(t *testing.T) {
	es, err := LoadJAASSection(guideJAAS, "KafkaClient")
	if err != nil {
		t.Fatal(err)
	}
	l, svc, err := KeytabLogin(es)
	if err != nil {
		t.Fatal(err)
	}
	if l.Principal != "flume/flumehost1.example.com@YOURKERBEROSREALM" || l.Keytab != "/path/to/keytabs/flume.keytab" || svc != "" {
		t.Fatalf("login %+v, service %q", l, svc)
	}
	if _, err := LoadJAASSection(guideJAAS, "KafkaServer"); err == nil || !strings.Contains(err.Error(), "has no KafkaServer section (it has: ") {
		t.Fatalf("missing section: %v", err)
	}
}

func TestJAASEntries(t *testing.T) {
	for _, tc := range []struct {
		text, principal, keytab, service, err string
	}{
		{`com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="/etc/security/keytabs/kafka_client.keytab" principal="kafka-client-1@EXAMPLE.COM";`,
			"kafka-client-1@EXAMPLE.COM", "/etc/security/keytabs/kafka_client.keytab", "", ""},
		{`com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab=/k.keytab principal="a\"b@R" serviceName="kafka" ; // note`,
			`a"b@R`, "/k.keytab", "kafka", ""},
		{`com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;`, "", "", "", "ticket cache"},
		{`com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true principal="p";`, "", "", "", "no keyTab"},
		{`org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`, "", "", "", "no com.sun.security.auth.module.Krb5LoginModule entry (found: org.apache.kafka.common.security.plain.PlainLoginModule)"},
		{`com.sun.security.auth.module.Krb5LoginModule mandatory useKeyTab=true;`, "", "", "", `flag "mandatory"`},
		{`com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true`, "", "", "", "does not end with ;"},
		{`com.sun.security.auth.module.Krb5LoginModule required keyTab="/k`, "", "", "", "not closed"},
	} {
		es, err := ParseJAASEntries(tc.text)
		var l Login
		var svc string
		if err == nil {
			l, svc, err = KeytabLogin(es)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil || l.Principal != tc.principal || l.Keytab != tc.keytab || svc != tc.service {
			t.Errorf("%s: %+v %q %v", tc.text, l, svc, err)
		}
	}
}

func FuzzParseJAASFile(f *testing.F) {
	data, err := os.ReadFile(guideJAAS)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(data))
	f.Add(`KafkaClient { a required b="c\"d" /* x */ ; };`)
	f.Fuzz(func(t *testing.T, s string) {
		secs, err := ParseJAASFile(s)
		if err != nil {
			return
		}
		for _, es := range secs {
			for _, e := range es {
				if e.Module == "" || e.Flag == "" {
					t.Fatalf("empty module or flag: %+v", e)
				}
			}
		}
	})
}

func TestExpandHost(t *testing.T) {
	for in, want := range map[string]string{
		"flume/_HOST@EXAMPLE.COM": "flume/node7.example.com@EXAMPLE.COM",
		"flume/_HOST":             "flume/node7.example.com",
		"flume@EXAMPLE.COM":       "flume@EXAMPLE.COM",
		"_HOST/x@R":               "_HOST/x@R",
	} {
		if got := ExpandHost(in, "Node7.Example.COM"); got != want {
			t.Errorf("ExpandHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// syncBuffer is a log sink safe for gokrb5's renewal goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newClient(t *testing.T, k *kdc.KDC, l Login, logs *syncBuffer) *Client {
	t.Helper()
	cfg, err := LoadConfig(map[string]string{SysKrb5Conf: k.Krb5Conf})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := NewClient(l, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Destroy)
	return c
}

// TestLoginAndRenewal: a client logs in to a real KDC from a keytab and
// keeps getting service tickets while its ticket-granting ticket (3 s)
// is renewed by the client's own goroutine and, once it can be renewed no
// longer (5 s), replaced by a new login from the keytab; it says so at
// DEBUG, never WARN.
func TestLoginAndRenewal(t *testing.T) {
	k := kdc.Start(t, kdc.Options{TicketLifetime: 3 * time.Second, RenewLifetime: 5 * time.Second})
	keytab := k.AddPrincipal(t, "flume/localhost")
	k.AddPrincipal(t, "kafka/localhost")
	var logs syncBuffer
	c := newClient(t, k, Login{Principal: "flume/localhost@" + kdc.Realm, Keytab: keytab}, &logs)
	if err := c.LoginNow(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		if _, _, err := c.GetServiceTicket("kafka/localhost"); err != nil {
			t.Fatalf("service ticket at %v: %v\n%s", time.Until(end), err, logs.String())
		}
	}
	out := logs.String()
	if n := strings.Count(out, "TGT session renewed"); n < 2 {
		t.Errorf("%d renewals logged in 8 s of 3 s tickets, want at least 2:\n%s", n, out)
	}
	if strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
		t.Errorf("warnings while renewing:\n%s", out)
	}
	if !strings.Contains(out, `level=DEBUG msg="kerberos: TGT session renewed for SLUICE.TEST`) {
		t.Errorf("renewals are not at DEBUG:\n%s", out)
	}
	// The KDC saw the renewals (TGS requests for krbtgt) and a second
	// login from the keytab once renew_lifetime ran out.
	klog := k.Log(t)
	if n := strings.Count(klog, "AS_REQ"); n < 2 {
		t.Errorf("KDC log has %d AS_REQ (logins), want at least 2:\n%s", n, klog)
	}
}

// TestLoginRefused: the KDC's refusals come back in one line with its
// reason: a keytab whose keys were changed since (KDC_ERR_PREAUTH_FAILED),
// a principal whose account expired (KDC_ERR_NAME_EXP or
// KDC_ERR_CLIENT_REVOKED); a keytab without the principal is refused
// before the KDC is asked.
func TestLoginRefused(t *testing.T) {
	k := kdc.Start(t, kdc.Options{})
	stale := k.AddPrincipal(t, "flume/stale")
	k.Keytab(t, "flume/stale") // new keys: the first keytab is stale
	expiredKT := k.AddPrincipal(t, "flume/expired")
	k.Kadmin(t, "modprinc -expire \"2000-01-01 00:00:00 UTC\" flume/expired")
	other := k.AddPrincipal(t, "someone/else")
	cfg, err := LoadConfig(map[string]string{SysKrb5Conf: k.Krb5Conf})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		login Login
		want  string
	}{
		{Login{"flume/stale@" + kdc.Realm, stale}, "KDC_ERR_PREAUTH_FAILED"},
		{Login{"flume/expired", expiredKT}, "KDC_ERR_NAME_EXP"},
	} {
		c, err := NewClient(tc.login, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = c.LoginNow()
		c.Destroy()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "Root cause") {
			t.Errorf("%s: %v, want one line with %s", tc.login.Principal, err, tc.want)
		}
	}
	if _, err := NewClient(Login{"flume/localhost", other}, cfg, nil); err == nil || !strings.Contains(err.Error(), "holds no key for flume/localhost@SLUICE.TEST (it holds: someone/else@SLUICE.TEST)") {
		t.Errorf("principal not in keytab: %v", err)
	}
	if _, err := NewClient(Login{"flume/localhost", filepath.Join(t.TempDir(), "none.keytab")}, cfg, nil); err == nil || !strings.Contains(err.Error(), "read keytab") {
		t.Errorf("missing keytab: %v", err)
	}
	if _, err := LoadConfig(map[string]string{SysKrb5Conf: "/nonexistent/krb5.conf"}); err == nil || !strings.Contains(err.Error(), "fix -Djava.security.krb5.conf") {
		t.Errorf("missing krb5.conf: %v", err)
	}
}

// TestLogLines: gokrb5's routine lines go out at DEBUG; a failure at WARN
// with the Kerberos reason in one line, once per kind per interval.
func TestLogLines(t *testing.T) {
	var buf syncBuffer
	w := &logWriter{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), th: logthrottle.New(time.Hour, 1)}
	fmt.Fprintln(w, "TGT session renewed for R (EndTime: x)")
	for range 3 {
		fmt.Fprintln(w, "error refreshing session: [Root cause: KDC_Error] KDC_Error: TGS Exchange Error: kerberos error response from KDC when requesting for krbtgt/R: KRB Error: (12) KDC_ERR_POLICY KDC policy rejects request - POLICY")
	}
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="kerberos: TGT session renewed for R (EndTime: x)"`) {
		t.Errorf("renewal line: %s", out)
	}
	if n := strings.Count(out, `level=WARN msg="kerberos: error refreshing session" err="KDC_ERR_POLICY KDC policy rejects request"`); n != 1 {
		t.Errorf("%d warnings, want 1 (throttled) with the reason:\n%s", n, out)
	}
}
