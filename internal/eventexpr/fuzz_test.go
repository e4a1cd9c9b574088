package eventexpr

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/timelayout"
)

// The fuzz targets: random programs for the compiler (and the VM on what
// compiles), random inputs for the helpers. None may panic, and no
// evaluation may take long. Seeds are in testdata/fuzz.

var fuzzEvent = `{"ts":"2024-03-05T23:59:59.950+0100","level":"WARN","user":{"name":"ann","roles":["a","b"]},"n":3}`

// slowRun is how long one evaluation may take in a fuzz run before the
// budget is considered broken (generous: the machine is shared).
const slowRun = 2 * time.Second

func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`json(body).level == "DEBUG"`, `parseTime(json(body).ts, "yyyy-MM-dd'T'HH:mm:ss.SSSZ")`,
		`reduce(1..10, #acc + "x", "")`, `map(split(body, ","), upper(#))`, "mask(body, `\\d+`)",
		`let x = json(body); x?.user?.roles[0] ?? "none"`, `headers["a.b"] + string(len(body))`,
		`all(1..3, any(1..3, # > 1))`, `toJSON({"a": [1, nil, true]})`, `formatTime(now(), "RFC3339")`,
	} {
		f.Add(s)
	}
	c := NewCompiler(Limits{Budget: 50_000}, time.UTC)
	f.Fuzz(func(t *testing.T, src string) {
		for _, want := range []Want{Value, Bool} {
			p, err := c.Compile(src, want)
			if err != nil {
				var e *Error
				if !asError(err, &e) {
					t.Fatalf("%q: error of type %T", src, err)
				}
				continue
			}
			e := event.Event{Body: []byte(fuzzEvent), Headers: event.HeadersOf(map[string]string{"a.b": "c"})}
			s := c.Begin(&e)
			start := time.Now()
			if want == Bool {
				_, _ = p.EvalBool(s)
			} else {
				_, _, _ = p.EvalString(s)
			}
			if d := time.Since(start); d > slowRun {
				t.Errorf("%q took %v", src, d)
			}
			s.Release()
		}
	})
}

func asError(err error, e **Error) bool {
	return errors.As(err, e)
}

// helperExprs run on fuzzed bodies and headers.
var helperExprs = []string{
	`json(body)`, `toJSON(json(body))`, `json(body).a.b[0]`, `json(body)?.a?.b`, `json(headers.h)`,
	`parseTime(body, "yyyy-MM-dd'T'HH:mm:ss.SSSZ")`, `parseTime(body, "unixMs")`, `parseTime(headers.h, "RFC3339")`,
	`parseTime(body, "EEE, dd MMM yyyy HH:mm:ss Z")`, `formatTime(parseTime(body, "unix"), "yyyyMMdd")`,
	"regexExtract(body, `(\\w+)=(\\w*)`, 2)", "mask(body, `\\b(\\d{12})\\d{4}\\b`)", "mask(body, `[aeiou]`, \"<>\")",
	`sha256(body)`, `toJSON(split(body, headers.h))`, `join(split(body, ""), headers.h)`, `replace(body, headers.h, body)`,
	`repeat(headers.h, len(body))`, `string(json(body))`, `fromJSON(body)`,
}

func FuzzHelpers(f *testing.F) {
	f.Add(fuzzEvent, "x")
	f.Add(`{"a":{"b":[1]}}`, `{"k":"v"}`)
	f.Add("2024-03-05T23:59:59.950+0100", "2024-03-05T23:59:59Z")
	f.Add("1709679599950", "")
	f.Add("card 4111111111111111 pw=abc", "=")
	f.Add(strings.Repeat("[", 400), "[")
	c := NewCompiler(Limits{Budget: 50_000, JSONBytes: 64 << 10}, time.UTC)
	progs := make([]*Program, len(helperExprs))
	for i, src := range helperExprs {
		p, err := c.Compile(src, Value)
		if err != nil {
			f.Fatalf("%s: %v", src, err)
		}
		progs[i] = p
	}
	f.Fuzz(func(t *testing.T, body, h string) {
		e := event.Event{Body: []byte(body), Headers: event.HeadersOf(map[string]string{"h": h})}
		for i, p := range progs {
			s := c.Begin(&e)
			start := time.Now()
			_, _, _ = p.EvalString(s)
			if d := time.Since(start); d > slowRun {
				t.Errorf("%s took %v", helperExprs[i], d)
			}
			s.Release()
		}
	})
}

func FuzzTimeLayout(f *testing.F) {
	for _, l := range []string{"yyyy-MM-dd'T'HH:mm:ss.SSSZ", "2006-01-02", "RFC3339", "unixMs", "EEE MMM d HH:mm:ss yyyy", "h:mm a", "''yy''"} {
		f.Add(l, "2024-03-05T23:59:59.950+0100")
	}
	ref := time.Date(2024, 3, 5, 23, 59, 59, 950e6, time.UTC)
	f.Fuzz(func(t *testing.T, spec, value string) {
		l, err := timelayout.New(spec)
		if err != nil {
			return
		}
		_, _ = l.Parse(value, time.UTC)
		out := l.Format(ref)
		if _, err := l.Parse(out, time.UTC); err != nil && !l.IsEpoch() && !strings.ContainsAny(spec, "0123456789") {
			// A translated Joda pattern reads back what it writes.
			t.Errorf("layout %q writes %q and cannot read it back: %v", spec, out, err)
		}
	})
}
