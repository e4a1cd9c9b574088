package pkgtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the sluice repository, two levels up from this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "package.sh")); err != nil {
		t.Fatalf("not in the sluice repository: %v", err)
	}
	return root
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (CI runs as root): it installs packages, changes users and chroots")
	}
}

// packageBuild runs scripts/package.sh for targets and arch amd64 into a
// new directory, with version, and returns that directory.
func packageBuild(t testing.TB, version, targets string) string {
	t.Helper()
	dist := t.TempDir()
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", "package.sh"))
	cmd.Env = append(os.Environ(), "VERSION="+version, "TARGETS="+targets, "ARCHES=amd64", "DIST="+dist)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("package.sh (%s): %v\n%s", targets, err, out)
	}
	t.Logf("package.sh VERSION=%s TARGETS=%q: %v", version, targets, time.Since(t0).Round(time.Millisecond))
	return dist
}

// run runs a command and returns its combined output, failing the test on
// an error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// toolBinary builds a tool of this module once per test process.
var tools sync.Map // name -> string path

func toolBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	if p, ok := tools.Load(name); ok {
		return p.(string)
	}
	dir, err := os.MkdirTemp("", "sluice-pkgtest-tool-")
	if err != nil {
		t.Fatal(err)
	}
	toolDirs = append(toolDirs, dir)
	path := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	tools.Store(name, path)
	return path
}

var toolDirs []string

// sluiceBinary builds the agent of this repository once per test process.
func sluiceBinary(t testing.TB) string {
	t.Helper()
	if p, ok := tools.Load("sluice"); ok {
		return p.(string)
	}
	dir, err := os.MkdirTemp("", "sluice-pkgtest-bin-")
	if err != nil {
		t.Fatal(err)
	}
	toolDirs = append(toolDirs, dir)
	path := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/sluice")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", err, out)
	}
	tools.Store("sluice", path)
	return path
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range toolDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// hostLock serialises the tests that change this machine (install the
// package, run as its user) across test processes: two suites running at
// once on one machine must not install and purge the package under each
// other.
func hostLock(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/run/lock/sluice-pkgtest.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		f, err = os.OpenFile(filepath.Join(os.TempDir(), "sluice-pkgtest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// envFile reads a systemd EnvironmentFile: KEY=VALUE lines, values
// optionally in double quotes, # comments.
func envFile(t testing.TB, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is no assignment", path, line)
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	return env
}

// unitValue returns the value of key in a unit file's [Service] section.
func unitValue(t testing.TB, unit, key string) string {
	t.Helper()
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return v
		}
	}
	t.Fatalf("the unit has no %s=", key)
	return ""
}

// execStartArgv expands ExecStart as systemd does with an EnvironmentFile:
// ${VAR} is one word, $VAR splits on white space.
func execStartArgv(line string, env map[string]string) []string {
	var argv []string
	for _, w := range strings.Fields(line) {
		switch {
		case strings.HasPrefix(w, "${") && strings.HasSuffix(w, "}"):
			argv = append(argv, env[w[2:len(w)-1]])
		case strings.HasPrefix(w, "$"):
			argv = append(argv, strings.Fields(env[w[1:]])...)
		default:
			argv = append(argv, w)
		}
	}
	return argv
}

// logBuffer is an io.Writer safe for a process's output and the test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitUntil(t testing.TB, what string, wait time.Duration, cond func() bool, log fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; log:\n%s", what, wait, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
