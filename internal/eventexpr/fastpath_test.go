package eventexpr

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
)

// fastExprs are expressions the fast path takes (TestFastPathTaken checks
// it), run against the VM on every body and header value below.
var fastExprs = []struct {
	src  string
	want Want
}{
	{`headers.level == "DEBUG"`, Bool},
	{`headers["level"] != "DEBUG"`, Bool},
	{`"DEBUG" == headers.level`, Bool},
	{`headers.level in ["ERROR", "FATAL"]`, Bool},
	{`json(body) == nil`, Bool},
	{`json(body) != nil && json(body).level == "DEBUG"`, Bool},
	{`json(body).level == "DEBUG" || headers.level == "DEBUG"`, Bool},
	{`!(json(body).n == 3)`, Bool},
	{`json(body).n == 3.0`, Bool},
	{`json(body).ok == true`, Bool},
	{`json(body).a.b == nil`, Bool},
	{`json(body).list[0] == "x"`, Bool},
	{`json(body).level in ["INFO", "DEBUG"]`, Bool},
	{`json(body).n in ["3"]`, Bool},
	{`not (headers.x == "")`, Bool},
	{`true`, Bool},
	{`headers.level`, Value},
	{`json(body).level`, Value},
	{`json(body).n`, Value},
	{`json(body).f`, Value},
	{`json(body).a`, Value},
	{`json(body).list[1]`, Value},
	{`json(body).level[0]`, Value},
	{`parseTime(json(body).ts, "yyyy-MM-dd'T'HH:mm:ss.SSSZ")`, Value},
	{`parseTime(json(body).ms, "unixMs")`, Value},
	{`parseTime(headers.timestamp, "unixMs")`, Value},
	{`parseTime(headers.date, "DateOnly", "Europe/Paris")`, Value},
	{`body[0:10]`, Value},
	{`body[2:]`, Value},
	{`body[:3]`, Value},
	{`body[-4:]`, Value},
	{`body[5:2]`, Value},
	{`body[0:1000]`, Value},
	{`headers.level[1:3]`, Value},
	{`parseTime(body[11:30], "unixNs")`, Value},
	{`body[0:1] == "{"`, Bool},
	{`body`, Value},
}

var fastBodies = []string{
	`{"level":"DEBUG","n":3,"f":2.5,"ok":true,"a":{"b":null},"list":["x","y"],"ts":"2024-03-05T23:59:59.999+0100","ms":1709679599999}`,
	`{"level":"INFO","n":"3","ok":"true","a":{"b":1},"list":[],"ts":"bad","ms":"1709679599999"}`,
	`{"level":7,"n":3.0,"a":[1],"list":{"0":"x"},"ts":null,"ms":1.5e12}`,
	`{"level":null,"a":null}`, `0000000042 1709683199950000000 abcdef`,
	`{}`, `[]`, `[1,2]`, `"str"`, `null`, `3`, `not json`, ``, `{"a":1.2.3}`, `{"level":"\u0044EBUG"}`,
}

var fastHeaders = []map[string]string{
	nil,
	{"level": "DEBUG", "timestamp": "1709679599999", "date": "2024-03-05"},
	{"level": "ERROR", "timestamp": "x", "date": "2024-13-05", "x": ""},
}

func TestFastPathTaken(t *testing.T) {
	c := utcCompiler()
	for _, x := range fastExprs {
		p, err := c.Compile(x.src, x.want)
		if err != nil {
			t.Fatalf("%s: %v", x.src, err)
		}
		if p.fast == nil && p.direct == nil {
			t.Errorf("%s: not on the fast path", x.src)
		}
	}
}

// TestFastPathMatchesVM runs every fast expression on every input both
// ways and wants the same value, or an error both times.
func TestFastPathMatchesVM(t *testing.T) {
	c := utcCompiler()
	for _, x := range fastExprs {
		for _, body := range fastBodies {
			for _, h := range fastHeaders {
				checkFastPath(t, c, x.src, x.want, body, h)
			}
		}
	}
}

func checkFastPath(t *testing.T, c *Compiler, src string, want Want, body string, h map[string]string) {
	t.Helper()
	fast, err := c.Compile(src, want)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	slow := *fast
	slow.fast, slow.direct = nil, nil
	run := func(p *Program) (string, error) {
		e := event.Event{Body: []byte(body), Headers: event.HeadersOf(h)}
		s := c.Begin(&e)
		defer s.Release()
		if want == Bool {
			b, err := p.EvalBool(s)
			return fmt.Sprint(b), err
		}
		v, ok, err := p.EvalString(s)
		return fmt.Sprint(v, ok), err
	}
	fv, ferr := run(fast)
	sv, serr := run(&slow)
	if (ferr == nil) != (serr == nil) || (ferr == nil && fv != sv) {
		t.Errorf("%s on body %q headers %v: fast %q %v, VM %q %v", src, body, h, fv, ferr, sv, serr)
	}
}

func FuzzFastPath(f *testing.F) {
	for _, b := range fastBodies {
		f.Add(b, "DEBUG", "1709679599999")
	}
	c := utcCompiler()
	f.Fuzz(func(t *testing.T, body, level, ts string) {
		h := map[string]string{"level": level, "timestamp": ts, "date": ts}
		for _, x := range fastExprs {
			checkFastPath(t, c, x.src, x.want, body, h)
		}
	})
}
