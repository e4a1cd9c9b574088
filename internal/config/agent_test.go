package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
			if err != nil && !errors.As(err, &ps) {
				t.Fatalf("got error %v, want *Problems", err)
			}
			if a == nil || err != nil && a.Problems != ps {
				t.Fatalf("Load must return the partial agent with its Problems")
			}
			if err == nil && a.Problems.Count(Warning) == 0 {
				t.Fatalf("no error and no warning")
			}
			var b strings.Builder
			for _, p := range a.Problems.Sorted() {
				b.WriteString(p.String() + "\n")
			}
			got := b.String()
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

const basic = `a1.sources = r1
a1.sinks = k1
a1.channels = c1
a1.sources.r1.type = netcat
a1.sources.r1.bind = localhost
a1.sources.r1.port = ${sys:port}
a1.sources.r1.channels = c1
a1.sinks.k1.type = logger
a1.sinks.k1.channel = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 1000
a1.channels.c1.transactionCapacity = 100
`

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flume.conf")
	conf := basic + "a1.channels.c1.keep-alive = ${env:SLUICE_CONFIG_TEST_KEEPALIVE}\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_CONFIG_TEST_KEEPALIVE", "7")
	a, err := Load(path, "a1", map[string]string{"port": "44444"})
	if err != nil {
		t.Fatal(err)
	}
	if a.File != path || a.Name != "a1" || len(a.Sources) != 1 || len(a.Channels) != 1 || len(a.Sinks) != 1 {
		t.Fatalf("agent %+v", a)
	}
	r1 := a.Sources[0]
	if r1.Kind != KindSource || r1.Name != "r1" || r1.Type != "netcat" || r1.TypeLine != 4 ||
		r1.Props.Prefix != "a1.sources.r1." || r1.Props.File != path || r1.Props.Line != 4 {
		t.Fatalf("source %+v", r1)
	}
	if got := r1.Props.Int("port", 0); got != 44444 {
		t.Errorf("port %d", got)
	}
	if got := a.Channels[0].Props.Int("keep-alive", 3); got != 7 {
		t.Errorf("keep-alive %d", got)
	}
	if got := a.Sinks[0].Channel; got != "c1" {
		t.Errorf("sink channel %q", got)
	}

	// Without the system property the problem names the file and line.
	_, err = Load(path, "a1", nil)
	if want := path + ":6: a1.sources.r1.port: system property port is not set; pass -Dport=value to sluice"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}

	a, err = Load(filepath.Join(t.TempDir(), "missing.conf"), "a1", nil)
	var ps *Problems
	if a != nil || err == nil || errors.As(err, &ps) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, %v", a, err)
	}
}

func TestLoadTrimsAndDropsEmptyValues(t *testing.T) {
	// Flume trims keys and values and ignores properties with empty values.
	conf := basic + "a1.sources.r1.bind = 127.0.0.1 \\t\n" + "a1.sources.r1.max-line-length =   \n" +
		"a1.sources.r1.ack-every-event = ${sys:empty}\n" + "a1.sinks.k1.maxBytesToLog\\t = 16\n"
	a, err := LoadReader("t", strings.NewReader(conf), "a1", Lookup{Sys: map[string]string{"port": "1", "empty": " "}})
	if err != nil {
		t.Fatal(err)
	}
	r1 := a.Sources[0].Props
	if got := r1.String("bind", ""); got != "127.0.0.1" {
		t.Errorf("bind %q", got)
	}
	if r1.Has("max-line-length") || r1.Has("ack-every-event") {
		t.Errorf("empty values kept: %q", r1.Keys(""))
	}
	if got := a.Sinks[0].Props.Int("maxBytesToLog", 0); got != 16 {
		t.Errorf("maxBytesToLog %d", got)
	}
}

