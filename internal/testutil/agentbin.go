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

// agentBuild is one build of the agent binary in this test process.
type agentBuild struct {
	once sync.Once
	path string
	err  error
}

// agentBins holds the builds of this test process, by build tags, in dir.
var agentBins struct {
	mu     sync.Mutex
	dir    string
	builds map[string]*agentBuild
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
	return buildAgent(t, "")
}

// AgentBinaryWithFaults is AgentBinary built with the build tag
// sluice_faulty, which adds the components of package testutil/faulty
// (type faulty_panic: they panic on purpose). $SLUICE_AGENT_BIN_FAULTY
// overrides it.
func AgentBinaryWithFaults(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("SLUICE_AGENT_BIN_FAULTY"); bin != "" {
		return bin
	}
	return buildAgent(t, "sluice_faulty")
}

func buildAgent(t testing.TB, tags string) string {
	t.Helper()
	agentBins.mu.Lock()
	if agentBins.builds == nil {
		agentBins.builds = map[string]*agentBuild{}
	}
	b := agentBins.builds[tags]
	if b == nil {
		b = &agentBuild{}
		agentBins.builds[tags] = b
	}
	agentBins.mu.Unlock()
	b.once.Do(func() {
		agentBins.mu.Lock()
		if agentBins.dir == "" {
			agentBins.dir, b.err = os.MkdirTemp("", "sluice-agent-bin-")
		}
		dir := agentBins.dir
		agentBins.mu.Unlock()
		if b.err != nil {
			return
		}
		name := "sluice"
		if tags != "" {
			name += "-" + tags
		}
		b.path = filepath.Join(dir, name)
		t0 := time.Now()
		out, err := exec.Command("go", "build", "-tags", tags, "-o", b.path, "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build -tags %q: %v\n%s", tags, err, out)
			return
		}
		t.Logf("go build -tags %q: %v", tags, time.Since(t0).Round(time.Millisecond))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Main runs a package's tests, then deletes the binaries AgentBinary and
// AgentBinaryWithFaults built:
//
//	func TestMain(m *testing.M) { testutil.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if agentBins.dir != "" {
		_ = os.RemoveAll(agentBins.dir) // a temporary dir; the exit code is what counts
	}
	os.Exit(code)
}
