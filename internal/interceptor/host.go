package interceptor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// Host sets a header (host) to this machine's IP address or name, as
// Flume's HostInterceptor. The address is resolved once, when the
// interceptor is built.
type Host struct {
	header   string
	preserve bool
	value    string // "" when the local host could not be resolved
}

// resolveTimeout bounds the name lookups of NewHost.
const resolveTimeout = 2 * time.Second

// resolveHost is localHost, replaceable in tests to inject a failure.
var resolveHost = localHost

// NewHost builds a host interceptor from hostHeader (host), useIP (true) and
// preserveExisting (false). When the local host cannot be resolved it logs a
// warning and sets no header, as Flume does.
func NewHost(env flow.Env, p *config.Props) (flow.Interceptor, error) {
	h := &Host{
		header:   p.String("hostHeader", "host"),
		preserve: p.Bool("preserveExisting", false),
	}
	useIP := p.Bool("useIP", true)
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	v, err := resolveHost(ctx, useIP)
	if err != nil {
		env.Log().Warn("cannot resolve the local host; events will get no host header", "header", h.header, "err", err)
	}
	h.value = v
	return h, nil
}

// Intercept sets the header on every event, keeping an existing value when
// preserveExisting is set.
func (h *Host) Intercept(events []event.Event) []event.Event {
	if h.value != "" {
		setHeader(events, h.header, h.value, h.preserve)
	}
	return events
}

// localHost resolves this machine as Java's InetAddress.getLocalHost does:
// the host name looked up to an address (IPv4 first). With useIP it returns
// the address; otherwise the name found by a reverse lookup of the address,
// or the host name itself when there is none (Java would return the
// address). When the host name does not resolve, it falls back to the
// first non-loopback address of an interface, where Java would fail.
func localHost(ctx context.Context, useIP bool) (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("host name: %w", err)
	}
	ip, lerr := lookupFirst(ctx, name)
	if lerr != nil {
		ip, err = interfaceAddr()
		if err != nil {
			return "", fmt.Errorf("look up host name %q: %w; %w", name, lerr, err)
		}
	}
	if useIP {
		return ip.String(), nil
	}
	if names, err := net.DefaultResolver.LookupAddr(ctx, ip.String()); err == nil && len(names) > 0 {
		return strings.TrimSuffix(names[0], "."), nil
	}
	return name, nil
}

func lookupFirst(ctx context.Context, name string) (net.IP, error) {
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", name)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip, nil
		}
	}
	if len(ips) == 0 {
		return nil, errors.New("no address")
	}
	return ips[0], nil
}

func interfaceAddr() (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	var v6 net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP, nil
		}
		if v6 == nil {
			v6 = n.IP
		}
	}
	if v6 == nil {
		return nil, errors.New("no non-loopback interface address")
	}
	return v6, nil
}