// TestStructuralKeysMarkedUsed checks that Props.Unused, which the agent
// calls after a component's constructor, reports exactly the keys nothing
// read: never the ones the loader handled.
func TestStructuralKeysMarkedUsed(t *testing.T) {
	a, err := loadTestFile(t, "testdata/good/big.properties")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, list := range [][]*Component{a.Sources, a.Channels, a.Sinks} {
		for _, c := range list {
			c.Props.Unused()
		}
	}
	for _, g := range a.SinkGroups {
		g.Processor.Unused()
	}
	for _, p := range a.Problems.Sorted() {
		if strings.HasPrefix(p.Msg, "ignored: sluice does not read it") {
			got = append(got, p.Key)
		}
	}
	want := []string{
		"a1.sources.avroIn.bind", "a1.sources.avroIn.port",
		"a1.sources.avroIn.selector.header", "a1.sources.avroIn.selector.mapping.east", "a1.sources.avroIn.selector.mapping.west",
		"a1.sources.avroIn.selector.optional.west", "a1.sources.avroIn.selector.default",
		"a1.sources.avroIn.interceptors.host.hostHeader", "a1.sources.avroIn.interceptors.static.key", "a1.sources.avroIn.interceptors.static.value",
		"a1.sources.tail.selector.optional", "a1.sources.tail.filegroups", "a1.sources.tail.filegroups.f1",
		"a1.sources.tail.headers.f1.tag=name:x y", "a1.sources.tail.positionFile", "a1.sources.tail.batchSize", "a1.sources.tail.fileHeader",
		"a1.channels.fast.capacity", "a1.channels.fast.transactionCapacity",
		"a1.channels.durable.checkpointDir", "a1.channels.durable.dataDirs",
		"a1.sinks.out1.hostname", "a1.sinks.out2.hostname", "a1.sinks.out2.port",
		"a1.sinks.archive.sink.directory", "a1.sinks.archive.sink.pathManager.prefix", "a1.sinks.archive.channel.ignored",
		"a1.sinkgroups.g1.processor.priority.out1", "a1.sinkgroups.g1.processor.priority.out2", "a1.sinkgroups.g1.processor.maxpenalty",
		"a1.sinks.out1.port",
	}
	sort.Strings(got)
	sort.Strings(want)
	if g, w := got, want; strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Errorf("unused keys\n got %q\nwant %q", g, w)
	}
}

func TestFingerprint(t *testing.T) {
	load := func(conf string, sys map[string]string) *Agent {
		t.Helper()
		a, err := LoadReader("t", strings.NewReader(conf), "a1", Lookup{Sys: sys})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	fps := func(a *Agent) map[string]string {
		m := map[string]string{}
		for _, list := range [][]*Component{a.Sources, a.Channels, a.Sinks} {
			for _, c := range list {
				m[c.Kind+" "+c.Name] = c.Fingerprint()
			}
		}
		for _, g := range a.SinkGroups {
			m["group "+g.Name] = g.Fingerprint()
		}
		return m
	}
	groups := "a1.sinks = k1 k2\na1.sinks.k2.type = null\na1.sinks.k2.channel = c1\na1.sinkgroups = g1\n" +
		"a1.sinkgroups.g1.sinks = k1 k2\na1.sinkgroups.g1.processor.type = failover\n"
	base := fps(load(basic+groups, map[string]string{"port": "1"}))
	f := func(name, conf string, sys map[string]string, changed ...string) {
		t.Helper()
		got := fps(load(conf, sys))
		var diff []string
		for _, k := range sortedKeys(got) {
			if got[k] != base[k] {
				diff = append(diff, k)
			}
		}
		if strings.Join(diff, ",") != strings.Join(changed, ",") {
			t.Errorf("%s: changed %q, want %q", name, diff, changed)
		}
	}
	f("same", basic+groups, map[string]string{"port": "1"})
	f("moved lines and comments", "# moved\n\n"+groups+strings.Replace(basic, "a1.sinks = k1\n", "", 1), map[string]string{"port": "1"})
	f("value", strings.Replace(basic, "capacity = 1000", "capacity = 2000", 1)+groups, map[string]string{"port": "1"}, "channel c1")
	f("substituted value", basic+groups, map[string]string{"port": "2"}, "source r1")
	f("type", strings.Replace(basic, "type = logger", "type = null", 1)+groups, map[string]string{"port": "1"}, "sink k1")
	f("new property", basic+groups+"a1.sinks.k1.maxBytesToLog = 5\n", map[string]string{"port": "1"}, "sink k1")
	f("processor", basic+groups+"a1.sinkgroups.g1.processor.priority.k1 = 5\n", map[string]string{"port": "1"}, "group g1")
	f("group sinks", basic+strings.Replace(groups, "g1.sinks = k1 k2", "g1.sinks = k2 k1", 1), map[string]string{"port": "1"}, "group g1")

	// A property value cannot be confused with the next property.
	a := &Component{Type: "t", Props: NewProps("f", "p.", 0, map[string]Value{"a": {Text: "1\n\"b\"=2"}}, nil)}
	b := &Component{Type: "t", Props: NewProps("f", "p.", 0, map[string]Value{"a": {Text: "1"}, "b": {Text: "2"}}, nil)}
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("fingerprints collide")
	}
}
