package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// agentBin is the binary AgentBinary built in this test process.
var agentBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// AgentBinary returns the sluice binary that tests of the process (signals,
// exit codes, SIGKILL, real mounts) run: $SLUICE_AGENT_BIN when set (a build
// of other code, such as the commit before a change, to compare with), else
// cmd/sluice of this tree, built once per test process. A package whose
// tests call it deletes the build at the end with Main.
func AgentBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("SLUICE_AGENT_BIN"); bin != "" {
		return bin
	}
	agentBin.once.Do(func() {
		if agentBin.dir, agentBin.err = os.MkdirTemp("", "sluice-agent-bin-"); agentBin.err != nil {
			return
		}
		agentBin.path = filepath.Join(agentBin.dir, "sluice")
		t0 := time.Now()
		out, err := exec.Command("go", "build", "-o", agentBin.path, "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			agentBin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		t.Logf("go build: %v", time.Since(t0).Round(time.Millisecond))
	})
	if agentBin.err != nil {
		t.Fatal(agentBin.err)
	}
	return agentBin.path
}

// Main runs a package's tests, then deletes the binary AgentBinary built:
//
//	func TestMain(m *testing.M) { testutil.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if agentBin.dir != "" {
		_ = os.RemoveAll(agentBin.dir) // a temporary dir; the exit code is what counts
	}
	os.Exit(code)
}
