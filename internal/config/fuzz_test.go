package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func addSeeds(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.properties")
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, tc := range propCases {
		f.Add([]byte(tc.in))
	}
}

// storeProperties writes entries so that ParseProperties reads them back,
// escaping as java.util.Properties.store does.
func storeProperties(entries []Entry) []byte {
	esc := func(s string, isKey bool) string {
		var b strings.Builder
		for i, r := range s {
			switch r {
			case '\\':
				b.WriteString(`\\`)
			case '\t':
				b.WriteString(`\t`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\f':
				b.WriteString(`\f`)
			case '=', ':', '#', '!':
				b.WriteByte('\\')
				b.WriteRune(r)
			case ' ':
				if isKey || i == 0 {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			default:
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	var b bytes.Buffer
	for _, e := range entries {
		b.WriteString(esc(e.Key, true) + "=" + esc(e.Value, false) + "\n")
	}
	return b.Bytes()
}

// FuzzParseProperties checks that the parser never panics, that what it
// returns is well formed, and that writing the properties out and reading
// them back gives the same properties.
func FuzzParseProperties(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseProperties("f", bytes.NewReader(data))
		var ps *Problems
		if err != nil && !errors.As(err, &ps) {
			t.Fatalf("error %v is not a *Problems", err)
		}
		maxLine := bytes.Count(data, []byte("\n")) + bytes.Count(data, []byte("\r")) + 1
		seen := map[string]bool{}
		prev := 0
		for _, e := range entries {
			if seen[e.Key] {
				t.Fatalf("key %q returned twice", e.Key)
			}
			seen[e.Key] = true
			if e.Line <= prev || e.Line > maxLine {
				t.Fatalf("line %d after %d (max %d)", e.Line, prev, maxLine)
			}
			prev = e.Line
		}
		if ps != nil {
			for _, p := range ps.Sorted() {
				if p.File != "f" || p.Line < 1 || p.Line > maxLine {
					t.Fatalf("bad problem %v", p)
				}
			}
		}

		out := storeProperties(entries)
		again, err := ParseProperties("f", bytes.NewReader(out))
		if err != nil {
			t.Fatalf("re-reading %q: %v", out, err)
		}
		if len(again) != len(entries) {
			t.Fatalf("wrote %d properties, read %d back from %q", len(entries), len(again), out)
		}
		for i, e := range entries {
			if again[i].Key != e.Key || again[i].Value != e.Value || again[i].Line != i+1 {
				t.Fatalf("wrote %q=%q, read %q=%q at line %d", e.Key, e.Value, again[i].Key, again[i].Value, again[i].Line)
			}
		}
	})
}

// FuzzLoad checks that loading never panics and that every problem is
// located in the file, and that a loaded agent can be fingerprinted.
func FuzzLoad(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := LoadReader("f", bytes.NewReader(data), "a1", testLookup)
		if a == nil {
			t.Fatalf("no agent, error %v", err)
		}
		var ps *Problems
		if err != nil {
			if !errors.As(err, &ps) || ps != a.Problems {
				t.Fatalf("error %v is not the agent's *Problems", err)
			}
			for _, p := range ps.Sorted() {
				if p.File != "f" || p.Line < 0 || p.Key == "" || p.Msg == "" {
					t.Fatalf("bad problem %#v", p)
				}
			}
		}
		for _, list := range [][]*Component{a.Sources, a.Channels, a.Sinks} {
			for _, c := range list {
				if c.Type == "" || c.Props == nil {
					t.Fatalf("component %+v", c)
				}
				_ = c.Fingerprint()
				c.Props.Unused()
			}
		}
		for _, g := range a.SinkGroups {
			_ = g.Fingerprint()
			g.Processor.Unused()
		}
	})
}
