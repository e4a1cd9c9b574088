package hdfssink

import (
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kerberos"
)

// auth is how the sink authenticates to HDFS: Flume's
// hdfs.kerberosPrincipal and hdfs.kerberosKeytab (a keytab login, which
// the Kerberos client renews by itself), and hdfs.proxyUser.
type auth struct {
	kerberos  bool
	login     kerberos.Login // the principal with _HOST expanded
	proxyUser string
	sys       map[string]string // -D values: java.security.krb5.conf
	log       *slog.Logger
}

// readAuth reads the authentication keys. As in Flume, a principal and
// keytab turn Kerberos on even where core-site.xml does not, and _HOST in
// the principal is the local host's canonical name, lower-cased (Hadoop's
// SecurityUtil.getServerPrincipal).
func readAuth(env flow.Env, p *config.Props) auth {
	a := auth{sys: env.Sys, log: env.Log()}
	principal := strings.TrimSpace(p.String("hdfs.kerberosPrincipal", ""))
	keytab := strings.TrimSpace(p.String("hdfs.kerberosKeytab", ""))
	a.proxyUser = strings.TrimSpace(p.String("hdfs.proxyUser", ""))
	switch {
	case principal != "" && keytab == "":
		p.Errorf("hdfs.kerberosKeytab", "hdfs.kerberosPrincipal is set but no keytab; set hdfs.kerberosKeytab to the keytab that holds %s's keys", principal)
	case keytab != "" && principal == "":
		p.Errorf("hdfs.kerberosPrincipal", "hdfs.kerberosKeytab is set but no principal; set hdfs.kerberosPrincipal (such as flume/_HOST@EXAMPLE.COM)")
	case principal != "":
		a.kerberos = true
		if strings.Contains(principal, "/_HOST") {
			host, err := kerberos.LocalHost()
			if err != nil {
				p.Errorf("hdfs.kerberosPrincipal", "cannot expand _HOST: %v", err)
			}
			principal = kerberos.ExpandHost(principal, host)
		}
		a.login = kerberos.Login{Principal: principal, Keytab: keytab}
	}
	if a.proxyUser != "" && a.kerberos {
		p.Errorf("hdfs.proxyUser", "a proxy user over Kerberos needs Hadoop's real-user connection header, which the Go HDFS client sluice uses does not send, so the files would be written as %s rather than %s; remove hdfs.proxyUser and let the principal write, or keep a Flume agent for this sink",
			a.login.Principal, a.proxyUser)
	}
	return a
}

// unused notes Kerberos settings on a path that is not HDFS.
func (a auth) unused(p *config.Props) {
	if a.kerberos {
		p.Notef("hdfs.kerberosPrincipal", "not used: hdfs.path is not an hdfs:// path")
	}
}

// login logs in to the KDC. A refusal (a stale keytab, an expired
// principal) is an error; a KDC that cannot be reached now is a warning:
// the client logs in when it connects to the namenode.
func (s *hdfsStore) login() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loginLocked()
}

func (s *hdfsStore) loginLocked() error {
	if !s.auth.kerberos || s.kc != nil {
		return nil
	}
	cfg, err := kerberos.LoadConfig(s.auth.sys)
	if err != nil {
		return err
	}
	kc, err := kerberos.NewClient(s.auth.login, cfg, s.auth.log)
	if err != nil {
		return err
	}
	if err := kc.LoginNow(); err != nil {
		if kerberos.Refused(err) {
			kc.Destroy()
			return err
		}
		s.auth.log.Warn("kerberos: cannot log in now; the hdfs sink logs in when it connects to the namenode", "err", err)
	}
	s.kc = kc
	s.opts.KerberosClient = kc.Client
	return nil
}
