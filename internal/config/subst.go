package config

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Lookup resolves the variables of ${...} references in property values.
// Sys holds the system properties (-DNAME=value on the sluice command line);
// Env looks up an environment variable (os.LookupEnv when nil).
//
// Exec runs the command of an external config filter (see filters.go); it
// is nil unless the caller trusts the configuration to run programs, and
// then external filters are refused. Load sets it to RunCommand.
type Lookup struct {
	Sys  map[string]string
	Env  func(name string) (string, bool)
	Exec func(ctx context.Context, argv []string) (stdout, stderr []byte, err error)

	// filters are the agent's config filters, by name, and agent its
	// name; the loader sets both.
	filters map[string]*filter
	agent   string
	// props are the configuration's own properties (every key of every
	// source, the last one winning), which a bare ${NAME} reads first, as
	// Flume 1.10+ does; the loader sets them.
	props map[string]string
}

// expansion is what substituting one value found.
type expansion struct {
	probs   []string
	secret  bool     // a config filter supplied part of the value
	secrets []string // what the config filters supplied
	quiet   bool     // a reference could not be resolved for a reason already reported
}

// Substitute expands the variable references in a property value, as Flume
// 1.10+ does with commons-text's StringSubstitutor:
//
//	${env:NAME}       the environment variable NAME
//	${sys:NAME}       the system property NAME (-DNAME=value)
//	${NAME}           the property NAME of the configuration (any key of
//	                  any -f file or URI, as in Flume), else the system
//	                  property NAME, else the environment variable
//	${NAME:-default}  default when NAME is not set (with any of the above)
//	$${NAME}          the literal text ${NAME}
//
// A reference may be nested in a name (${env:${sys:which}}); a resolved
// value is not expanded again. A "${" without its closing brace is left as
// it is. Every reference to a variable that is not set is returned as a
// problem message, and the reference is left in the result unexpanded.
//
// Flume's bare ${NAME} looks NAME up among the properties (the user guide's
// example sets NC_PORT = 44444 in a second -f file) or, with
// -DpropertiesImplementation=org.apache.flume.node.EnvVarResolverProperties,
// among the properties and then the environment; sluice looks among the
// properties, then the system properties, then the environment, so both
// kinds of configuration run unchanged. A property's value is expanded in
// turn.
func (l Lookup) Substitute(value string) (string, []string) {
	out, x := l.substitute(value)
	return out, x.probs
}

// substitute is Substitute that also reports whether a config filter
// supplied part of the result, and references left unresolved silently.
// A config filter reference, ${f1['key']}, is resolved by the filter f1.
func (l Lookup) substitute(value string) (string, expansion) {
	var x expansion
	if !strings.Contains(value, "${") {
		return value, x
	}
	out := l.expand(value, &x, 0)
	return out, x
}

// maxNesting bounds the recursion of nested references.
const maxNesting = 8

func (l Lookup) expand(s string, x *expansion, depth int) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		if i > 0 && s[i-1] == '$' {
			// "$${" is an escaped "${": drop the escape, keep the rest as text.
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		end := closingBrace(s, i+2)
		if end < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		ref := s[i : end+1]
		name := s[i+2 : end]
		if depth < maxNesting && strings.Contains(name, "${") {
			name = l.expand(name, x, depth+1)
		}
		if v, ok := l.resolve(name, ref, x, depth); ok {
			b.WriteString(v)
		} else {
			b.WriteString(ref)
		}
		s = s[end+1:]
	}
}

// closingBrace returns the index of the '}' that closes a reference whose
// name starts at from, allowing nested references, or -1.
func closingBrace(s string, from int) int {
	depth := 0
	for j := from; j < len(s); j++ {
		switch {
		case s[j] == '$' && j+1 < len(s) && s[j+1] == '{':
			depth++
			j++
		case s[j] == '}':
			if depth == 0 {
				return j
			}
			depth--
		}
	}
	return -1
}

func (l Lookup) resolve(name, ref string, x *expansion, depth int) (string, bool) {
	if fname, key, ok := filterRef(name); ok {
		f, known := l.filters[fname]
		switch {
		case !known:
			x.probs = append(x.probs, fmt.Sprintf("%s: config filter %s is not defined; list it in %s.configfilters and set its type", ref, fname, l.agent))
			return "", false
		case f.broken:
			x.quiet = true // the filter's own problem is reported
			return "", false
		}
		v, err := f.get(key)
		if err != nil {
			x.probs = append(x.probs, err.Error())
			return "", false
		}
		x.secret = true
		x.secrets = append(x.secrets, v)
		return v, true
	}
	probs := &x.probs
	def, hasDef := "", false
	if k := strings.Index(name, ":-"); k >= 0 {
		name, def, hasDef = name[:k], name[k+2:], true
	}
	kind, key := "", name
	if k := strings.IndexByte(name, ':'); k >= 0 {
		kind, key = name[:k], name[k+1:]
	}
	if key == "" {
		*probs = append(*probs, fmt.Sprintf("%s has no variable name", ref))
		return "", false
	}
	var v string
	var ok bool
	var missing string
	switch kind {
	case "env":
		v, ok = l.env(key)
		missing = fmt.Sprintf("environment variable %s is not set", key)
	case "sys":
		v, ok = l.Sys[key]
		missing = fmt.Sprintf("system property %s is not set; pass -D%s=value to sluice", key, key)
	case "":
		if raw, found := l.props[key]; found {
			if depth >= maxNesting {
				*probs = append(*probs, fmt.Sprintf("%s: property %s refers to properties nested too deeply (does it refer to itself?)", ref, key))
				return "", false
			}
			return javaTrim(l.expand(raw, x, depth+1)), true
		}
		if v, ok = l.Sys[key]; !ok {
			v, ok = l.env(key)
		}
		missing = fmt.Sprintf("%s is neither a property of the configuration, a system property (-D%s=value) nor an environment variable", key, key)
	default:
		*probs = append(*probs, fmt.Sprintf("%s: unknown lookup %q; use ${env:NAME}, ${sys:NAME} or ${NAME}", ref, kind))
		return "", false
	}
	if ok {
		return v, true
	}
	if hasDef {
		if depth < maxNesting {
			def = l.expand(def, x, depth+1)
		}
		return def, true
	}
	*probs = append(*probs, missing)
	return "", false
}

func (l Lookup) env(name string) (string, bool) {
	if l.Env == nil {
		return os.LookupEnv(name)
	}
	return l.Env(name)
}
