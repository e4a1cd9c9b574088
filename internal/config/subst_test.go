package config

import (
	"fmt"
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
	f("${NOPE}", "${NOPE}", "NOPE is neither a system property (-DNOPE=value) nor an environment variable")
	f("${env:A} ${env:B}", "${env:A} ${env:B}", "environment variable A is not set", "environment variable B is not set")
	f("${}", "${}", "${} has no variable name")
	f("${sys:}", "${sys:}", "${sys:} has no variable name")
	f("${java:version}", "${java:version}", `${java:version}: unknown lookup "java"; use ${env:NAME}, ${sys:NAME} or ${NAME}`)
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
