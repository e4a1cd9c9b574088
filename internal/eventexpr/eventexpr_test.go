package eventexpr

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

func utcCompiler() *Compiler { return NewCompiler(Limits{}, time.UTC) }

// eval compiles src for want and runs it on e.
func eval(t *testing.T, c *Compiler, src string, e event.Event) (string, bool, error) {
	t.Helper()
	p, err := c.Compile(src, Value)
	if err != nil {
		t.Fatalf("%s: compile: %v", src, err)
	}
	s := c.Begin(&e)
	defer s.Release()
	return p.EvalString(s)
}

func evJSON(body string, kv ...string) event.Event {
	e := event.Event{Body: []byte(body), Headers: event.HeadersOf(map[string]string{})}
	for i := 0; i+1 < len(kv); i += 2 {
		e.Headers.Set(kv[i], kv[i+1])
	}
	return e
}

func TestHelpers(t *testing.T) {
	c := utcCompiler()
	body := `{"ts":"2021-07-04T23:59:59.123+0200","level":"WARN","n":7,"f":1.5,"ok":true,"nil":null,` +
		`"user":{"name":"ann","roles":["a","b"]},"esc":"a\"b\u00e9","big":12345678901234567890,"ms":1625435999123}`
	tests := []struct {
		src  string
		want string // "<nil>" for no value
	}{
		// json
		{`json(body).level`, "WARN"},
		{`json(body)["level"]`, "WARN"},
		{`json(body).n + 1`, "8"},
		{`json(body).f * 2`, "3"},
		{`json(body).ok`, "true"},
		{`json(body).nil`, "<nil>"},
		{`json(body).missing`, "<nil>"},
		{`json(body).user.name`, "ann"},
		{`json(body).user.roles[1]`, "b"},
		{`json(body).user.roles[-1]`, "b"},
		{`len(json(body).user.roles)`, "2"},
		{`json(body).esc`, "a\"bé"},
		{`json(body).big`, "12345678901234567000"},
		{`json(body)?.user?.nothing?.deeper`, "<nil>"},
		{`json(body).user["name"] + "!"`, "ann!"},
		{`let j = json(body); j.user.name`, "ann"},
		{`json("[1,2,3]")[2]`, "3"},
		{`json("not json") == nil`, "true"},
		{`json("") == nil`, "true"},
		{`json(headers.payload).k`, "v"},
		{`json(json(body).level) == nil`, "true"},
		{`toJSON(json(body).user)`, `{"name":"ann","roles":["a","b"]}`},
		{`toJSON({"a": 1, "b": [true, nil], "c": "<&>"})`, `{"a":1,"b":[true,null],"c":"<&>"}`},
		{`fromJSON("{\"a\": 2}").a`, "2"},
		{`json("{\"a\":1,\"a\":2}").a`, "1"},
		{`json("{\"a\":1,\"a\":2}")["a"]`, "1"},
		{`toJSON(json("{\"a\":1,\"a\":2}"))`, `{"a":2}`},
		{`json("{\"a\":1}x") == nil`, "true"},
		{`json("{\"a\":01}") == nil`, "true"},
		{`json(" {\"a\" : 1.5e1 } ").a`, "15"},
		// times
		{`parseTime(json(body).ts, "yyyy-MM-dd'T'HH:mm:ss.SSSZ")`, "1625435999123"},
		{`parseTime(json(body).ts, "2006-01-02T15:04:05.000-0700")`, "1625435999123"},
		{`parseTime("2021-07-04T21:59:59Z", "RFC3339")`, "1625435999000"},
		{`parseTime("2021-07-04T21:59:59.5Z", "iso8601")`, "1625435999500"},
		{`parseTime("2021-07-04 21:59:59", "DateTime")`, "1625435999000"},
		{`parseTime("2021-07-04 23:59:59", "DateTime", "Europe/Paris")`, "1625435999000"},
		{`parseTime(json(body).ms, "unixMs")`, "1625435999123"},
		{`parseTime("1625435999.5", "unix")`, "1625435999500"},
		{`parseTime(headers.timestamp, "unixMs")`, "1625435999123"},
		{`formatTime(parseTime(json(body).ms, "unixMs"), "yyyyMMdd")`, "20210704"},
		{`formatTime(parseTime(json(body).ms, "unixMs"), "yyyyMMdd", "Asia/Tokyo")`, "20210705"},
		{`formatTime(parseTime(json(body).ms, "unixMs"), "yyyy-MM-dd'T'HH:mm:ss.SSSZZ")`, "2021-07-04T21:59:59.123+00:00"},
		{`formatTime(parseTime(json(body).ms, "unixMs"), "unix")`, "1625435999"},
		{`formatTime(parseTime(json(body).ms, "unixMs"), "RFC3339Milli")`, "2021-07-04T21:59:59.123Z"},
		{`now() > parseTime("2020-01-01", "DateOnly")`, "true"},
		// regexExtract, mask, sha256, strings
		{"regexExtract(body, `\"level\":\"(\\w+)\"`, 1)", "WARN"},
		{"regexExtract(body, `\"level\":\"(?P<lvl>\\w+)\"`, \"lvl\")", "WARN"},
		{"regexExtract(body, `nope(\\d)`, 1)", "<nil>"},
		{"regexExtract(body, `(x)?level`, 1)", "<nil>"},
		{"regexExtract(body, `level`, 0)", "level"},
		{"mask(\"pan 4111111111111111 and 5500000000000004\", `\\b(\\d{12})\\d{4}\\b`)", "pan ************1111 and ************0004"},
		{"mask(\"password=hunter2&x=1\", `password=([^&]*)`)", "password=*******&x=1"},
		{"mask(\"password=hunter2&x=1\", `password=([^&]*)`, \"<redacted>\")", "password=<redacted>&x=1"},
		{"mask(\"no match\", `\\d+`)", "no match"},
		{"mask(\"héllo\", `h.l`)", "***lo"},
		{`sha256("abc")`, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{`lower(json(body).level)`, "warn"},
		{`upper("x") + trim("  y ")`, "Xy"},
		{`headers["kafka.topic"]`, "t1"},
		{`headers.absent`, ""},
		{`"absent" in headers`, "false"},
		{`"kafka.topic" in headers`, "true"},
		{`not ("kafka.topic" in headers)`, "false"},
		{`"absent" not in headers`, "true"},
		{`headers?.absent`, ""},
		{`headers?.["kafka.topic"]`, "t1"},
		{`headers["kafka" + ".topic"]`, "t1"},
		{`len(headers)`, "3"},
		{`join(sort(keys(headers)), ",")`, "kafka.topic,payload,timestamp"},
		{`toJSON({"t": headers["kafka.topic"]})`, `{"t":"t1"}`},
		{`len(toJSON(headers)) > 10`, "true"},
		{`headers == nil`, "false"},
		{`let headers = {"x": "shadowed"}; headers.x`, "shadowed"},
		{`map(["kafka.topic", "absent"], headers[#])[0]`, "t1"},
		{`{headers: "a map key, not the headers"}.headers`, "a map key, not the headers"},
		{`json("{\"headers\":\"a field\"}").headers`, "a field"},
		{`join(split("a,b,c", ","), "-")`, "a-b-c"},
		{`replace("aaa", "a", "bb")`, "bbbbbb"},
		{`string(42) + string(true)`, "42true"},
		{`reduce(1..3, #acc + "x", "")`, "xxx"},
		{`len(filter(1..10, # % 2 == 0))`, "5"},
		{`body[0:8]`, `{"ts":"2`},
		{`nil`, "<nil>"},
	}
	e := evJSON(body, "kafka.topic", "t1", "payload", `{"k":"v"}`, "timestamp", "1625435999123")
	for _, tc := range tests {
		got, ok, err := eval(t, c, tc.src, e)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if !ok {
			got = "<nil>"
		}
		if got != tc.want {
			t.Errorf("%s = %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestRuntimeErrors(t *testing.T) {
	c := utcCompiler()
	tests := []struct{ src, body, want string }{
		{`json(body).a.b`, `{}`, "cannot fetch b from <nil>"},
		{`json(body).a`, `nope`, "cannot fetch a from <nil>"},
		{`json(body)[0]`, `{"a":1}`, "a map's keys are strings"},
		{`json(body).a`, `[1]`, "a list's indexes are numbers"},
		{`json(body)[5]`, `[1]`, "index out of range"},
		{`parseTime(json(body).ts, "DateOnly")`, `{"ts":"yesterday"}`, `parse "yesterday" with layout "DateOnly"`},
		{`parseTime(json(body).ts, "DateOnly")`, `{"ts":5}`, "a number needs an epoch layout"},
		{`parseTime(json(body).ts, "unixMs")`, `{}`, "no value (nil) to parse"},
		{`formatTime(json(body).ts, "DateOnly")`, `{"ts":"x"}`, "formatTime: want a time"},
		{`fromJSON(body)`, `nope`, "fromJSON: the string is not JSON"},
		{`json(body).n + "x"`, `{"n":1}`, "invalid operation"},
		{`toJSON(json(body))`, `{"a":` + strings.Repeat("[", 301) + `1` + strings.Repeat("]", 301) + `}`, "nested deeper than 300"},
	}
	for _, tc := range tests {
		_, _, err := eval(t, c, tc.src, evJSON(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s on %.40q: error %v, want one containing %q", tc.src, tc.body, err, tc.want)
		}
	}
}

// TestBudget checks that what would hang or exhaust memory stops with the
// budget error instead, quickly.
func TestBudget(t *testing.T) {
	c := NewCompiler(Limits{Budget: 100_000}, time.UTC)
	big := strings.Repeat("x", 1<<20)
	tests := []string{
		`reduce(1..60, #acc + #acc, "ab")`, // string doubling
		`let a = body + body; let b = a + a; let c = b + b; let d = c + c; let e = d + d; len(e + e + e)`,
		`all(1..1000, all(1..1000, all(1..1000, true)))`, // 10^9 iterations
		`len(0..100000000)`, // a huge range
		`count(1..1000, any(1..1000, # == 0))`,
		`len(join(map(1..1000, body), ","))`, // 1000 copies of a 1 MiB body
		`len(replace(body, "x", body))`,      // quadratic
		`len(split(body, ""))`,               // a million strings
		`len(string(map(1..1000, body)))`,
		`len(toJSON(map(1..1000, body)))`,
		`len(repeat(body, 1000))`,
		`len(mask(body, "x", "yyyyyyyyyy"))`,
		`len(reduce(1..40, concat(#acc, #acc), [1]))`,
	}
	for _, src := range tests {
		t.Run(src, func(t *testing.T) {
			start := time.Now()
			_, _, err := eval(t, c, src, evJSON(big))
			if err == nil {
				t.Fatalf("no error, want the budget to stop it")
			}
			if !errors.Is(err, errBudget) && !strings.Contains(err.Error(), "memory budget exceeded") {
				t.Errorf("error %v, want the budget's", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestJSONBudget is the case: 8 MiB of deeply nested JSON is
// refused by the budget, not parsed into a gigabyte.
func TestJSONBudget(t *testing.T) {
	nested := strings.Repeat(`{"a":[`, 8<<20/6) + strings.Repeat("]}", 8<<20/6)
	flatOK := `[` + strings.Repeat(`1,`, 1000) + `1]`
	c := utcCompiler()
	_, _, err := eval(t, c, `json(body) == nil`, evJSON(nested))
	if err == nil || !strings.Contains(err.Error(), "over the limit of 1048576 (jsonMaxBytes)") {
		t.Fatalf("8 MiB: %v, want the size limit", err)
	}
	// The check reads the text once and stops at the first limit it
	// crosses: here the 301st level, long before 100,000 values.
	big := NewCompiler(Limits{JSONBytes: 16 << 20}, time.UTC)
	_, _, err = eval(t, big, `json(body) == nil`, evJSON(nested))
	if err == nil || !strings.Contains(err.Error(), "nested deeper than 300 levels") {
		t.Fatalf("8 MiB with a 16 MiB limit: %v, want the depth limit", err)
	}
	wide := strings.Repeat(`{"a":[`, 120) + strings.Repeat("0,", 200_000) + "0" + strings.Repeat("]}", 120)
	_, _, err = eval(t, big, `json(body) == nil`, evJSON(wide))
	if err == nil || !strings.Contains(err.Error(), "more than 100000 values") {
		t.Fatalf("deep and wide: %v, want the budget of values", err)
	}
	if v, _, err := eval(t, c, `len(json(body))`, evJSON(flatOK)); err != nil || v != "1001" {
		t.Fatalf("flat array: %q %v", v, err)
	}
	zeros := "[" + strings.Repeat("0,", 1<<19-2) + "0]" // 1 MiB, half a million values
	if _, _, err := eval(t, c, `json(body) == nil`, evJSON(zeros)); err == nil || !strings.Contains(err.Error(), "more than 100000 values") {
		t.Fatalf("a million zeros: %v, want the budget of values", err)
	}
	commas := `{"text":"` + strings.Repeat(",", 200000) + `"}`
	if v, _, err := eval(t, c, `len(json(body).text)`, evJSON(commas)); err != nil || v != "200000" {
		t.Fatalf("commas inside a string count for nothing: %q %v", v, err)
	}
	small := NewCompiler(Limits{Budget: 1000}, time.UTC)
	if _, _, err := eval(t, small, `len(json(body))`, evJSON(flatOK)); err == nil || !strings.Contains(err.Error(), "more than 1000 values") {
		t.Fatalf("1001 values with a budget of 1000: %v", err)
	}
	// Materializing charges the budget too: 600 values fit the count,
	// but not the maps and lists built from them twice over.
	half := `[` + strings.Repeat(`1,`, 599) + `1]`
	if _, _, err := eval(t, small, `len(json(body)) + len(toJSON(json(body))) + len(toJSON(json(body)))`, evJSON(half)); !errors.Is(err, errBudget) {
		t.Fatalf("materializing with a budget of 1000: %v", err)
	}
}

// TestJSONParsedOnce checks the per-event cache: json(body) in several
// places parses once, and results own their bytes after Release.
func TestJSONParsedOnce(t *testing.T) {
	c := utcCompiler()
	p1, _ := c.Compile(`json(body).a`, Value)
	p2, _ := c.Compile(`json(body).b + json(body).a`, Value)
	e := evJSON(`{"a":"x","b":"y"}`)
	s := c.Begin(&e)
	v1, _, err1 := p1.EvalString(s)
	v2, _, err2 := p2.EvalString(s)
	if err1 != nil || err2 != nil || v1 != "x" || v2 != "yx" {
		t.Fatalf("%q %q %v %v", v1, v2, err1, err2)
	}
	if s.json.n != 1 {
		t.Errorf("%d documents parsed, want 1", s.json.n)
	}
	s.Release()
	// A later event reuses the pooled parser: the values must not change.
	e2 := evJSON(`{"a":"QQ","b":"RR"}`)
	s2 := c.Begin(&e2)
	if _, _, err := p1.EvalString(s2); err != nil {
		t.Fatal(err)
	}
	s2.Release()
	if v1 != "x" || v2 != "yx" {
		t.Fatalf("values changed after release: %q %q", v1, v2)
	}
}

// TestPathMatchesMaterialized checks that json(...) member accesses folded
// into path lookups give what expr gives on the materialized document.
func TestPathMatchesMaterialized(t *testing.T) {
	c := utcCompiler()
	bodies := []string{`{"a":{"b":[1,"two",{"c":null}]},"s":"str","n":3}`, `[1,2]`, `nope`, `null`, `"str"`, `{}`}
	paths := []string{`.a`, `.a.b`, `.a.b[0]`, `.a.b[1]`, `.a.b[2].c`, `.a.b[2].c.d`, `.a.b[3]`, `.a.x`, `.a.x.y`, `[0]`, `[1]`, `.s`, `.s[0]`, `.n.x`, `["a"]["b"][1]`}
	for _, b := range bodies {
		for _, p := range paths {
			folded := "toJSON(json(body)" + p + ")"
			// let hides the call from the folding: the materialized path.
			whole := "let j = json(body); toJSON(j" + p + ")"
			v1, _, e1 := eval(t, c, folded, evJSON(b))
			v2, _, e2 := eval(t, c, whole, evJSON(b))
			if (e1 == nil) != (e2 == nil) || v1 != v2 {
				t.Errorf("body %s path %s: folded %q %v, materialized %q %v", b, p, v1, e1, v2, e2)
			}
		}
	}
}

func TestCompileErrors(t *testing.T) {
	c := utcCompiler()
	tests := []struct {
		src  string
		want Want
		msg  string
	}{
		{``, Value, "the expression is empty"},
		{`headers.a ==`, Bool, "column 12: unexpected token EOF"},
		{`jsn(body)`, Value, "column 1: unknown name jsn; did you mean json?"},
		{`bodyy`, Value, "column 1: unknown name bodyy; did you mean body?"},
		{`frobnicate(body)`, Value, "the event is body and headers, and the helpers are json, parseTime"},
		{`json()`, Value, "not enough arguments to call json"},
		{`sha256(1)`, Value, "cannot use int as argument (type string) to call sha256"},
		{`parseTime(body, "yyyy-MM-dd kk")`, Value, "column 17: parseTime: time layout"},
		{`parseTime(body, "99")`, Value, `column 17: parseTime: time layout "99": "99" holds no element of Go's reference time`},
		{`parseTime(body, "no elements")`, Value, "letters n are not supported"},
		{`parseTime(body, "DateOnly", "Nowhere/Land")`, Value, `column 29: parseTime: time zone "Nowhere/Land"`},
		{"regexExtract(body, `(a)(b)`, 3)", Value, "has 2 group(s); there is no group 3"},
		{"regexExtract(body, `(?P<x>a)`, \"y\")", Value, `has no group named "y"`},
		{"regexExtract(body, headers.re, 1)", Value, "column 20: the regular expression of regexExtract must be a constant"},
		{"mask(body, `a\\1`)", Value, "uses the backreference \\1"},
		{`headers.a`, Bool, "the expression gives a string; it must give a boolean"},
		{`[1, 2]`, Value, "the expression gives a list, which is not a header value"},
		{`ev·`, Value, `column 3: "·" is not allowed`},
		{`body +`, Value, "column 6"},
		{strings.Repeat("1 + ", 1000) + "1", Value, "exceeds maximum allowed nodes"},
		{strings.Repeat("(", 101) + "1" + strings.Repeat(")", 101), Value, "column 101: nested deeper than 100"},
		{strings.Repeat("[", 200), Value, "column 101: nested deeper than 100"},
		{"`((((` + \"((([\\\"(\" + '(((' + ", Value, "unexpected token EOF"}, // brackets in strings do not count
	}
	for _, tc := range tests {
		_, err := c.Compile(tc.src, tc.want)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%.60s: %v, want %q", tc.src, err, tc.msg)
		}
	}
}

func TestEvalBool(t *testing.T) {
	c := utcCompiler()
	p, err := c.Compile(`json(body)?.debug`, Bool)
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{`{"debug":true}`: "true", `{"debug":false}`: "false", `{"debug":"yes"}`: "not a boolean", `{}`: "nil, not a boolean"} {
		e := evJSON(body)
		s := c.Begin(&e)
		b, err := p.EvalBool(s)
		s.Release()
		got := ""
		if err != nil {
			got = err.Error()
		} else if b {
			got = "true"
		} else {
			got = "false"
		}
		if !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}
