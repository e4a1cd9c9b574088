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

// SystemTool finds the program name that a Debian package installs (a
// real peer or tool a test runs: logger, logrotate, thrift, krb5kdc): PATH,
// then /usr/sbin and /sbin, which a non-root PATH may leave out. When it is
// missing the test fails under CI, where scripts/test.sh installs debPackage,
// and is skipped elsewhere.
func SystemTool(t testing.TB, name, debPackage string) string {
	t.Helper()
	if p, err := LookSystemTool(name); err == nil {
		return p
	}
	msg := name + " not found (PATH, /usr/sbin, /sbin); install Debian's " + debPackage + " (scripts/test.sh does)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// LookSystemTool is SystemTool's search without the test's verdict, for a
// caller that decides itself what a missing tool means.
func LookSystemTool(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if st, serr := os.Stat(filepath.Join(dir, name)); serr == nil && !st.IsDir() {
			return filepath.Join(dir, name), nil
		}
	}
	return "", err
}
