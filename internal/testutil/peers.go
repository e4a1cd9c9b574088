package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PeerBinary finds the program name, a real peer that tests talk to (a
// server sluice delivers to): $env when set, then PATH, then $(go env
// GOPATH)/bin, where scripts/test.sh installs it with install. When it is
// missing the test fails under CI and is skipped elsewhere.
func PeerBinary(t testing.TB, name, env, install string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", name)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	msg := name + " not found ($" + env + ", PATH, $(go env GOPATH)/bin); install it with " + install + " (scripts/test.sh does)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
