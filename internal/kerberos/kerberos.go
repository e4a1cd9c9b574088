// Package kerberos logs the agent in to a Kerberos KDC from a keytab, as
// Flume's components do through Java's Krb5LoginModule and Hadoop's
// UserGroupInformation, and keeps the login fresh for weeks of uptime:
// gokrb5's client renews its ticket-granting ticket before it expires (at
// five sixths of its life) and logs in again from the keytab once it can no
// longer be renewed. It reads what Flume users configure: krb5.conf (from
// -Djava.security.krb5.conf, $KRB5_CONFIG or /etc/krb5.conf), JAAS login
// entries (Kafka's sasl.jaas.config, or a file named by
// -Djava.security.auth.login.config) and Hadoop's principals with _HOST.
//
// A Client's renewal goroutine belongs to whoever holds the Client: Destroy
// ends it (Kafka clients close it with the kgo.Client, the hdfs sink at
// Stop).
package kerberos

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/keytab"

	"github.com/sluicehq/sluice/internal/logthrottle"
)

// System properties and files Flume's JVM reads, which sluice reads the same way.
const (
	SysKrb5Conf   = "java.security.krb5.conf"
	SysJAASConfig = "java.security.auth.login.config"
	defaultConf   = "/etc/krb5.conf"
)

// ConfigPath is the krb5.conf Java would read: -Djava.security.krb5.conf,
// else $KRB5_CONFIG (MIT's variable, which Java ignores but every other
// Kerberos tool on the host reads), else /etc/krb5.conf.
func ConfigPath(sys map[string]string) string {
	if p := sys[SysKrb5Conf]; p != "" {
		return p
	}
	if p := os.Getenv("KRB5_CONFIG"); p != "" {
		return p
	}
	return defaultConf
}

// LoadConfig reads the krb5.conf ConfigPath names.
func LoadConfig(sys map[string]string) (*krbconfig.Config, error) {
	path := ConfigPath(sys)
	c, err := krbconfig.Load(path)
	if err != nil {
		how := "set -D" + SysKrb5Conf + "=FILE"
		if _, ok := sys[SysKrb5Conf]; ok {
			how = "fix -D" + SysKrb5Conf
		}
		return nil, fmt.Errorf("read krb5.conf %s: %v (%s)", path, err, how)
	}
	return c, nil
}

// Login is a principal and the keytab that holds its keys.
type Login struct {
	Principal string // user@REALM or service/host@REALM; without @REALM, krb5.conf's default_realm
	Keytab    string
}

func (l Login) String() string { return l.Principal + " (keytab " + l.Keytab + ")" }

// split returns the principal's name and realm, the realm defaulting to
// krb5.conf's default_realm.
func (l Login) split(c *krbconfig.Config) (name, realm string, err error) {
	name, realm, _ = strings.Cut(l.Principal, "@")
	if realm == "" {
		realm = c.LibDefaults.DefaultRealm
	}
	if name == "" || realm == "" {
		return "", "", fmt.Errorf("principal %q has no realm and krb5.conf sets no default_realm; write it as name@REALM", l.Principal)
	}
	return name, realm, nil
}

// Client is a logged-in Kerberos client that renews its tickets.
type Client struct {
	*client.Client
	Login Login
	log   *slog.Logger
}

