package testutil

import (
	"os"
	"testing"
)

// WriteFile writes content to path (mode 0644), failing the test when it
// cannot.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
