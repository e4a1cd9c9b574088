package interceptor

// TestTransformDocs runs every example of docs/transforms.md through the
// real agent binary: the reference table of expressions, and each porting
// example's configuration with its input files and expected output files.
// The examples are parsed out of the page, so the page and the test cannot
// drift apart.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const transformsDoc = "../../docs/transforms.md"

// docExample is one example of the page: a configuration, the files it
// reads and the files its sinks must write.
type docExample struct {
	name    string
	config  string
	inputs  map[string]string // path -> content
	outputs map[string]string // glob -> lines
}

// fence is one fenced code block: its info string and its text.
type fence struct{ info, text, before string }

// fences returns the fenced blocks of md, each with the text before it
// (since the previous block).
func fences(md string) []fence {
	var out []fence
	lines := strings.Split(md, "\n")
	var cur *fence
	var before []string
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			if cur == nil {
				cur = &fence{info: strings.TrimSpace(strings.TrimPrefix(l, "```")), before: strings.Join(before, "\n")}
				before = nil
				continue
			}
			out = append(out, *cur)
			cur = nil
			continue
		}
		if cur != nil {
			cur.text += l + "\n"
		} else {
			before = append(before, l)
		}
	}
	return out
}

var exampleMark = regexp.MustCompile(`<!-- example: (\S+) -->`)

func parseExamples(t *testing.T, md string) []*docExample {
	var out []*docExample
	var cur *docExample
	for _, f := range fences(md) {
		if m := exampleMark.FindStringSubmatch(f.before); m != nil {
			cur = &docExample{name: m[1], inputs: map[string]string{}, outputs: map[string]string{}}
			out = append(out, cur)
		} else if strings.Contains(f.before, "\n## ") || strings.Contains(f.before, "\n### ") {
			cur = nil // a block of another section
		}
		if cur == nil {
			continue
		}
		switch fields := strings.Fields(f.info); {
		case len(fields) == 1 && fields[0] == "properties":
			cur.config = f.text
		case len(fields) == 2 && strings.HasPrefix(fields[1], "input="):
			cur.inputs[strings.TrimPrefix(fields[1], "input=")] = f.text
		case len(fields) == 2 && strings.HasPrefix(fields[1], "output="):
			cur.outputs[strings.TrimPrefix(fields[1], "output=")] = f.text
		default:
			t.Fatalf("example %s: a block %q the test does not know", cur.name, f.info)
		}
	}
	return out
}

// varPath matches a property whose value is an absolute path under /var:
// those the test moves into its temporary directory.
var varPath = regexp.MustCompile(`(?m)^(\S+\s*=\s*)(/var/\S*)$`)

func TestTransformDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent binary")
	}
	md, err := os.ReadFile(transformsDoc)
	if err != nil {
		t.Fatal(err)
	}
	examples := parseExamples(t, string(md))
	var names []string
	for _, ex := range examples {
		names = append(names, ex.name)
	}
	want := []string{"midnight", "lift", "drop", "mask", "filepath", "severity"}
	if !slices.Equal(names, want) {
		t.Fatalf("examples %v, want %v", names, want)
	}
	bin := testutil.AgentBinary(t)
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			runExample(t, bin, ex)
		})
	}
	t.Run("reference", func(t *testing.T) {
		t.Parallel()
		runReference(t, bin, string(md))
	})
}

