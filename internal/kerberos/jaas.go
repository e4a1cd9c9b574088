package kerberos

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"
)

// JAASEntry is one login module line of a JAAS configuration:
// "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true
// keyTab=\"/etc/flume.keytab\" principal=\"flume/host@REALM\";".
type JAASEntry struct {
	Module  string
	Flag    string // required, requisite, sufficient or optional
	Options map[string]string
}

const krb5Module = "com.sun.security.auth.module.Krb5LoginModule"

// ParseJAASEntries reads login module entries, as Kafka's sasl.jaas.config
// holds them (no section name, no braces).
func ParseJAASEntries(text string) ([]JAASEntry, error) {
	toks, err := jaasTokens(text)
	if err != nil {
		return nil, err
	}
	es, rest, err := parseEntries(toks, false)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("unexpected %q after the login modules", rest[0])
	}
	if len(es) == 0 {
		return nil, errors.New("no login module")
	}
	return es, nil
}

// ParseJAASFile reads a JAAS login configuration file, as Java's
// -Djava.security.auth.login.config names it: sections such as
// "KafkaClient { ... };", each holding login module entries.
func ParseJAASFile(text string) (map[string][]JAASEntry, error) {
	toks, err := jaasTokens(text)
	if err != nil {
		return nil, err
	}
	out := map[string][]JAASEntry{}
	for len(toks) > 0 {
		if len(toks) < 2 || toks[1] != "{" {
			return nil, fmt.Errorf("expected a section such as KafkaClient { ... }; at %q", toks[0])
		}
		name := toks[0]
		es, rest, err := parseEntries(toks[2:], true)
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", name, err)
		}
		if len(rest) == 0 || rest[0] != "}" {
			return nil, fmt.Errorf("section %s is not closed with };", name)
		}
		rest = rest[1:]
		if len(rest) > 0 && rest[0] == ";" {
			rest = rest[1:]
		}
		out[name] = append(out[name], es...)
		toks = rest
	}
	return out, nil
}

// LoadJAASSection reads section of the JAAS file at path.
func LoadJAASSection(path, section string) ([]JAASEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secs, err := ParseJAASFile(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	es, ok := secs[section]
	if !ok {
		var names []string
		for n := range secs {
			names = append(names, n)
		}
		return nil, fmt.Errorf("%s has no %s section (it has: %s)", path, section, listOrNone(names))
	}
	return es, nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// parseEntries reads "Module Flag k=v ... ;" entries until the tokens end
// or, inSection, a "}".
func parseEntries(toks []string, inSection bool) ([]JAASEntry, []string, error) {
	var out []JAASEntry
	for len(toks) > 0 {
		if inSection && toks[0] == "}" {
			return out, toks, nil
		}
		if len(toks) < 2 || isPunct(toks[0]) || isPunct(toks[1]) {
			return nil, nil, fmt.Errorf("expected a login module and its flag (such as %s required) at %q", krb5Module, toks[0])
		}
		e := JAASEntry{Module: toks[0], Flag: strings.ToLower(toks[1]), Options: map[string]string{}}
		switch e.Flag {
		case "required", "requisite", "sufficient", "optional":
		default:
			return nil, nil, fmt.Errorf("login module %s: flag %q is not required, requisite, sufficient or optional", e.Module, toks[1])
		}
		toks = toks[2:]
		for {
			if len(toks) == 0 {
				return nil, nil, fmt.Errorf("login module %s: the entry does not end with ;", e.Module)
			}
			if toks[0] == ";" {
				toks = toks[1:]
				break
			}
			if len(toks) < 3 || toks[1] != "=" || isPunct(toks[0]) || isPunct(toks[2]) {
				return nil, nil, fmt.Errorf("login module %s: expected option=value at %q", e.Module, toks[0])
			}
			e.Options[toks[0]] = unquote(toks[2])
			toks = toks[3:]
		}
		out = append(out, e)
	}
	return out, nil, nil
}

func isPunct(t string) bool { return t == "{" || t == "}" || t == ";" || t == "=" }

// unquote strips a token's quotes; the tokenizer marks quoted tokens with
// a leading quote and has already resolved escapes.
func unquote(t string) string { return strings.TrimPrefix(t, "\"") }

// jaasTokens splits JAAS text into words, quoted strings (kept with a
// leading " as marker, escapes resolved) and the punctuation { } ; =,
// dropping // and /* */ comments.
func jaasTokens(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case unicode.IsSpace(rune(c)):
			i++
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return out, nil
			}
			i += j
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return nil, errors.New("a /* comment is not closed")
			}
			i += j + 4
		case c == '{' || c == '}' || c == ';' || c == '=':
			out = append(out, string(c))
			i++
		case c == '"':
			var b strings.Builder
			b.WriteByte('"')
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, errors.New("a quoted value is not closed")
			}
			out = append(out, b.String())
			i = j + 1
		default:
			j := i
			for j < len(s) && !unicode.IsSpace(rune(s[j])) && !strings.ContainsRune("{};=\"", rune(s[j])) {
				j++
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out, nil
}

// KeytabLogin is the keytab login a Krb5LoginModule entry describes
// (useKeyTab=true keyTab="..." principal="..."), and the serviceName it
// may set. Logins from a ticket cache or a password prompt are refused:
// sluice must be able to log in again by itself when tickets run out.
func KeytabLogin(es []JAASEntry) (Login, string, error) {
	for _, e := range es {
		if e.Module != krb5Module {
			continue
		}
		o := e.Options
		if !strings.EqualFold(o["useKeyTab"], "true") {
			if strings.EqualFold(o["useTicketCache"], "true") {
				return Login{}, "", errors.New("the Krb5LoginModule entry logs in from a ticket cache (useTicketCache=true), which sluice does not read; give it a keytab: useKeyTab=true keyTab=\"/path/to.keytab\" principal=\"name@REALM\", and sluice renews the tickets itself")
			}
			return Login{}, "", errors.New("the Krb5LoginModule entry has no keytab; set useKeyTab=true keyTab=\"/path/to.keytab\" principal=\"name@REALM\"")
		}
		l := Login{Principal: o["principal"], Keytab: o["keyTab"]}
		if l.Keytab == "" {
			return Login{}, "", errors.New("the Krb5LoginModule entry sets useKeyTab=true but no keyTab=\"/path/to.keytab\"")
		}
		if l.Principal == "" {
			return Login{}, "", errors.New("the Krb5LoginModule entry names no principal; set principal=\"name@REALM\"")
		}
		return l, o["serviceName"], nil
	}
	var mods []string
	for _, e := range es {
		mods = append(mods, e.Module)
	}
	return Login{}, "", fmt.Errorf("no %s entry (found: %s); Kerberos needs one with useKeyTab=true keyTab=\"...\" principal=\"...\"", krb5Module, listOrNone(mods))
}
