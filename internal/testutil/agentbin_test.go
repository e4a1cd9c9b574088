package testutil

import (
	"testing"
)

// SLUICE_AGENT_BIN runs the process tests against another build, without
// building this one.
func TestAgentBinaryFromEnvironment(t *testing.T) {
	t.Setenv("SLUICE_AGENT_BIN", "/opt/older/sluice")
	if got := AgentBinary(t); got != "/opt/older/sluice" {
		t.Fatalf("AgentBinary = %q, want $SLUICE_AGENT_BIN", got)
	}
	agentBins.mu.Lock()
	defer agentBins.mu.Unlock()
	if len(agentBins.builds) > 0 {
		t.Fatal("AgentBinary built a binary although SLUICE_AGENT_BIN is set")
	}
}
