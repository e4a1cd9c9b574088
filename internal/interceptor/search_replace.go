package interceptor

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// SearchReplace rewrites event bodies by replacing every match of a pattern,
// as Flume's SearchAndReplaceInterceptor (Java's Matcher.replaceAll).
type SearchReplace struct {
	re      *regexp.Regexp
	tmpl    []byte // replaceString in Go's Expand syntax
	literal bool   // tmpl has no group reference
	charset charset
}

// NewSearchReplace builds a search_replace interceptor from searchPattern
// (required), replaceString ("", Java replacement syntax: $1, ${name}, \$)
// and charset (UTF-8; ISO-8859-1 and US-ASCII are also supported).
//
// Java reports a bad replacement string (a dangling $ or \, a group the
// pattern does not have) when the first event matches, and then fails every
// batch; sluice reports it as a configuration problem instead.
func NewSearchReplace(_ flow.Env, p *config.Props) (flow.Interceptor, error) {
	expr := requiredRaw(p, "searchPattern", "a regular expression")
	s := &SearchReplace{re: neverMatch, literal: true}
	if expr != "" {
		s.re = compileRegex(p, "searchPattern", expr)
	}
	repl := p.String("replaceString", "")
	if s.re != neverMatch {
		tmpl, literal, err := javaReplacement(s.re, repl)
		if err != nil {
			p.Errorf("replaceString", "%q: %v", repl, err)
		}
		s.tmpl, s.literal = tmpl, literal
	}
	if p.Has("charset") {
		name := p.String("charset", "")
		cs, ok := charsets[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			p.Errorf("charset", "%q is not a supported charset; use UTF-8, ISO-8859-1 or US-ASCII", name)
		}
		s.charset = cs
	}
	return s, nil
}

// Intercept replaces the body of every event with the body after
// replacement. With UTF-8, bytes that are not valid UTF-8 are kept as they
// are where Java would turn each into U+FFFD.
func (s *SearchReplace) Intercept(events []event.Event) []event.Event {
	for i := range events {
		e := &events[i]
		if s.charset == utf8Charset {
			e.Body = s.replace(e.Body)
			continue
		}
		e.Body = s.charset.encode(s.replace(s.charset.decode(e.Body)))
	}
	return events
}

func (s *SearchReplace) replace(b []byte) []byte {
	if s.literal {
		return s.re.ReplaceAllLiteral(b, s.tmpl)
	}
	return s.re.ReplaceAll(b, s.tmpl)
}

// javaReplacement translates a java.util.regex replacement string for re
// into what Go needs, following Matcher.appendReplacement: a backslash takes
// the next character literally; $n refers to group n, taking further digits
// while the number stays a group of re; ${name} refers to a named group.
// When repl refers to no group, literal is true and out is the plain text
// to insert; otherwise out is a template for Regexp.Expand (with ${n}
// references and literal dollar signs doubled).
func javaReplacement(re *regexp.Regexp, repl string) (out []byte, literal bool, err error) {
	groups := re.NumSubexp()
	var raw, tmpl []byte // the text without and with group references
	refs := false
	for i := 0; i < len(repl); {
		c := repl[i]
		switch c {
		case '\\':
			i++
			if i == len(repl) {
				return nil, false, errors.New(`the final \ escapes nothing; write \\ for a backslash`)
			}
			c = repl[i] // a multi-byte character is copied byte by byte below
			i++
		case '$':
			n, next, err := javaGroupRef(re, groups, repl, i+1)
			if err != nil {
				return nil, false, err
			}
			tmpl = fmt.Appendf(tmpl, "${%d}", n)
			refs = true
			i = next
			continue
		default:
			i++
		}
		raw = append(raw, c)
		if c == '$' {
			tmpl = append(tmpl, '$')
		}
		tmpl = append(tmpl, c)
	}
	if !refs {
		return raw, true, nil
	}
	return tmpl, false, nil
}

// javaGroupRef parses the group reference after the $ at repl[i-1] and
// returns the group number and the index after the reference.
func javaGroupRef(re *regexp.Regexp, groups int, repl string, i int) (n, next int, err error) {
	if i == len(repl) {
		return 0, 0, errors.New(`the final $ names no group; write \$ for a dollar sign`)
	}
	if repl[i] == '{' {
		j := i + 1
		for j < len(repl) && isASCIIAlnum(repl[j]) {
			j++
		}
		name := repl[i+1 : j]
		switch {
		case name == "":
			return 0, 0, errors.New(`${ names no group; write ${name}, or \$ for a dollar sign`)
		case j == len(repl) || repl[j] != '}':
			return 0, 0, fmt.Errorf("${%s is missing its closing }", name)
		case name[0] >= '0' && name[0] <= '9':
			return 0, 0, fmt.Errorf("group name {%s} starts with a digit; write $%s for a numbered group", name, name)
		case re.SubexpIndex(name) < 0:
			return 0, 0, fmt.Errorf("searchPattern has no group named %s; name one with (?<%s>...)", name, name)
		}
		return re.SubexpIndex(name), j + 1, nil
	}
	if repl[i] < '0' || repl[i] > '9' {
		return 0, 0, fmt.Errorf(`$%c is not a group reference; write $1, ${name}, or \$ for a dollar sign`, repl[i])
	}
	n = int(repl[i] - '0')
	if n > groups {
		return 0, 0, fmt.Errorf("$%d refers to group %d but searchPattern has %d", n, n, groups)
	}
	for i++; i < len(repl) && repl[i] >= '0' && repl[i] <= '9'; i++ {
		m := n*10 + int(repl[i]-'0')
		if m > groups {
			break
		}
		n = m
	}
	return n, i, nil
}

func isASCIIAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// charset is how search_replace turns a body into text and back.
type charset int

const (
	utf8Charset charset = iota
	latin1Charset
	asciiCharset
)

// charsets maps the lower-cased Java names and aliases sluice supports.
var charsets = map[string]charset{
	"utf-8": utf8Charset, "utf8": utf8Charset, "unicode-1-1-utf-8": utf8Charset,
	"iso-8859-1": latin1Charset, "iso8859_1": latin1Charset, "iso_8859_1": latin1Charset,
	"iso8859-1": latin1Charset, "iso_8859-1": latin1Charset, "latin1": latin1Charset, "l1": latin1Charset,
	"8859_1": latin1Charset, "cp819": latin1Charset, "ibm819": latin1Charset, "iso-ir-100": latin1Charset,
	"us-ascii": asciiCharset, "ascii": asciiCharset, "us": asciiCharset, "iso646-us": asciiCharset,
	"ascii7": asciiCharset, "646": asciiCharset, "cp367": asciiCharset, "ibm367": asciiCharset,
}

// decode returns b as UTF-8: ISO-8859-1 maps each byte to the code point of
// that value; US-ASCII maps bytes above 0x7F to U+FFFD, as Java does.
func (c charset) decode(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/4)
	for _, x := range b {
		switch {
		case x < utf8.RuneSelf:
			out = append(out, x)
		case c == latin1Charset:
			out = utf8.AppendRune(out, rune(x))
		default:
			out = utf8.AppendRune(out, utf8.RuneError)
		}
	}
	return out
}

// encode turns UTF-8 text back into the charset; characters it cannot hold
// become '?', as Java's String.getBytes does.
func (c charset) encode(b []byte) []byte {
	out := b[:0] // encoding never grows the text
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r < utf8.RuneSelf:
			out = append(out, byte(r))
		case c == latin1Charset && r <= 0xFF && !(r == utf8.RuneError && n == 1):
			out = append(out, byte(r))
		default:
			out = append(out, '?')
		}
		i += n
	}
	return out
}
