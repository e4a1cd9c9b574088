package agent_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
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

// BenchmarkCheckManyWarnings validates a generated 1.5 MB configuration
// with 30,000 keys sluice does not read (issue 29: 15 MB and 308 k warnings
// took 6.6 s and 684 MB). What a load keeps of its problems is bounded
// (config.DefaultKeep of each kind), so memory grows with the file, not
// with the problems' text:
//
//	go test -run XXX -bench CheckManyWarnings -benchmem ./internal/agent/
func BenchmarkCheckManyWarnings(b *testing.B) {
	var conf strings.Builder
	conf.WriteString("a1.sources = r1\na1.channels = c1\na1.sinks = k1\n" +
		"a1.sources.r1.type = netcat\na1.sources.r1.bind = 127.0.0.1\na1.sources.r1.port = 44444\na1.sources.r1.channels = c1\n" +
		"a1.channels.c1.type = memory\na1.sinks.k1.type = logger\na1.sinks.k1.channel = c1\n")
	for i := range 30000 {
		c := [...]string{"a1.sources.r1", "a1.channels.c1", "a1.sinks.k1"}[i%3]
		fmt.Fprintf(&conf, "%s.someUnknownSetting%07d = value-%d\n", c, i, i)
	}
	file := filepath.Join(b.TempDir(), "big.properties")
	if err := os.WriteFile(file, []byte(conf.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(conf.Len()))
	for b.Loop() {
		probs, err := agent.Check(context.Background(), agent.Options{File: file, Name: "a1"})
		if err != nil || probs.Count(config.Warning) != 30000 {
			b.Fatalf("%v, %d warnings", err, probs.Count(config.Warning))
		}
	}
}
