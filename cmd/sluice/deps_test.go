package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent's binary links no test tools: franz-go's fake Kafka is built
// into a bench build only (go build -tags kfake), and the peers of other
// tests stay in their tests.
func TestBinaryLinksNoTestTools(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		ours := strings.HasPrefix(pkg, "github.com/sluicehq/sluice/")
		if pkg == "github.com/twmb/franz-go/pkg/kfake" || strings.HasPrefix(pkg, "github.com/chromedp/") ||
			ours && (strings.Contains(pkg, "testutil") || strings.HasSuffix(pkg, "test")) {
			t.Errorf("the sluice binary links %s", pkg)
		}
	}
}
