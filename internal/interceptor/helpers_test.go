package interceptor

import (
	"maps"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

const prefix = "a1.sources.r1.interceptors.i1."

// build constructs an interceptor from props and fails the test on any
// configuration problem, including unknown properties.
func build(t *testing.T, f flow.InterceptorFactory, props map[string]string) flow.Interceptor {
	t.Helper()
	p := config.FromMap(prefix, props)
	ic, err := f(testEnv(), p)
	if err != nil {
		t.Fatalf("constructor error: %v", err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatalf("unexpected config problems:\n%v", err)
	}
	if ic == nil {
		t.Fatal("constructor returned a nil interceptor")
	}
	return ic
}

// buildErr constructs an interceptor from props and returns the problems
// recorded, failing when there are none. The interceptor must still be safe
// to call.
func buildErr(t *testing.T, f flow.InterceptorFactory, props map[string]string) string {
	t.Helper()
	p := config.FromMap(prefix, props)
	ic, err := f(testEnv(), p)
	if err != nil {
		t.Fatalf("constructor error: %v", err)
	}
	p.Unused()
	if p.Err() == nil {
		t.Fatal("expected a config problem, got none")
	}
	if ic == nil {
		t.Fatal("constructor returned a nil interceptor")
	}
	ic.Intercept([]event.Event{{Body: []byte("x")}, {}}) // must not panic
	return p.Err().Error()
}

func testEnv() flow.Env {
	return flow.Env{Agent: "a1", Name: "r1.i1", Metrics: metrics.NewRegistry("a1")}
}

// ev returns an event with body and headers kv (name, value, ...); with no
// kv the event has a nil header map.
func ev(body string, kv ...string) event.Event {
	e := event.Event{Body: []byte(body)}
	for i := 0; i+1 < len(kv); i += 2 {
		e.SetHeader(kv[i], kv[i+1])
	}
	return e
}

func hdrs(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func sameHeaders(h event.Headers, b map[string]string) bool {
	a := h.Map()
	return len(a) == len(b) && maps.Equal(a, b)
}

func wantContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("problem text\n  %s\ndoes not contain %q", got, w)
		}
	}
}

func counterValue(t *testing.T, reg *metrics.Registry, component, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := reg.Dropped(component, reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

type (
	flowEnv         = flow.Env
	flowInterceptor = flow.Interceptor
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
