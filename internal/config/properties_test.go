package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unicode/utf16"
)

// propCases are tricky inputs with what java.util.Properties.load makes of
// them (checked with testdata/java/PropsDump.java; TestParsePropertiesMatchesJava
// checks them again whenever java is on the PATH). want lists key, value,
// line triples in file order.
var propCases = []struct {
	name string
	in   string
	want []Entry
	bad  []int // lines with a malformed \u escape
}{
	{"equals", "a=b\n", []Entry{{"a", "b", 1}}, nil},
	{"colon", "a:b", []Entry{{"a", "b", 1}}, nil},
	{"space separator", "a b", []Entry{{"a", "b", 1}}, nil},
	{"spaces around separator", "a \t\f = \t b c ", []Entry{{"a", "b c ", 1}}, nil},
	{"space then colon", "a   :   b", []Entry{{"a", "b", 1}}, nil},
	{"only one separator char is eaten", "a = = b", []Entry{{"a", "= b", 1}}, nil},
	{"second separator is value", "a=:b", []Entry{{"a", ":b", 1}}, nil},
	{"space sep then equals", "a =b", []Entry{{"a", "b", 1}}, nil},
	{"space sep then word", "a  b = c", []Entry{{"a", "b = c", 1}}, nil},
	{"key only", "a", []Entry{{"a", "", 1}}, nil},
	{"key and separator only", "a=", []Entry{{"a", "", 1}}, nil},
	{"empty key", "=b", []Entry{{"", "b", 1}}, nil},
	{"leading white space", "  \t\fa=b", []Entry{{"a", "b", 1}}, nil},
	{"comments", "# c\n! c\n  # c\na=b # not a comment\n", []Entry{{"a", "b # not a comment", 4}}, nil},
	{"hash in key", "a#b=c", []Entry{{"a#b", "c", 1}}, nil},
	{"blank lines", "\n\n  \t\n\na=b\n\n", []Entry{{"a", "b", 5}}, nil},
	{"escaped separators in key", `a\=b\:c\ d\#e\!f=v`, []Entry{{"a=b:c d#e!f", "v", 1}}, nil},
	{"escaped backslash before separator", `a\\=b`, []Entry{{`a\`, "b", 1}}, nil},
	{"escapes", `k=\t\n\r\f\\\b\x\"\'`, []Entry{{"k", "\t\n\r\f\\bx\"'", 1}}, nil},
	{"escaped leading space in value", `k=\  v`, []Entry{{"k", "  v", 1}}, nil},
	{"unicode escapes", `k\u00e9=\u65E5\u672c\u0041`, []Entry{{"ké", "日本A", 1}}, nil},
	{"surrogate pair", `k=\uD83D\uDE00`, []Entry{{"k", "😀", 1}}, nil},
	{"utf-8", "clé=valeur ü 日本 😀", []Entry{{"clé", "valeur ü 日本 😀", 1}}, nil},
	{"continuation", "k = a \\\n    b\\\n\tc\n", []Entry{{"k", "a bc", 1}}, nil},
	{"continuation in key", "ke\\\n  y = v", []Entry{{"key", "v", 1}}, nil},
	{"even backslashes do not continue", "a=b\\\\\nc=d", []Entry{{"a", `b\`, 1}, {"c", "d", 2}}, nil},
	{"three backslashes continue", "a=b\\\\\\\n c", []Entry{{"a", `b\c`, 1}}, nil},
	{"continuation onto a comment-like line", "a=b\\\n# c", []Entry{{"a", "b# c", 1}}, nil},
	{"continuation onto a blank line", "a=b\\\n\nc=d", []Entry{{"a", "b", 1}, {"c", "d", 3}}, nil},
	{"continuation onto white space", "a=b\\\n   \nc=d", []Entry{{"a", "b", 1}, {"c", "d", 3}}, nil},
	{"continuation at end of input", "a=b\\", []Entry{{"a", "b", 1}}, nil},
	{"continuation then end of input", "a=b\\\n", []Entry{{"a", "b", 1}}, nil},
	{"comment ending in backslash", "# c \\\na=b", []Entry{{"a", "b", 2}}, nil},
	{"lone backslash line then comment", "\\\n#a=b\nc=d", []Entry{{"c", "d", 3}}, nil},
	{"lone backslash line then key", "\\\n  a=b", []Entry{{"a", "b", 2}}, nil},
	{"lone backslash at end", "a=b\n\\", []Entry{{"a", "b", 1}, {"", "", 2}}, nil},
	{"CR line ends", "a=1\rb=2\r\rc=3", []Entry{{"a", "1", 1}, {"b", "2", 2}, {"c", "3", 4}}, nil},
	{"CRLF line ends", "a=1\r\nb=2\r\n\r\nc=3\r\n", []Entry{{"a", "1", 1}, {"b", "2", 2}, {"c", "3", 4}}, nil},
	{"CRLF continuation", "a=1\\\r\n  2\r\nb=3", []Entry{{"a", "12", 1}, {"b", "3", 3}}, nil},
	{"CR continuation", "a=1\\\r  2\rb=3", []Entry{{"a", "12", 1}, {"b", "3", 3}}, nil},
	{"last duplicate wins", "a=1\nb=2\na=3\n", []Entry{{"b", "2", 2}, {"a", "3", 3}}, nil},
	{"trailing white space kept", "a=b  \t", []Entry{{"a", "b  \t", 1}}, nil},
	{"byte order mark", "\uFEFFa=b", []Entry{{"a", "b", 1}}, nil},
	{"other white space is not a separator", "a\u00a0b=c", []Entry{{"a\u00a0b", "c", 1}}, nil},
	{"vertical tab is not white space", "\va=b", []Entry{{"\va", "b", 1}}, nil},
	{"malformed unicode in value", "a=1\nb=\\u12\nc=3", []Entry{{"a", "1", 1}, {"c", "3", 3}}, []int{2}},
	{"malformed unicode in key", `\u00g1=x`, nil, []int{1}},
	{"unicode escape cut by separator", `a\u00=e9`, nil, []int{1}},
	{"unicode escape at end", `a=\u`, nil, []int{1}},
	{"dollar and braces are plain", "a=${env:X}", []Entry{{"a", "${env:X}", 1}}, nil},
}

func TestParseProperties(t *testing.T) {
	for _, tc := range propCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProperties("t.properties", strings.NewReader(tc.in))
			if fmtEntries(got) != fmtEntries(tc.want) {
				t.Errorf("ParseProperties(%q)\n got %s\nwant %s", tc.in, fmtEntries(got), fmtEntries(tc.want))
			}
			var lines []int
			var ps *Problems
			if errors.As(err, &ps) {
				for _, p := range ps.Sorted() {
					lines = append(lines, p.Line)
					if p.File != "t.properties" || !strings.Contains(p.Msg, `\uXXXX`) {
						t.Errorf("problem %v", p)
					}
				}
			} else if err != nil {
				t.Fatalf("error %v is not a *Problems", err)
			}
			if fmt.Sprint(lines) != fmt.Sprint(tc.bad) {
				t.Errorf("problem lines %v, want %v (%v)", lines, tc.bad, err)
			}
		})
	}
}

func fmtEntries(es []Entry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "{%q %q %d}", e.Key, e.Value, e.Line)
	}
	return b.String()
}

func TestParsePropertiesLoneSurrogate(t *testing.T) {
	// Java keeps lone surrogates; a Go string cannot, so they become U+FFFD.
	got, err := ParseProperties("t", strings.NewReader(`a=\uD800x\uDC00\uD83D`))
	if err != nil || len(got) != 1 || got[0].Value != "\uFFFDx\uFFFD\uFFFD" {
		t.Fatalf("got %s, %v", fmtEntries(got), err)
	}
}

func TestParsePropertiesInvalidUTF8(t *testing.T) {
	got, err := ParseProperties("t", bytes.NewReader([]byte("a=\xff\xfeb\n")))
	if err != nil || len(got) != 1 || got[0].Value != "\uFFFD\uFFFDb" {
		t.Fatalf("got %s, %v", fmtEntries(got), err)
	}
}

// javaDump prints entries as testdata/java/PropsDump.java prints a Properties.
func javaDump(entries []Entry) string {
	esc := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			if r >= 0x20 && r < 0x7f && r != '\\' && r != '=' {
				b.WriteRune(r)
				continue
			}
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, "\\u%04X", u)
			}
		}
		return b.String()
	}
	sorted := append([]Entry(nil), entries...)
	// Java sorts by UTF-16 code units; compare the same way.
	sort.Slice(sorted, func(i, j int) bool {
		a, b := utf16.Encode([]rune(sorted[i].Key)), utf16.Encode([]rune(sorted[j].Key))
		for k := 0; k < len(a) && k < len(b); k++ {
			if a[k] != b[k] {
				return a[k] < b[k]
			}
		}
		return len(a) < len(b)
	})
	var b strings.Builder
	for _, e := range sorted {
		b.WriteString(esc(e.Key) + "=" + esc(e.Value) + "\n")
	}
	return b.String()
}

// TestParsePropertiesMatchesJava runs every table case and every testdata
// file through java.util.Properties (in one JVM) and compares. It needs
// java 11+ on the PATH and is skipped without it.
func TestParsePropertiesMatchesJava(t *testing.T) {
	java, err := exec.LookPath("java")
	if err != nil {
		t.Skip("java is not on the PATH")
	}
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	dir := t.TempDir()
	var files []string
	var inputs [][]byte
	for i, tc := range propCases {
		f := filepath.Join(dir, fmt.Sprintf("case%02d.properties", i))
		if err := os.WriteFile(f, []byte(tc.in), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		inputs = append(inputs, []byte(tc.in))
	}
	more, _ := filepath.Glob("testdata/*/*.properties")
	for _, f := range more {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		inputs = append(inputs, b)
	}
	cmd := exec.Command(java, append([]string{"testdata/java/PropsDump.java"}, files...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java: %v", err)
	}
	var want strings.Builder
	for i, f := range files {
		want.WriteString("== " + f + "\n")
		got, err := ParseProperties(f, bytes.NewReader(inputs[i]))
		if err != nil {
			want.WriteString("error: Malformed \\uxxxx encoding.\n")
			continue
		}
		want.WriteString(javaDump(got))
	}
	g, w := strings.Split(string(out), "\n"), strings.Split(want.String(), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Errorf("line %d: java says %q, sluice says %q", i+1, gl, wl)
		}
	}
}
