package flow_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
)

// scripted is a sink whose Process results are set by the test: the fault
// injection a real downstream cannot produce on cue.
type scripted struct {
	name   string
	log    *[]string
	fail   bool
	status flow.Status
}

func (s *scripted) Start(context.Context) error { return nil }
func (s *scripted) Stop(context.Context) error  { return nil }
func (s *scripted) Process(context.Context) (flow.Status, error) {
	*s.log = append(*s.log, s.name)
	if s.fail {
		return flow.Ready, fmt.Errorf("%s down", s.name)
	}
	return s.status, nil
}

func group(t *testing.T, props map[string]string, names ...string) (flow.Sink, map[string]*scripted, *[]string, *time.Time) {
	t.Helper()
	calls := &[]string{}
	byName := map[string]flow.Sink{}
	sinks := map[string]*scripted{}
	for _, n := range names {
		s := &scripted{name: n, log: calls}
		sinks[n], byName[n] = s, s
	}
	p := config.FromMap("a1.sinkgroups.g1.processor.", props)
	proc, err := flow.NewSinkProcessor(p, names, byName, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if p.Err() != nil {
		t.Fatal(p.Err())
	}
	now := time.Unix(1000, 0)
	flow.SetClock(proc, func() time.Time { return now })
	return proc, sinks, calls, &now
}

func process(t *testing.T, s flow.Sink, n int) (errs int) {
	t.Helper()
	for range n {
		if _, err := s.Process(t.Context()); err != nil {
			errs++
		}
	}
	return errs
}

func TestFailover(t *testing.T) {
	proc, sinks, calls, now := group(t, map[string]string{
		"type": "FAILOVER", "priority.k1": "5", "priority.k2": "10", "maxpenalty": "10000",
	}, "k1", "k2", "k3")
	// Highest priority first: k2 (10), k1 (5), k3 (unset: -1).
	process(t, proc, 2)
	if !slices.Equal(*calls, []string{"k2", "k2"}) {
		t.Fatalf("calls %v", *calls)
	}
	// k2 fails: the same call moves on to k1.
	*calls = nil
	sinks["k2"].fail = true
	if errs := process(t, proc, 1); errs != 0 {
		t.Fatal("failover returned the error of a sink it failed over from")
	}
	if !slices.Equal(*calls, []string{"k2", "k1"}) {
		t.Fatalf("calls %v", *calls)
	}
	// k2 sits out 2 s (2^1 × 1 s).
	*calls = nil
	*now = now.Add(1900 * time.Millisecond)
	process(t, proc, 1)
	*now = now.Add(200 * time.Millisecond)
	process(t, proc, 1) // k2 tried again, fails again: 4 s now
	if !slices.Equal(*calls, []string{"k1", "k2", "k1"}) {
		t.Fatalf("calls %v", *calls)
	}
	// Penalties grow to maxpenalty.
	for range 5 {
		*now = now.Add(time.Minute)
		process(t, proc, 1)
	}
	*calls = nil
	*now = now.Add(9 * time.Second)
	process(t, proc, 1)
	*now = now.Add(2 * time.Second)
	sinks["k2"].fail = false
	process(t, proc, 1)
	if !slices.Equal(*calls, []string{"k1", "k2"}) {
		t.Fatalf("after maxpenalty: calls %v", *calls)
	}
	// Backoff is not a failure.
	*calls = nil
	sinks["k2"].status = flow.Backoff
	process(t, proc, 2)
	if !slices.Equal(*calls, []string{"k2", "k2"}) {
		t.Fatalf("backoff: calls %v", *calls)
	}
	// All down: an error naming them.
	for _, s := range sinks {
		s.fail = true
	}
	*now = now.Add(time.Hour)
	_, err := proc.Process(t.Context())
	if err == nil || !strings.Contains(err.Error(), "k3 down") {
		t.Fatalf("all failed: %v", err)
	}
	if _, err := proc.Process(t.Context()); err == nil {
		t.Fatal("every sink in penalty, yet no error")
	}
}

func TestFailoverDefaultPriorityIsListOrder(t *testing.T) {
	proc, sinks, calls, _ := group(t, map[string]string{"type": "org.apache.flume.sink.FailoverSinkProcessor"}, "a", "b", "c")
	sinks["a"].fail = true
	process(t, proc, 1)
	sinks["b"].fail = true
	process(t, proc, 1)
	if !slices.Equal(*calls, []string{"a", "b", "b", "c"}) {
		t.Fatalf("calls %v", *calls)
	}
}

func TestLoadBalanceRoundRobin(t *testing.T) {
	proc, sinks, calls, _ := group(t, map[string]string{"type": "load_balance"}, "k1", "k2", "k3")
	process(t, proc, 4)
	if !slices.Equal(*calls, []string{"k1", "k2", "k3", "k1"}) {
		t.Fatalf("calls %v", *calls)
	}
	// An error moves on within the call; without backoff k2 is tried again next round.
	*calls = nil
	sinks["k2"].fail = true
	if errs := process(t, proc, 3); errs != 0 {
		t.Fatalf("%d errors", errs)
	}
	if !slices.Equal(*calls, []string{"k2", "k3", "k3", "k1"}) {
		t.Fatalf("calls %v", *calls)
	}
	// Backoff is returned as is, without trying the next sink.
	*calls = nil
	sinks["k2"].fail = false
	sinks["k2"].status = flow.Backoff
	st, err := proc.Process(t.Context())
	if err != nil || st != flow.Backoff || len(*calls) != 1 {
		t.Fatalf("status %v err %v calls %v", st, err, *calls)
	}
	// All fail: every error together.
	for _, s := range sinks {
		s.fail = true
	}
	_, err = proc.Process(t.Context())
	if err == nil || !strings.Contains(err.Error(), "k1 down") || !strings.Contains(err.Error(), "k3 down") {
		t.Fatalf("all failed: %v", err)
	}
}

func TestLoadBalanceBackoff(t *testing.T) {
	proc, sinks, calls, now := group(t, map[string]string{"type": "load_balance", "backoff": "true", "selector.maxTimeOut": "3000"}, "k1", "k2")
	sinks["k1"].fail = true
	process(t, proc, 3) // k1 fails then k2; k2; k1 skipped → k2
	if !slices.Equal(*calls, []string{"k1", "k2", "k2", "k2"}) {
		t.Fatalf("calls %v", *calls)
	}
	*calls = nil
	*now = now.Add(3 * time.Second) // capped at maxTimeOut
	sinks["k1"].fail = false
	process(t, proc, 2)
	if !slices.Contains(*calls, "k1") {
		t.Fatalf("k1 not back after maxTimeOut: %v", *calls)
	}
}

func TestLoadBalanceRandom(t *testing.T) {
	proc, _, calls, _ := group(t, map[string]string{"type": "load_balance", "selector": "RANDOM"}, "k1", "k2", "k3")
	process(t, proc, 300)
	seen := map[string]int{}
	for _, c := range *calls {
		seen[c]++
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if seen[k] < 30 {
			t.Fatalf("random selector picked %s %d times of 300", k, seen[k])
		}
	}
}

func TestSinkProcessorConfig(t *testing.T) {
	tests := []struct {
		name    string
		props   map[string]string
		sinks   []string
		wantErr string
	}{
		{"default one sink", nil, []string{"k1"}, ""},
		{"default class name", map[string]string{"type": "org.apache.flume.sink.DefaultSinkProcessor"}, []string{"k1"}, ""},
		{"default with two sinks", map[string]string{"type": "default"}, []string{"k1", "k2"}, "runs exactly one sink"},
		{"unknown type", map[string]string{"type": "round_robin"}, []string{"k1"}, `unknown sink processor type "round_robin"`},
		{"custom selector class", map[string]string{"type": "load_balance", "selector": "com.example.MySelector"}, []string{"k1"}, "custom sink selector classes"},
		{"bad selector", map[string]string{"type": "load_balance", "selector": "fastest"}, []string{"k1"}, `unknown sink selector "fastest"`},
		{"priority of a stranger", map[string]string{"type": "failover", "priority.k9": "1"}, []string{"k1"}, `sink "k9" is not in this group`},
		{"bad maxpenalty", map[string]string{"type": "failover", "maxpenalty": "soon"}, []string{"k1"}, "not a whole number"},
		{"bad backoff", map[string]string{"type": "load_balance", "backoff": "yes"}, []string{"k1"}, "not a boolean"},
		{"load_balance class name", map[string]string{"type": "org.apache.flume.sink.LoadBalancingSinkProcessor", "selector.maxTimeOut": "100"}, []string{"k1", "k2"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := &[]string{}
			byName := map[string]flow.Sink{}
			for _, n := range tc.sinks {
				byName[n] = &scripted{name: n, log: calls}
			}
			p := config.FromMap("a1.sinkgroups.g1.processor.", tc.props)
			if _, err := flow.NewSinkProcessor(p, tc.sinks, byName, nil); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			err := p.Err()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("problems %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, err := flow.NewSinkProcessor(nil, []string{"k1"}, map[string]flow.Sink{}, nil); err == nil {
		t.Fatal("an undefined member sink was accepted")
	}
}

// A failover group tells a member's failures as one streak: the first at
// once, the rest summarised when the member delivers again, right before
// the line saying it is back; nothing about it after that.
func TestFailoverTellsAMemberStreakOnce(t *testing.T) {
	logs := &testutil.LogBuffer{}
	calls := &[]string{}
	k1, k2 := &scripted{name: "k1", log: calls, fail: true}, &scripted{name: "k2", log: calls}
	p := config.FromMap("a1.sinkgroups.g1.processor.", map[string]string{"type": "failover", "priority.k1": "10", "priority.k2": "5"})
	proc, err := flow.NewSinkProcessor(p, []string{"k1", "k2"}, map[string]flow.Sink{"k1": k1, "k2": k2},
		slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	flow.SetClock(proc, func() time.Time { return now })
	for range 3 {
		process(t, proc, 1)
		now = now.Add(time.Minute) // past k1's penalty
	}
	k1.fail = false
	process(t, proc, 1)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		_, l, _ = strings.Cut(l, " level=")
		got = append(got, regexp.MustCompile(`(failing_for|recovered_after)=\S+`).ReplaceAllString(l, "$1=D"))
	}
	want := []string{
		`WARN msg="sink failed; failing over to the next sink" sinkgroup=g1 sink=k1 sits_out=2s err="k1 down"`,
		`WARN msg="sink failed; failing over to the next sink (repeated)" sinkgroup=g1 sink=k1 sits_out=8s err="k1 down" failures=3 failing_for=D`,
		`INFO msg="sink delivering again; back in the failover group" sinkgroup=g1 sink=k1 recovered_after=D failures=3`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
