package interceptor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/metrics"
)

func bodies(events []event.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = string(e.Body)
	}
	return out
}

func TestRegexFilter(t *testing.T) {
	in := []string{"ERROR disk", "INFO ok", "error lower", "WARN ERROR late", ""}
	tests := []struct {
		name  string
		props map[string]string
		want  []string
	}{
		{"default keeps all", nil, in},
		{"include", map[string]string{"regex": "ERROR"}, []string{"ERROR disk", "WARN ERROR late"}},
		{"include anchored", map[string]string{"regex": "^ERROR"}, []string{"ERROR disk"}},
		{"exclude", map[string]string{"regex": "ERROR", "excludeEvents": "true"}, []string{"INFO ok", "error lower", ""}},
		{"case-insensitive flag", map[string]string{"regex": "(?i)error"}, []string{"ERROR disk", "error lower", "WARN ERROR late"}},
		{"exclude all", map[string]string{"regex": ".*", "excludeEvents": "true"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := metrics.NewRegistry("a1")
			p := config.FromMap(prefix, tt.props)
			ic, _ := NewRegexFilter(testEnvWith(reg), p)
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			events := make([]event.Event, len(in))
			for i, b := range in {
				events[i] = ev(b, "n", b)
			}
			out := ic.Intercept(events)
			if got := bodies(out); !slices.Equal(got, tt.want) {
				t.Fatalf("kept %q, want %q", got, tt.want)
			}
			for _, e := range out {
				if e.Headers.Value("n") != string(e.Body) {
					t.Fatalf("event headers do not travel with the body: %v", e)
				}
			}
			if len(out) > 0 && &out[0] != &events[0] {
				t.Error("filter did not reuse the batch's backing array")
			}
			for _, e := range events[len(out):] {
				if e.Body != nil || e.Headers != nil {
					t.Errorf("dropped slot not cleared: %v", e)
				}
			}
			if got, want := counterValue(t, reg, "r1.i1", "filtered"), float64(len(in)-len(tt.want)); got != want {
				t.Errorf("dropped counter = %v, want %v", got, want)
			}
		})
	}
}

func testEnvWith(reg *metrics.Registry) (env flowEnv) {
	env = testEnv()
	env.Metrics = reg
	return env
}

