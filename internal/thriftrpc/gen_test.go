package thriftrpc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestGeneratedCodeIsCurrent regenerates package flume from flume.thrift
// with the commands in gen.go and compares it with the committed code, so
// the code cannot drift from the IDL. It needs the thrift compiler of the
// version that generated the committed code (Debian's 0.17.0, installed by
// scripts/test.sh); another version only logs.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	thriftBin := testutil.SystemTool(t, "thrift", "thrift-compiler")
	committed, err := os.ReadFile(filepath.Join("flume", "flume.go"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(thriftBin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Thrift version"))
	if !strings.Contains(string(committed), "Thrift Compiler ("+version+")") {
		t.Skipf("thrift %s differs from the compiler that generated package flume; compare by hand", version)
	}
	dir := t.TempDir()
	gen := exec.Command(thriftBin, "--gen", "go:package_prefix=github.com/sluicehq/sluice/internal/thriftrpc/,skip_remote", "-out", dir, "flume.thrift")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("thrift: %v\n%s", err, out)
	}
	if out, err := exec.Command("gofmt", "-w", filepath.Join(dir, "flume")).CombinedOutput(); err != nil {
		t.Fatalf("gofmt: %v\n%s", err, out)
	}
	want, _ := filepath.Glob(filepath.Join(dir, "flume", "*.go"))
	have, _ := filepath.Glob(filepath.Join("flume", "*.go"))
	if len(want) != len(have) {
		t.Fatalf("generated files %v, committed %v", want, have)
	}
	for _, w := range want {
		a, _ := os.ReadFile(w)
		b, err := os.ReadFile(filepath.Join("flume", filepath.Base(w)))
		if err != nil || string(a) != string(b) {
			t.Errorf("flume/%s differs from what flume.thrift generates (%v); run go generate ./internal/thriftrpc", filepath.Base(w), err)
		}
	}
}
