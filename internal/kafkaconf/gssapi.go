package kafkaconf

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	krbsasl "github.com/twmb/franz-go/pkg/sasl/kerberos"

	"github.com/sluicehq/sluice/internal/kerberos"
)

// gssapi logs in to the KDC and returns the SASL GSSAPI mechanism for the
// kgo client. The Kerberos client renews its tickets in a goroutine the
// mechanism owns: closing the kgo.Client destroys it.
//
// A login the KDC refuses (a keytab whose keys changed, an expired
// principal) fails Start with the KDC's reason; a KDC that cannot be
// reached now does not, as a broker that is down does not: the client logs
// in when it connects.
func (sec Security) gssapi() (sasl.Mechanism, error) {
	login := sec.Login
	service := sec.ServiceName
	if sec.JAASFile != "" {
		es, err := kerberos.LoadJAASSection(sec.JAASFile, "KafkaClient")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sec.jaasKey, err)
		}
		var svc string
		if login, svc, err = kerberos.KeytabLogin(es); err != nil {
			return nil, fmt.Errorf("%s %s, section KafkaClient: %w", sec.jaasKey, sec.JAASFile, err)
		}
		if service == "" {
			service = svc
		}
		if service == "" {
			return nil, errors.New("Kerberos (GSSAPI) needs the brokers' service name: set sasl.kerberos.service.name (usually kafka), or serviceName in the KafkaClient section of " + sec.JAASFile)
		}
	}
	cfg, err := kerberos.LoadConfig(sec.sys)
	if err != nil {
		return nil, err
	}
	log := sec.log.With("kafka_sasl", "GSSAPI")
	cl, err := kerberos.NewClient(login, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sec.jaasKey, err)
	}
	if err := cl.LoginNow(); err != nil {
		if kerberos.Refused(err) {
			cl.Destroy()
			return nil, err
		}
		log.Warn("kerberos: cannot log in now; the Kafka client logs in when it connects", "err", err)
	}
	inner := krbsasl.Auth{Client: cl.Client, Service: service}.AsMechanism()
	return &gssapiMechanism{Mechanism: inner, cl: cl, service: service}, nil
}

// gssapiMechanism is franz-go's Kerberos mechanism with its errors in one
// line (the Kerberos reason, not gokrb5's chain of causes), destroying the
// Kerberos client, and so its renewal goroutine, when the kgo.Client
// closes.
type gssapiMechanism struct {
	sasl.Mechanism
	cl      *kerberos.Client
	service string
}

var _ sasl.ClosingMechanism = (*gssapiMechanism)(nil)

func (m *gssapiMechanism) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	s, b, err := m.Mechanism.Authenticate(ctx, host)
	if err != nil {
		return nil, nil, fmt.Errorf("kerberos: ticket for %s/%s as %s: %s", m.service, hostOnly(host), m.cl.Login.Principal, kerberos.Reason(err))
	}
	return s, b, nil
}

func (m *gssapiMechanism) Close() { m.cl.Destroy() }

func hostOnly(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[:i]
	}
	return addr
}
