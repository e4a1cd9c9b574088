package agent_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/config"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.expected from the current output")

// TestValidateBad checks every bad config against the exact lines validate
// prints (file base name, line, key, message), errors, warnings and notes,
// in its .expected file.
func TestValidateBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.properties")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad configs: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			probs, err := agent.Check(context.Background(), agent.Options{File: file, Name: "a1"})
			var ps *config.Problems
			if err != nil && !errors.As(err, &ps) {
				t.Fatalf("Check = %v, want problems", err)
			}
			if len(probs.Sorted()) == 0 {
				t.Fatal("no problem found")
			}
			var got strings.Builder
			for _, p := range probs.Sorted() {
				p.File = filepath.Base(p.File)
				got.WriteString(p.String() + "\n")
			}
			want := strings.TrimSuffix(file, ".properties") + ".expected"
			if *update {
				if err := os.WriteFile(want, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			exp, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != string(exp) {
				t.Errorf("problems:\n%s\nwant:\n%s", got.String(), exp)
			}
		})
	}
}

func TestValidateGood(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.properties")
	files = append(files, "../../examples/quickstart.properties")
	for _, file := range files {
		if err := agent.Validate(file, "a1", nil); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}
