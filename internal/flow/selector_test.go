package flow_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

func TestSelectorConfig(t *testing.T) {
	chans := map[string]flow.Channel{"c1": nil, "c2": nil, "c3": nil}
	names := []string{"c1", "c2", "c3"}
	tests := []struct {
		name    string
		props   map[string]string
		wantErr string
		ev      event.Event
		req     []string
		opt     []string
	}{
		{name: "default is replicating", props: nil, req: []string{"c1", "c2", "c3"}},
		{name: "replicating optional", props: map[string]string{"type": "REPLICATING", "optional": "c3 c1"}, req: []string{"c2"}, opt: []string{"c1", "c3"}},
		{name: "flume class name", props: map[string]string{"type": "org.apache.flume.channel.ReplicatingChannelSelector"}, req: []string{"c1", "c2", "c3"}},
		{name: "multiplexing class name", props: map[string]string{"type": "org.apache.flume.channel.MultiplexingChannelSelector", "mapping.a": "c2", "default": "c1"},
			ev: withHeader("x", "flume.selector.header", "a"), req: []string{"c2"}},
		{name: "multiplexing default", props: map[string]string{"type": "Multiplexing", "mapping.a": "c2", "default": "c1 c3"},
			ev: withHeader("x", "flume.selector.header", "b"), req: []string{"c1", "c3"}},
		{name: "unknown type", props: map[string]string{"type": "round_robin"}, wantErr: `unknown selector type "round_robin"; use replicating, multiplexing, load_balancing or expression`},
		{name: "load balancing picks one", props: map[string]string{"type": "load_balancing"}, req: []string{"c1"}},
		{name: "load balancing class name, random", props: map[string]string{"type": "org.apache.flume.channel.LoadBalancingChannelSelector", "policy": "RANDOM"}, req: nil},
		{name: "load balancing bad policy", props: map[string]string{"type": "load_balancing", "policy": "least_used"}, wantErr: `selector.policy: "least_used" is not a policy of the load_balancing selector; use round_robin or random`},
		{name: "optional not a source channel", props: map[string]string{"optional": "c9"}, wantErr: `channel "c9" is not one of the source's channels (c1 c2 c3)`},
		{name: "mapping to unknown channel", props: map[string]string{"type": "multiplexing", "mapping.a": "c1 c7"}, wantErr: `selector.mapping.a: channel "c7"`},
		{name: "plain optional on multiplexing", props: map[string]string{"type": "multiplexing", "optional": "c1"}, wantErr: "selector.optional.<value>"},
		{name: "expression when", props: map[string]string{"type": "expression", "when.c2": `headers.sev in ["ERROR", "FATAL"]`, "when.c3": `headers.sev == "ERROR"`, "default": "c1"},
			ev: withHeader("x", "sev", "ERROR"), req: []string{"c2", "c3"}},
		{name: "expression default", props: map[string]string{"type": "expression", "when.c2": `headers.sev == "ERROR"`, "default": "c1"},
			ev: withHeader("x", "sev", "INFO"), req: []string{"c1"}},
		{name: "expression optional", props: map[string]string{"type": "expression", "when.c2": `true`, "optional.c3": `len(body) > 0`, "optional.c2": "true"},
			ev: withHeader("x", "a", "b"), req: []string{"c2"}, opt: []string{"c3"}},
		{name: "expression optional only: default is required", props: map[string]string{"type": "expression", "when.c2": `false`, "optional.c3": `true`, "default": "c1"},
			ev: withHeader("x", "a", "b"), req: []string{"c1"}, opt: []string{"c3"}},
		{name: "expression error counts as false", props: map[string]string{"type": "expression", "when.c2": `json(body).sev == "x"`, "default": "c1"},
			ev: withHeader("not json", "a", "b"), req: []string{"c1"}},
		{name: "expression unknown channel", props: map[string]string{"type": "expression", "when.c9": `true`}, wantErr: `selector.when.c9: "c9" is not one of the source's channels (c1 c2 c3)`},
		{name: "expression without when", props: map[string]string{"type": "expression", "default": "c1"}, wantErr: `needs selector.when.<channel> = EXPR`},
		{name: "expression bad expression", props: map[string]string{"type": "expression", "when.c1": `headers.a = "x"`}, wantErr: `selector.when.c1: column 11: `},
		{name: "expression not boolean", props: map[string]string{"type": "expression", "when.c1": `headers.a`}, wantErr: `selector.when.c1: the expression gives a string; it must give a boolean`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := config.FromMap("a1.sources.r1.selector.", tc.props)
			sel, err := flow.NewSelector(p, chans, names)
			if err != nil {
				t.Fatal(err)
			}
			p.Unused()
			if tc.wantErr != "" {
				if p.Err() == nil || !strings.Contains(p.Err().Error(), tc.wantErr) {
					t.Fatalf("problems %v, want %q", p.Err(), tc.wantErr)
				}
				return
			}
			if p.Err() != nil {
				t.Fatal(p.Err())
			}
			req, opt := sel.Route(&tc.ev)
			nameOf := func(ix []int) []string {
				var out []string
				for _, i := range ix {
					out = append(out, sel.Channels()[i].Name)
				}
				slices.Sort(out)
				return out
			}
			if tc.req == nil && tc.props["policy"] == "RANDOM" {
				if len(req) != 1 || len(opt) != 0 {
					t.Fatalf("random load balancing routed to %v and optional %v, want one channel", req, opt)
				}
				return
			}
			if g := nameOf(req); !slices.Equal(g, tc.req) {
				t.Errorf("required %q, want %q", g, tc.req)
			}
			if g := nameOf(opt); !slices.Equal(g, tc.opt) {
				t.Errorf("optional %q, want %q", g, tc.opt)
			}
		})
	}
}

func TestSelectorNilProps(t *testing.T) {
	sel, err := flow.NewSelector(nil, map[string]flow.Channel{"c1": nil}, []string{"c1"})
	if err != nil {
		t.Fatal(err)
	}
	if req, _ := sel.Route(&event.Event{}); len(req) != 1 {
		t.Fatalf("required %v", req)
	}
	if _, err := flow.NewSelector(nil, map[string]flow.Channel{}, []string{"c1"}); err == nil {
		t.Fatal("an undefined channel was accepted")
	}
}

// TestExpressionSelectorErrorsCounted checks that a failing expression is
// counted by rule and logged once, and counts as false.
func TestExpressionSelectorErrorsCounted(t *testing.T) {
	var log strings.Builder
	reg := metrics.NewRegistry("a1")
	env := flow.Env{Agent: "a1", Name: "r1.selector", Metrics: reg, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	p := config.FromMap("a1.sources.r1.selector.", map[string]string{"type": "expression", "when.c2": `json(body).level == "ERROR"`, "default": "c1"})
	sel, err := flow.NewSelectorEnv(env, p, map[string]flow.Channel{"c1": nil, "c2": nil}, []string{"c1", "c2"})
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	for range 3 {
		req, _ := sel.Route(&event.Event{Body: []byte("not json")})
		if len(req) != 1 || sel.Channels()[req[0]].Name != "c1" {
			t.Fatalf("routed to %v, want the default", req)
		}
	}
	var m dto.Metric
	if err := reg.ExpressionErrors("r1.selector", "when.c2").Write(&m); err != nil || m.GetCounter().GetValue() != 3 {
		t.Fatalf("errors counted %v (%v), want 3", m.GetCounter().GetValue(), err)
	}
	if n := strings.Count(log.String(), "selector expression failed"); n != 1 {
		t.Fatalf("%d log lines, want 1 (throttled):\n%s", n, log.String())
	}
}