// NewClient reads the keytab and builds the client for l, with gokrb5's
// messages on log (renewals at DEBUG, failures at WARN, throttled). It
// does not contact the KDC: call Login for that.
func NewClient(l Login, c *krbconfig.Config, logger *slog.Logger) (*Client, error) {
	if logger == nil {
		logger = slog.Default()
	}
	name, realm, err := l.split(c)
	if err != nil {
		return nil, err
	}
	kt, err := keytab.Load(l.Keytab)
	if err != nil {
		return nil, fmt.Errorf("read keytab %s: %w", l.Keytab, err)
	}
	var held []string
	found := false
	for _, e := range kt.Entries {
		p := strings.Join(e.Principal.Components, "/") + "@" + e.Principal.Realm
		held = append(held, p)
		if p == name+"@"+realm {
			found = true
		}
	}
	if !found {
		sort.Strings(held)
		return nil, fmt.Errorf("keytab %s holds no key for %s@%s (it holds: %s)", l.Keytab, name, realm, strings.Join(compact(held), ", "))
	}
	w := &logWriter{log: logger.With("principal", name+"@"+realm), th: logthrottle.New(10*time.Second, 1)}
	cl := client.NewWithKeytab(name, realm, kt, c,
		client.DisablePAFXFAST(true), // MIT KDCs without FAST armor refuse PA-FX-FAST
		client.Logger(log.New(w, "", 0)))
	return &Client{Client: cl, Login: l, log: logger}, nil
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Refused tells a login the KDC answered with a refusal (a stale keytab,
// an unknown or expired principal), which trying again will not change,
// from one that failed because the KDC did not answer.
func Refused(err error) bool {
	s := err.Error()
	return strings.Contains(s, "KDC_ERR_") || strings.Contains(s, "keytab's keys are not the KDC's")
}

// LoginNow gets a ticket-granting ticket from the KDC, and says so at INFO
// with its lifetime.
func (c *Client) LoginNow() error {
	if err := c.Client.Login(); err != nil {
		return fmt.Errorf("kerberos login as %s: %s", c.Login, Reason(err))
	}
	c.log.Info("kerberos: logged in; the ticket is renewed before it expires", "principal", c.Login.Principal, "keytab", c.Login.Keytab)
	return nil
}

// logWriter turns gokrb5's log lines into slog records: its renewals and
// cache hits at DEBUG, its errors (a renewal that failed: the KDC is
// down, the keytab's keys were changed) at WARN, once per message kind
// per interval.
type logWriter struct {
	log *slog.Logger
	th  *logthrottle.Throttle
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	// gokrb5's failures start "error ..." (such as "error refreshing
	// session: ..."): keyed by that lead-in, with the reason in one line.
	if lead, detail, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(lead, "error") {
		w.th.Log(w.log, slog.LevelWarn, lead, "kerberos: "+lead, "err", Reason(errors.New(detail)))
		return len(p), nil
	}
	w.log.Log(context.Background(), slog.LevelDebug, "kerberos: "+line)
	return len(p), nil
}

var krbCode = regexp.MustCompile(`\((\d+)\) ((?:KDC|KRB)_[A-Z0-9_]+) ?([^\n]*)`)

// Reason is err in one line, led by the KDC's or the service's Kerberos
// error code and text when there is one (such as "KDC_ERR_PREAUTH_FAILED
// Pre-authentication information was invalid"), rather than gokrb5's
// nested "[Root cause: ...]" chain.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if m := krbCode.FindStringSubmatch(s); m != nil {
		text := strings.TrimSpace(m[3])
		if i := strings.Index(text, " - "); i >= 0 && strings.TrimSpace(text[i+3:]) == strings.TrimPrefix(m[2], "KDC_ERR_") {
			text = text[:i]
		}
		return strings.TrimSpace(m[2] + " " + text)
	}
	if strings.Contains(s, "client password/keytab incorrect") {
		// A KDC that does not ask for pre-authentication answers a stale
		// keytab with a reply the client cannot decrypt.
		return "the keytab's keys are not the KDC's (the reply to the login cannot be decrypted): the keytab is out of date or for another principal"
	}
	if i := strings.LastIndex(s, "[Root cause: "); i >= 0 {
		s = s[i:]
	}
	return strings.Join(strings.Fields(s), " ")
}

// ExpandHost replaces _HOST in a principal such as flume/_HOST@REALM with
// host, lower-cased, as Hadoop's SecurityUtil.getServerPrincipal does
// (Flume's hdfs.kerberosPrincipal). Only a _HOST that is the second
// component is replaced.
func ExpandHost(principal, host string) string {
	name, realm, hasRealm := strings.Cut(principal, "@")
	parts := strings.Split(name, "/")
	if len(parts) != 2 || parts[1] != "_HOST" {
		return principal
	}
	out := parts[0] + "/" + strings.ToLower(host)
	if hasRealm {
		out += "@" + realm
	}
	return out
}

// LocalHost is the host name Hadoop puts for _HOST: the local host's
// canonical name (its fully qualified name when the resolver knows one).
func LocalHost() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", err
	}
	if cname, err := net.LookupCNAME(h); err == nil && cname != "" {
		h = strings.TrimSuffix(cname, ".")
	}
	return strings.ToLower(h), nil
}