// runExample runs ex's configuration with its /var paths moved under a
// temporary directory, and waits for its outputs.
func runExample(t *testing.T, bin string, ex *docExample) {
	root := t.TempDir()
	conf := varPath.ReplaceAllStringFunc(ex.config, func(l string) string {
		m := varPath.FindStringSubmatch(l)
		p := root + m[2]
		// Create the directories the configuration names, up to the
		// first element that is a pattern (%Y, a regex) or a file.
		dir := p
		if i := strings.IndexAny(dir, `%*\[(`); i >= 0 {
			dir = filepath.Dir(dir[:i])
		} else if strings.Contains(filepath.Base(dir), ".") {
			dir = filepath.Dir(dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return m[1] + p
	})
	for path, content := range ex.inputs {
		p := root + path
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outputs := map[string]string{}
	for glob, lines := range ex.outputs {
		outputs[root+glob] = lines
	}
	runAgent(t, bin, root, conf, func() string { return compareOutputs(outputs) })
}

// compareOutputs returns "" when every glob's files hold exactly the
// expected lines (in any order), else what differs.
func compareOutputs(outputs map[string]string) string {
	var diffs []string
	for glob, want := range outputs {
		files, _ := filepath.Glob(glob)
		var got []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			got = append(got, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
		}
		got = slices.DeleteFunc(got, func(s string) bool { return s == "" })
		w := strings.Split(strings.TrimSuffix(want, "\n"), "\n")
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			diffs = append(diffs, fmt.Sprintf("%s:\n  got  %q\n  want %q", glob, got, w))
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "\n")
}

// runAgent runs the agent on conf until check returns "", then stops it
// with SIGTERM and checks again.
func runAgent(t *testing.T, bin, dir, conf string, check func() string) {
	t.Helper()
	file := filepath.Join(dir, "agent.properties")
	testutil.WriteFile(t, file, conf)
	cmd := testutil.AgentCommand(bin, file)
	cmd.Env = append(os.Environ(), "TZ=UTC")
	cmd.Dir = dir // relative paths (the hdfs sink's staging directory) stay in the test's directory
	p := testutil.RunAgent(t, cmd)
	diff := "not checked"
	testutil.Eventually(func() bool {
		if !p.Running() {
			t.Fatalf("the agent exited: %v", p.Err())
		}
		diff = check()
		return diff == ""
	}, 60*time.Second)
	p.Stop(30 * time.Second)
	if diff == "" {
		diff = check()
	}
	if diff != "" {
		t.Fatalf("outputs differ:\n%s\nconfig:\n%s", diff, conf)
	}
}

var (
	refRow    = regexp.MustCompile("^\\| (``? .*? ``?|`[^`]*`) \\| (.*) \\|$")
	refHeader = regexp.MustCompile("`([^`=]+)=([^`]*)`")
)

// runReference evaluates every row of the reference table on the reference
// event, in one agent: a first transform sets the event's headers, a second
// sets header rN to row N's expression, a third writes the headers as the
// body, in JSON.
func runReference(t *testing.T, bin, md string) {
	_, after, ok := strings.Cut(md, "<!-- reference event")
	if !ok {
		t.Fatal("no reference event")
	}
	fs := fences(after)
	body := strings.TrimSpace(fs[0].text)
	_, headerLine, _ := strings.Cut(after, "\nwith the headers ")
	headerLine, _, _ = strings.Cut(headerLine, "\n")
	headers := refHeader.FindAllStringSubmatch(headerLine, -1)
	if len(headers) != 3 {
		t.Fatalf("reference headers %q", headerLine)
	}
	_, table, _ := strings.Cut(after, "<!-- reference -->")
	table, _, _ = strings.Cut(table, "<!-- /reference -->")
	type row struct{ expr, want string }
	var rows []row
	for _, l := range strings.Split(table, "\n") {
		m := refRow.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		expr := strings.TrimSpace(strings.Trim(m[1], "`"))
		want := strings.TrimSpace(m[2])
		switch want {
		case "nil":
			want = "<nil>"
		case "(empty)":
			want = ""
		default:
			want = strings.TrimSpace(strings.Trim(want, "`"))
		}
		rows = append(rows, row{expr, want})
	}
	if len(rows) < 30 {
		t.Fatalf("%d reference rows parsed", len(rows))
	}
	root := t.TempDir()
	spool, out := filepath.Join(root, "spool"), filepath.Join(root, "out")
	for _, d := range []string{spool, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(spool, "event.log"), []byte(body+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, `a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = spooldir
a1.sources.r1.spoolDir = %s
a1.sources.r1.channels = c1
a1.sources.r1.interceptors = event ref out
a1.sources.r1.interceptors.event.type = transform
a1.sources.r1.interceptors.ref.type = transform
a1.sources.r1.interceptors.out.type = transform
a1.sources.r1.interceptors.out.body = toJSON(headers)
a1.channels.c1.type = memory
a1.sinks.k1.type = file_roll
a1.sinks.k1.channel = c1
a1.sinks.k1.sink.directory = %s
`, spool, out)
	for _, h := range headers {
		fmt.Fprintf(&conf, "a1.sources.r1.interceptors.event.set.%s = %q\n", h[1], h[2])
	}
	for i, r := range rows {
		fmt.Fprintf(&conf, "a1.sources.r1.interceptors.ref.set.r%02d = %s\n", i, r.expr)
	}
	var got map[string]string
	runAgent(t, bin, root, conf.String(), func() string {
		files, _ := filepath.Glob(filepath.Join(out, "*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if len(b) > 0 && json.Unmarshal(b, &got) == nil {
				return ""
			}
		}
		return "no output yet"
	})
	for i, r := range rows {
		v, ok := got[fmt.Sprintf("r%02d", i)]
		if !ok {
			v = "<nil>"
		}
		if v != r.want {
			t.Errorf("%s gives %q, the page says %q", r.expr, v, r.want)
		}
	}
}
