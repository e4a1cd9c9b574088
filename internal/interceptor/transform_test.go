package interceptor

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

func TestTransformKeys(t *testing.T) {
	utc := func(s string) string {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return itoa(tm.UnixMilli())
	}
	tests := []struct {
		name  string
		props map[string]string
		in    event.Event
		drop  bool
		body  string // "" means unchanged
		hdrs  map[string]string
	}{
		{name: "drop true", props: map[string]string{"drop": `headers.level == "DEBUG"`}, in: ev("x", "level", "DEBUG"), drop: true},
		{name: "drop false", props: map[string]string{"drop": `headers.level == "DEBUG"`}, in: ev("x", "level", "INFO"), hdrs: hdrs("level", "INFO")},
		{name: "drop on a missing header", props: map[string]string{"drop": `headers.level == "DEBUG"`}, in: ev("x"), hdrs: nil},
		{name: "drop malformed json", props: map[string]string{"drop": `json(body) == nil`}, in: ev("{oops"), drop: true},
		{name: "set string", props: map[string]string{"set.tier": `"edge"`}, in: ev("x"), hdrs: hdrs("tier", "edge")},
		{name: "set header with dots", props: map[string]string{"set.kafka.topic": `"logs-" + lower(headers.app)`}, in: ev("x", "app", "Web"),
			hdrs: hdrs("app", "Web", "kafka.topic", "logs-web")},
		{name: "set number", props: map[string]string{"set.n": `json(body).n * 2`}, in: ev(`{"n": 21}`), hdrs: hdrs("n", "42")},
		{name: "set float", props: map[string]string{"set.f": `json(body).f`}, in: ev(`{"f": 0.25}`), hdrs: hdrs("f", "0.25")},
		{name: "set bool", props: map[string]string{"set.b": `len(body) > 3`}, in: ev("long"), hdrs: hdrs("b", "true")},
		{name: "set time is epoch ms", props: map[string]string{"set.timestamp": `parseTime(json(body).ts, "yyyy-MM-dd'T'HH:mm:ss.SSSZ")`},
			in: ev(`{"ts":"2021-07-04T23:59:59.999+0000"}`), hdrs: hdrs("timestamp", utc("2021-07-04T23:59:59.999Z"))},
		{name: "set nil removes", props: map[string]string{"set.user": `json(body)?.user`}, in: ev(`{}`, "user", "old"), hdrs: hdrs()},
		{name: "set replaces", props: map[string]string{"set.user": `json(body).user`}, in: ev(`{"user":"new"}`, "user", "old"), hdrs: hdrs("user", "new")},
		{name: "sets see the event as it came in", props: map[string]string{"set.a": `"new"`, "set.b": `headers.a`}, in: ev("x", "a", "old"),
			hdrs: hdrs("a", "new", "b", "old")},
		{name: "remove", props: map[string]string{"remove": "a  c"}, in: ev("x", "a", "1", "b", "2", "c", "3"), hdrs: hdrs("b", "2")},
		{name: "remove wins over set", props: map[string]string{"set.a": `"x"`, "remove": "a"}, in: ev("x"), hdrs: hdrs()},
		{name: "body", props: map[string]string{"body": `upper(body)`}, in: ev("abc"), body: "ABC"},
		{name: "body sees the input, sets see the input body", props: map[string]string{"body": `"new"`, "set.old": `body`}, in: ev("old"),
			body: "new", hdrs: hdrs("old", "old")},
		{name: "body from json", props: map[string]string{"body": `json(body).message`}, in: ev(`{"message":"hello \"you\""}`), body: `hello "you"`},
		{name: "mask", props: map[string]string{"body": `mask(body, "\\b(\\d{12})\\d{4}\\b")`}, in: ev("card 4111111111111111 ok"), body: "card ************1111 ok"},
		{name: "nil headers", props: map[string]string{"set.h": `headers.x ?? "none"`}, in: event.Event{Body: []byte("x")}, hdrs: hdrs("h", "")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ic := build(t, NewTransform, withType(tc.props))
			in := tc.in
			wantBody := string(in.Body)
			if tc.body != "" {
				wantBody = tc.body
			}
			out := ic.Intercept([]event.Event{in})
			if tc.drop {
				if len(out) != 0 {
					t.Fatalf("kept %+v, want it dropped", out)
				}
				return
			}
			if len(out) != 1 {
				t.Fatalf("dropped, want kept")
			}
			if string(out[0].Body) != wantBody {
				t.Errorf("body %q, want %q", out[0].Body, wantBody)
			}
			if !sameHeaders(out[0].Headers, tc.hdrs) {
				t.Errorf("headers %v, want %v", out[0].Headers, tc.hdrs)
			}
		})
	}
}

