package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestSubstitute(t *testing.T) {
	lk := Lookup{
		Sys: map[string]string{"port": "4141", "both": "from-sys", "which": "HOST", "empty": ""},
		Env: func(name string) (string, bool) {
			v, ok := map[string]string{"HOST": "h1", "both": "from-env", "DIR": "/data", "port": "env-port"}[name]
			return v, ok
		},
	}
	f := func(in, want string, wantProbs ...string) {
		t.Helper()
		got, probs := lk.Substitute(in)
		if got != want {
			t.Errorf("Substitute(%q) = %q, want %q", in, got, want)
		}
		if fmt.Sprintf("%q", probs) != fmt.Sprintf("%q", wantProbs) {
			t.Errorf("Substitute(%q) problems %q, want %q", in, probs, wantProbs)
		}
	}
	f("plain", "plain")
	f("", "")
	f("${env:HOST}", "h1")
	f("${sys:port}", "4141")
	f("${env:port}", "env-port")
	f("${both}", "from-sys") // bare: system property first
	f("${DIR}/x", "/data/x") // then the environment
	f("${sys:empty}|", "|")  // set but empty is set
	f("a${env:HOST}b${sys:port}c${DIR}d", "ah1b4141c/datad")
	f("$${env:HOST}", "${env:HOST}")              // escaped
	f("$$${env:HOST}", "$${env:HOST}")            // an escape eats one '$'
	f("cost: $5 {x} $ {y}", "cost: $5 {x} $ {y}") // nothing to do
	f("${env:HOST", "${env:HOST")                 // unterminated: left alone
	f("x${", "x${")
	f("${env:${sys:which}}", "h1") // nested
	f("${env:NOPE:-fallback}", "fallback")
	f("${NOPE:-${env:HOST}-2}", "h1-2")
	f("${env:HOST:-fallback}", "h1")
	f("${NOPE:-}", "")
	f("${env:NOPE}", "${env:NOPE}", "environment variable NOPE is not set")
	f("${sys:nope}", "${sys:nope}", "system property nope is not set; pass -Dnope=value to sluice")
	f("${NOPE}", "${NOPE}", "NOPE is neither a property of the configuration, a system property (-DNOPE=value) nor an environment variable")
	f("${env:A} ${env:B}", "${env:A} ${env:B}", "environment variable A is not set", "environment variable B is not set")
	f("${}", "${}", "${} has no variable name")
	f("${sys:}", "${sys:}", "${sys:} has no variable name")
	f("${java:version}", "${java:version}", `${java:version}: unknown lookup "java"; use ${env:NAME}, ${sys:NAME} or ${NAME}`)
}

// TestSubstituteProperty: a bare ${NAME} reads the configuration's own
// property NAME first (Flume 1.10+; the user guide sets NC_PORT = 44444 in
// an override file), expanded in turn, then the system property, then the
// environment; a property that refers to itself is one problem, not a hang.
func TestSubstituteProperty(t *testing.T) {
	lk := Lookup{
		Sys:   map[string]string{"both": "from-sys", "port": "4141"},
		Env:   func(name string) (string, bool) { return map[string]string{"HOST": "h1"}[name], name == "HOST" },
		props: map[string]string{"both": " from-props ", "NC_PORT": "44444", "addr": "${HOST}:${NC_PORT}", "loop": "x${loop}", "a1.sources.r1.port": "${port}"},
	}
	for _, tt := range []struct{ in, want, prob string }{
		{"${NC_PORT}", "44444", ""},
		{"${both}", "from-props", ""}, // the property before the system property, trimmed as Flume trims values
		{"${addr}", "h1:44444", ""},   // expanded in turn
		{"${a1.sources.r1.port}", "4141", ""},
		{"${port}", "4141", ""},              // no such property: the system property
		{"${env:NC_PORT:-none}", "none", ""}, // env: and sys: do not read properties
		{"${loop}", "${loop}", "property loop refers to properties nested too deeply"},
	} {
		got, probs := lk.Substitute(tt.in)
		if got != tt.want && !(tt.prob != "" && len(probs) > 0) {
			t.Errorf("Substitute(%q) = %q, want %q", tt.in, got, tt.want)
		}
		switch {
		case tt.prob == "" && len(probs) > 0:
			t.Errorf("Substitute(%q) problems %q", tt.in, probs)
		case tt.prob != "" && (len(probs) != 1 || !strings.Contains(probs[0], tt.prob)):
			t.Errorf("Substitute(%q) problems %q, want one with %q", tt.in, probs, tt.prob)
		}
	}
}

func TestSubstituteDeepNesting(t *testing.T) {
	// Nesting deeper than maxNesting is not expanded but must not blow up.
	in := ""
	for range 50 {
		in += "${"
	}
	in += "x"
	for range 50 {
		in += "}"
	}
	got, probs := Lookup{Env: func(string) (string, bool) { return "", false }}.Substitute(in)
	if got != in || len(probs) == 0 {
		t.Fatalf("got %q, %q", got, probs)
	}
}
