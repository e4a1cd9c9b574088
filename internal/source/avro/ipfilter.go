package avrosource

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"
)

// ipRule is one of Flume's ipFilterRules: allow|deny, ip|name, and a glob
// pattern (* any run of characters, ? one) matched against the peer's IP
// address or its reverse-DNS names ("localhost" also matches loopback).
type ipRule struct {
	allow  bool
	byName bool
	re     *regexp.Regexp
	text   string
}

// parseIPRules parses "allow:ip:127.*,deny:name:*.example.com,...".
func parseIPRules(s string) ([]ipRule, error) {
	var rules []ipRule
	for _, def := range strings.Split(s, ",") {
		def = strings.TrimSpace(def)
		parts := strings.SplitN(def, ":", 3)
		if len(parts) != 3 || (parts[0] != "allow" && parts[0] != "deny") || (parts[1] != "ip" && parts[1] != "name") {
			return nil, fmt.Errorf("rule %q should look like <allow or deny>:<ip or name>:<pattern>, such as allow:ip:127.*", def)
		}
		var b strings.Builder
		b.WriteString("^")
		for _, r := range parts[2] {
			switch r {
			case '*':
				b.WriteString(".*")
			case '?':
				b.WriteString(".")
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		b.WriteString("$")
		re, err := regexp.Compile(b.String())
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", def, err)
		}
		rules = append(rules, ipRule{allow: parts[0] == "allow", byName: parts[1] == "name", re: re, text: def})
	}
	return rules, nil
}

// allowed applies rules to addr: the first rule that matches decides; with
// no match the connection is accepted, as Netty's rule-based filter does.
func allowed(ctx context.Context, rules []ipRule, addr net.Addr) (bool, string) {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		host = addr.String()
	}
	ip := net.ParseIP(host)
	var names []string
	looked := false
	for _, r := range rules {
		if !r.byName {
			if r.re.MatchString(host) {
				return r.allow, r.text
			}
			continue
		}
		if !looked {
			looked = true
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			names, _ = net.DefaultResolver.LookupAddr(lctx, host)
			cancel()
			for i, n := range names {
				names[i] = strings.TrimSuffix(n, ".")
			}
			if ip != nil && ip.IsLoopback() {
				names = append(names, "localhost")
			}
		}
		for _, n := range names {
			if r.re.MatchString(n) {
				return r.allow, r.text
			}
		}
	}
	return true, ""
}