func withType(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// transformEnv returns an env whose log lines land in buf.
func transformEnv(buf *bytes.Buffer) (flow.Env, *metrics.Registry) {
	reg := metrics.NewRegistry("a1")
	return flow.Env{Agent: "a1", Name: "r1.t", Metrics: reg, Logger: slog.New(slog.NewTextHandler(buf, nil))}, reg
}

func exprErrors(t *testing.T, reg *metrics.Registry, component, rule string) float64 {
	t.Helper()
	var m dto.Metric
	if err := reg.ExpressionErrors(component, rule).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestTransformOneBadEventIn10000 is the bad-input case: an
// expression that fails on one event leaves the others transformed, counts
// the one, and logs one line.
func TestTransformOneBadEventIn10000(t *testing.T) {
	for _, onError := range []string{"keep", "drop"} {
		t.Run(onError, func(t *testing.T) {
			var buf bytes.Buffer
			env, reg := transformEnv(&buf)
			p := config.FromMap(prefix, map[string]string{
				"onError":       onError,
				"set.timestamp": `parseTime(json(body).ts, "unixMs")`,
				"set.seen":      `"yes"`,
			})
			ic, err := NewTransform(env, p)
			if err != nil || p.Err() != nil {
				t.Fatal(err, p.Err())
			}
			events := make([]event.Event, 10000)
			for i := range events {
				body := fmt.Sprintf(`{"ts": %d}`, 1700000000000+i)
				if i == 4321 {
					body = `{"ts": "not a time"}`
				}
				events[i] = ev(body, "n", itoa(int64(i)))
			}
			out := ic.Intercept(events)
			want := 10000
			if onError == "drop" {
				want = 9999
			}
			if len(out) != want {
				t.Fatalf("%d events out, want %d", len(out), want)
			}
			for _, e := range out {
				n := e.Headers.Value("n")
				if n == "4321" {
					if len(e.Headers) != 1 {
						t.Errorf("the failing event was changed: %v", e.Headers)
					}
					continue
				}
				var i int64
				if _, err := fmt.Sscan(n, &i); err != nil {
					t.Fatal(err)
				}
				if e.Headers.Value("timestamp") != itoa(1700000000000+i) || e.Headers.Value("seen") != "yes" {
					t.Fatalf("event %s: headers %v", n, e.Headers)
				}
			}
			if got := exprErrors(t, reg, "r1.t", "set.timestamp"); got != 1 {
				t.Errorf("errors counted %v, want 1", got)
			}
			dropped := counterValue(t, reg, "r1.t", "expression_error")
			if (onError == "drop") != (dropped == 1) {
				t.Errorf("dropped on error %v with onError=%s", dropped, onError)
			}
			lines := strings.Count(strings.TrimSpace(buf.String()), "\n") + 1
			if lines != 1 || !strings.Contains(buf.String(), "rule=set.timestamp") || !strings.Contains(buf.String(), "not a time") {
				t.Errorf("log:\n%s\nwant one line naming the rule and the error", buf.String())
			}
		})
	}
}

func TestTransformDropCounted(t *testing.T) {
	var buf bytes.Buffer
	env, reg := transformEnv(&buf)
	p := config.FromMap(prefix, withType(map[string]string{"drop": `hasPrefix(body, "DEBUG")`}))
	ic, _ := NewTransform(env, p)
	out := ic.Intercept([]event.Event{ev("DEBUG a"), ev("INFO b"), ev("DEBUG c"), ev("WARN d")})
	if len(out) != 2 || string(out[0].Body) != "INFO b" || string(out[1].Body) != "WARN d" {
		t.Fatalf("kept %v", out)
	}
	if got := counterValue(t, reg, "r1.t", "filtered"); got != 2 {
		t.Errorf("dropped counted %v, want 2", got)
	}
}

func TestTransformErrorLeavesEventUnchanged(t *testing.T) {
	var buf bytes.Buffer
	env, _ := transformEnv(&buf)
	// set.a succeeds, set.b fails: a must not be applied either.
	p := config.FromMap(prefix, withType(map[string]string{"set.a": `"x"`, "set.b": `json(body).missing.deeper`, "body": `"changed"`}))
	ic, _ := NewTransform(env, p)
	out := ic.Intercept([]event.Event{ev(`{}`, "keep", "me")})
	if len(out) != 1 || string(out[0].Body) != "{}" || !sameHeaders(out[0].Headers, hdrs("keep", "me")) {
		t.Fatalf("out %+v, want the event as it came in", out)
	}
}

func TestTransformConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  []string
	}{
		{"no rules", map[string]string{}, []string{"interceptors.i1.type", "at least one of drop, set.NAME, remove or body"}},
		{"syntax", map[string]string{"drop": `headers.a ==`}, []string{"interceptors.i1.drop: column 12: unexpected token EOF"}},
		{"unknown helper", map[string]string{"set.x": `jsn(body).a`}, []string{"i1.set.x: column 1: unknown name jsn; did you mean json?"}},
		{"wrong arity", map[string]string{"set.x": `sha256(body, 1)`}, []string{"i1.set.x: column 1: too many arguments to call sha256"}},
		{"bad regex", map[string]string{"body": `mask(body, "(?<=x)\\d")`}, []string{"i1.body: column 12: mask:", "uses lookbehind (?<=...), which Go's RE2 regular expressions do not support"}},
		{"invalid regex", map[string]string{"body": `mask(body, "a(b")`}, []string{"i1.body: column 12: mask:", "not a valid regular expression"}},
		{"bad layout", map[string]string{"set.timestamp": `parseTime(body, "yyyy-MM-dd kk:mm")`}, []string{"column 17: parseTime: time layout", "letters kk are not supported"}},
		{"layout not constant", map[string]string{"set.t": `parseTime(body, headers.layout)`}, []string{"column 17: the time layout of parseTime must be a constant string"}},
		{"drop not boolean", map[string]string{"drop": `upper(body)`}, []string{"i1.drop: the expression gives a string; it must give a boolean"}},
		{"set a map", map[string]string{"set.x": `{"a": 1}`}, []string{"i1.set.x: the expression gives a map, which is not a header value", "toJSON"}},
		{"type error", map[string]string{"set.x": `body * 2`}, []string{"i1.set.x: column 6: invalid operation: * (mismatched types string and int)"}},
		{"empty header name", map[string]string{"set.": `"x"`}, []string{"i1.set.: the header name is missing"}},
		{"bad onError", map[string]string{"drop": "false", "onError": "retry"}, []string{"i1.onError: \"retry\" is not one of keep, drop"}},
		{"bad time zone", map[string]string{"drop": "false", "timeZone": "Mars/Olympus"}, []string{"i1.timeZone: \"Mars/Olympus\" is not a time zone"}},
		{"too large", map[string]string{"drop": strings.Repeat("1 + ", 600) + "1 > 0"}, []string{"i1.drop: column", "exceeds maximum allowed nodes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := buildErr(t, NewTransform, withType(tc.props))
			wantContains(t, got, tc.want...)
		})
	}
}

