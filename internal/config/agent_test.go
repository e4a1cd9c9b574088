package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.expected and testdata/good/*.golden")

// testLookup is the environment and system properties the testdata files see.
var testLookup = Lookup{
	Sys: map[string]string{"avro.port": "41414", "site": "eu-1"},
	Env: func(name string) (string, bool) {
		v, ok := map[string]string{"HOME": "/home/flume"}[name]
		return v, ok
	},
}

func loadTestFile(t *testing.T, path string) (*Agent, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return LoadReader(filepath.Base(path), f, "a1", testLookup)
}

// dumpAgent prints everything Load built, for the golden files.
func dumpAgent(a *Agent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent %s from %s\n", a.Name, a.File)
	props := func(indent string, p *Props) {
		for _, k := range p.Keys("") {
			v := p.vals[p.rel(k)]
			fmt.Fprintf(&b, "%s%s = %q (line %d)\n", indent, p.Full(k), v.Text, v.Line)
		}
	}
	for _, list := range [][]*Component{a.Sources, a.Channels, a.Sinks} {
		for _, c := range list {
			fmt.Fprintf(&b, "%s %s type %q (line %d)\n", c.Kind, c.Name, c.Type, c.TypeLine)
			if c.Kind == KindSource {
				fmt.Fprintf(&b, "  channels %q\n", c.Channels)
				for _, i := range c.Interceptors {
					fmt.Fprintf(&b, "  interceptor %s type %q, line %d, %d keys\n", i.Name, i.Type, i.Props.Line, len(i.Props.Keys("")))
				}
				fmt.Fprintf(&b, "  selector keys %q\n", c.Selector.Keys(""))
			}
			if c.Kind == KindSink {
				fmt.Fprintf(&b, "  channel %q\n", c.Channel)
			}
			props("  ", c.Props)
		}
	}
	for _, g := range a.SinkGroups {
		fmt.Fprintf(&b, "sinkgroup %s sinks %q (line %d)\n", g.Name, g.Sinks, g.Line)
		props("  ", g.Processor)
	}
	return b.String()
}

func TestLoadGood(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.properties")
	if len(files) == 0 {
		t.Fatal("no testdata/good files")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			a, err := loadTestFile(t, path)
			if err != nil {
				t.Fatalf("problems:\n%v", err)
			}
			got := dumpAgent(a)
			golden := strings.TrimSuffix(path, ".properties") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("agent differs from %s (run with -update to rewrite)\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

func TestLoadBad(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.properties")
	if len(files) == 0 {
		t.Fatal("no testdata/bad files")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			a, err := loadTestFile(t, path)
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("got error %v, want *Problems", err)
			}
			if a == nil || a.Problems != ps {
				t.Fatalf("Load must return the partial agent with its Problems")
			}
			got := err.Error() + "\n"
			expected := strings.TrimSuffix(path, ".properties") + ".expected"
			if *update {
				if err := os.WriteFile(expected, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(expected)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("problems differ from %s\ngot:\n%s\nwant:\n%s", expected, got, want)
			}
		})
	}
}