func TestRegexBadConfigs(t *testing.T) {
	tests := []struct {
		name  string
		f     func(flowEnv, *config.Props) (flowInterceptor, error)
		props map[string]string
		wants []string
	}{
		{"filter invalid", NewRegexFilter, map[string]string{"regex": "a(b"}, []string{prefix + "regex", `"a(b" is not a valid regular expression`, "missing closing )"}},
		{"filter lookahead", NewRegexFilter, map[string]string{"regex": "foo(?!bar)"}, []string{prefix + "regex", "lookahead (?!...)", "RE2"}},
		{"filter lookbehind", NewRegexFilter, map[string]string{"regex": "(?<=a)b"}, []string{"lookbehind (?<=...)", "RE2"}},
		{"filter backreference", NewRegexFilter, map[string]string{"regex": `(a)\1`}, []string{`the backreference \1`, "RE2"}},
		{"filter possessive", NewRegexFilter, map[string]string{"regex": `a*+b`}, []string{"possessive quantifier *+", "RE2"}},
		{"filter atomic", NewRegexFilter, map[string]string{"regex": `(?>ab)`}, []string{"atomic group", "RE2"}},
		{"filter java class", NewRegexFilter, map[string]string{"regex": `\p{Alpha}+`}, []string{`Java character class \p{Alpha}`, "[[:alpha:]]"}},
		{"filter java escape", NewRegexFilter, map[string]string{"regex": `a\Z`}, []string{`the escape \Z`, "RE2"}},
		{"filter bad bool", NewRegexFilter, map[string]string{"excludeEvents": "ja"}, []string{prefix + "excludeEvents", "not a boolean"}},
		{"extractor missing regex", NewRegexExtractor, map[string]string{"serializers": "s1", "serializers.s1.name": "a"}, []string{prefix + "regex", "missing required property"}},
		{"extractor missing serializers", NewRegexExtractor, map[string]string{"regex": "(a)"}, []string{prefix + "serializers", "missing required property"}},
		{"extractor missing name", NewRegexExtractor, map[string]string{"regex": "(a)", "serializers": "s1"}, []string{prefix + "serializers.s1.name", "missing required property", "group 1"}},
		{"extractor unknown type", NewRegexExtractor, map[string]string{"regex": "(a)", "serializers": "s1", "serializers.s1.name": "a", "serializers.s1.type": "com.example.Mine"}, []string{prefix + "serializers.s1.type", `"com.example.Mine" is not a serializer`}},
		{"extractor millis without pattern", NewRegexExtractor, map[string]string{"regex": "(a)", "serializers": "s1", "serializers.s1.name": "a", "serializers.s1.type": millisSerializer}, []string{prefix + "serializers.s1.pattern", "missing required property"}},
		{"extractor millis bad letter", NewRegexExtractor, map[string]string{"regex": "(a)", "serializers": "s1", "serializers.s1.name": "a", "serializers.s1.type": millisSerializer, "serializers.s1.pattern": "yyyy-DDD"}, []string{prefix + "serializers.s1.pattern", "letters DDD are not supported"}},
		{"extractor pattern on default type", NewRegexExtractor, map[string]string{"regex": "(a)", "serializers": "s1", "serializers.s1.name": "a", "serializers.s1.pattern": "yyyy"}, []string{prefix + "serializers.s1.pattern", "ignored: sluice does not read it"}},
		{"extractor unsupported", NewRegexExtractor, map[string]string{"regex": `(\w+)(?=:)`, "serializers": "s1", "serializers.s1.name": "a"}, []string{"lookahead", "RE2"}},
		{"replace missing pattern", NewSearchReplace, map[string]string{"replaceString": "x"}, []string{prefix + "searchPattern", "missing required property"}},
		{"replace lookbehind", NewSearchReplace, map[string]string{"searchPattern": "(?<!a)b"}, []string{prefix + "searchPattern", "lookbehind", "RE2"}},
		{"replace no such group", NewSearchReplace, map[string]string{"searchPattern": "(a)", "replaceString": "$2"}, []string{prefix + "replaceString", "$2 refers to group 2 but searchPattern has 1"}},
		{"replace dangling dollar", NewSearchReplace, map[string]string{"searchPattern": "a", "replaceString": "cost $"}, []string{prefix + "replaceString", `write \$ for a dollar sign`}},
		{"replace dollar letter", NewSearchReplace, map[string]string{"searchPattern": "a", "replaceString": "$x"}, []string{"$x is not a group reference"}},
		{"replace dangling backslash", NewSearchReplace, map[string]string{"searchPattern": "a", "replaceString": `b\`}, []string{`the final \ escapes nothing`}},
		{"replace unknown name", NewSearchReplace, map[string]string{"searchPattern": "(?<x>a)", "replaceString": "${y}"}, []string{"no group named y"}},
		{"replace unclosed name", NewSearchReplace, map[string]string{"searchPattern": "(?<x>a)", "replaceString": "${x"}, []string{"${x is missing its closing }"}},
		{"replace charset", NewSearchReplace, map[string]string{"searchPattern": "a", "charset": "EBCDIC"}, []string{prefix + "charset", `"EBCDIC" is not a supported charset`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantContains(t, buildErr(t, tt.f, tt.props), tt.wants...)
		})
	}
}

func TestRegexExtractor(t *testing.T) {
	local := func(s string) string {
		tm, err := time.ParseInLocation("2006-01-02 15:04:05.000", s, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return itoa(tm.UnixMilli())
	}
	tests := []struct {
		name  string
		props map[string]string
		in    event.Event
		want  map[string]string
	}{
		{
			"groups to headers", map[string]string{
				"regex": `(\d):(\d):(\d)`, "serializers": "s1 s2 s3",
				"serializers.s1.name": "one", "serializers.s2.name": "two", "serializers.s3.name": "three",
			},
			ev("x 1:2:3 y"), hdrs("one", "1", "two", "2", "three", "3"),
		},
		{
			"first match only", map[string]string{"regex": `(\d)`, "serializers": "s1", "serializers.s1.name": "d"},
			ev("a7b8", "k", "v"), hdrs("k", "v", "d", "7"),
		},
		{
			"more groups than serializers", map[string]string{"regex": `(\d):(\d):(\d)`, "serializers": "s1", "serializers.s1.name": "one"},
			ev("1:2:3"), hdrs("one", "1"),
		},
		{
			"more serializers than groups", map[string]string{"regex": `(\d)`, "serializers": "s1 s2", "serializers.s1.name": "one", "serializers.s2.name": "two"},
			ev("5"), hdrs("one", "5"),
		},
		{
			"no match leaves headers", map[string]string{"regex": `(\d)`, "serializers": "s1", "serializers.s1.name": "d"},
			ev("none"), nil,
		},
		{
			"overwrites existing", map[string]string{"regex": `(\d)`, "serializers": "s1", "serializers.s1.name": "d"},
			ev("4", "d", "old"), hdrs("d", "4"),
		},
		{
			"optional group absent", map[string]string{"regex": `(a)?(b)`, "serializers": "s1 s2", "serializers.s1.name": "A", "serializers.s2.name": "B"},
			ev("b"), hdrs("B", "b"),
		},
		{
			"DEFAULT and pass-through class", map[string]string{
				"regex": `(\w+) (\w+)`, "serializers": "s1 s2",
				"serializers.s1.name": "a", "serializers.s1.type": "DEFAULT",
				"serializers.s2.name": "b", "serializers.s2.type": passThroughSerializer,
			},
			ev("hello world"), hdrs("a", "hello", "b", "world"),
		},
		{
			"millis serializer", map[string]string{
				"regex": `^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (\w+)`, "serializers": "ts lvl",
				"serializers.ts.name": "timestamp", "serializers.ts.type": millisSerializer, "serializers.ts.pattern": "yyyy-MM-dd HH:mm:ss.SSS",
				"serializers.lvl.name": "level",
			},
			ev("2024-03-05 17:04:09.250 WARN disk"), hdrs("timestamp", local("2024-03-05 17:04:09.250"), "level", "WARN"),
		},
		{
			"millis serializer with offset", map[string]string{
				"regex": `\[(.+?)\]`, "serializers": "ts",
				"serializers.ts.name": "timestamp", "serializers.ts.type": millisSerializer, "serializers.ts.pattern": "dd/MMM/yyyy:HH:mm:ss Z",
			},
			ev(`127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /"`), hdrs("timestamp", "971211336000"),
		},
		{
			"millis serializer bad value sets nothing", map[string]string{
				"regex": `(\S+) (\S+)`, "serializers": "ts w",
				"serializers.ts.name": "timestamp", "serializers.ts.type": millisSerializer, "serializers.ts.pattern": "yyyy-MM-dd",
				"serializers.w.name": "w",
			},
			ev("2024-13-45 x"), hdrs("w", "x"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := build(t, NewRegexExtractor, tt.props).Intercept([]event.Event{tt.in})
			if len(out) != 1 {
				t.Fatalf("got %d events", len(out))
			}
			if tt.want == nil {
				if out[0].Headers != nil {
					t.Fatalf("headers %v, want a nil map", out[0].Headers)
				}
				return
			}
			if !sameHeaders(out[0].Headers, tt.want) {
				t.Fatalf("headers %v, want %v", out[0].Headers, tt.want)
			}
		})
	}
}

func TestSearchReplace(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		in    string
		want  string
	}{
		{"delete by default", map[string]string{"searchPattern": `\d+`}, "a1b22c", "abc"},
		{"literal", map[string]string{"searchPattern": "cat", "replaceString": "dog"}, "cat catalog", "dog dogalog"},
		{"groups", map[string]string{"searchPattern": `(\w+)@(\w+)`, "replaceString": "$2 at $1"}, "me@host you@there", "host at me there at you"},
		{"group then digit", map[string]string{"searchPattern": `(a)`, "replaceString": "$10"}, "xa", "xa0"},
		{"two-digit group", map[string]string{"searchPattern": `(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)`, "replaceString": "$11$1"}, "abcdefghijk", "ka"},
		{"group zero", map[string]string{"searchPattern": `o+`, "replaceString": "[$0]"}, "foo", "f[oo]"},
		{"named group", map[string]string{"searchPattern": `(?<user>\w+)@`, "replaceString": "${user} at "}, "me@x", "me at x"},
		{"escaped dollar", map[string]string{"searchPattern": `(\d+)`, "replaceString": `\$$1`}, "cost 5", "cost $5"},
		{"escaped dollar only", map[string]string{"searchPattern": `USD`, "replaceString": `\$`}, "5 USD", "5 $"},
		{"escaped backslash", map[string]string{"searchPattern": `/`, "replaceString": `\\`}, "a/b", `a\b`},
		{"go template syntax is literal", map[string]string{"searchPattern": `x`, "replaceString": `\${1}`}, "x", "${1}"},
		{"unmatched group is empty", map[string]string{"searchPattern": `(a)?b`, "replaceString": "[$1]"}, "b ab", "[] [a]"},
		{"drop prefix (user guide)", map[string]string{"searchPattern": `^[A-Za-z0-9_]+`, "replaceString": ""}, "QuickBrownFox jumps", " jumps"},
		{"utf-8", map[string]string{"searchPattern": "é", "replaceString": "e"}, "café é", "cafe e"},
		{"invalid utf-8 kept", map[string]string{"searchPattern": "a", "replaceString": "b"}, "a\xffa", "b\xffb"},
		{"latin1", map[string]string{"searchPattern": "é", "replaceString": "ü", "charset": "ISO-8859-1"}, "caf\xe9", "caf\xfc"},
		{"latin1 unmappable", map[string]string{"searchPattern": "e", "replaceString": "€", "charset": "latin1"}, "e", "?"},
		{"ascii", map[string]string{"searchPattern": "\uFFFD", "replaceString": "?", "charset": "US-ASCII"}, "a\xe9b", "a?b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := build(t, NewSearchReplace, tt.props).Intercept([]event.Event{ev(tt.in), ev(tt.in, "h", "v")})
			for _, e := range out {
				if string(e.Body) != tt.want {
					t.Fatalf("body %q, want %q", e.Body, tt.want)
				}
			}
			if out[1].Headers.Value("h") != "v" || out[0].Headers != nil {
				t.Fatal("headers changed")
			}
		})
	}
}

func TestTypes(t *testing.T) {
	aliases := []string{"timestamp", "host", "static", "remove_header", "regex_filter", "regex_extractor", "search_replace"}
	for _, a := range aliases {
		if Types[a] == nil {
			t.Errorf("alias %s missing", a)
		}
	}
	n := 0
	for k, f := range Types {
		if strings.Contains(k, ".") {
			n++
			if !strings.HasPrefix(k, "org.apache.flume.") || !strings.HasSuffix(k, "$Builder") || f == nil {
				t.Errorf("bad class key %q", k)
			}
		}
	}
	if n != 8 {
		t.Errorf("%d class names, want 8 (7 aliased builders and UUIDInterceptor)", n)
	}
}