// TestTransformConcurrent runs one transform from several goroutines at
// once, as a source with several connections does (run with -race).
func TestTransformConcurrent(t *testing.T) {
	ic := build(t, NewTransform, map[string]string{
		"drop":          `json(body).n % 7 == 0`,
		"set.timestamp": `parseTime(json(body).ts, "unixMs")`,
		"set.kind":      `json(body).n % 2 == 0 ? "even" : "odd"`,
		"body":          `toJSON({"n": json(body).n})`,
	})
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			for round := range 50 {
				events := make([]event.Event, 20)
				for i := range events {
					n := g*100000 + round*100 + i
					events[i] = ev(fmt.Sprintf(`{"n": %d, "ts": %d}`, n, 1700000000000+n))
				}
				for _, e := range ic.Intercept(events) {
					var n int
					if _, err := fmt.Sscanf(string(e.Body), `{"n":%d}`, &n); err != nil {
						done <- err
						return
					}
					kind := map[bool]string{true: "even", false: "odd"}[n%2 == 0]
					if n%7 == 0 || e.Headers.Value("timestamp") != itoa(int64(1700000000000+n)) || e.Headers.Value("kind") != kind {
						done <- fmt.Errorf("event %s: headers %v", e.Body, e.Headers)
						return
					}
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
