package flow_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

type procSetup struct {
	reg   *metrics.Registry
	chans map[string]flow.Channel
	proc  *flow.ChannelProcessor
}

// newProc builds a processor for source r1 over channels c1..cN (capacity
// 1000, transactionCapacity 100, unless caps says otherwise) with the
// selector properties sel.
func newProc(t *testing.T, names []string, caps map[string]int, sel map[string]string, ics ...flow.Interceptor) procSetup {
	t.Helper()
	s := procSetup{reg: metrics.NewRegistry("a1"), chans: map[string]flow.Channel{}}
	for _, n := range names {
		c, ka := 1000, "0.05"
		if v, ok := caps[n]; ok {
			c = v
		}
		s.chans[n] = newMem(t, n, c, min(c, 100), ka)
	}
	p := config.FromMap("a1.sources.r1.selector.", sel)
	selector, err := flow.NewSelector(p, s.chans, names)
	if err != nil || p.Err() != nil {
		t.Fatalf("selector: %v %v", err, p.Err())
	}
	s.proc = flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Interceptors: ics, Selector: selector, Metrics: s.reg, Logger: quietLog})
	return s
}

func drain(t *testing.T, ch flow.Channel) []string {
	t.Helper()
	return bodies(testutil.TakeAll(t, ch, 1<<20, 100, 10*time.Millisecond))
}

func TestProcessorReplicating(t *testing.T) {
	s := newProc(t, []string{"c1", "c2"}, nil, nil)
	evs := events("e", 5)
	if err := s.proc.Process(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	want := bodies(events("e", 5))
	for _, c := range []string{"c1", "c2"} {
		if got := drain(t, s.chans[c]); !slices.Equal(got, want) {
			t.Errorf("%s got %q, want %q", c, got, want)
		}
	}
	if n := histCount(t, s.reg, metrics.StageSource, "r1"); n != 5 {
		t.Errorf("source latency observations = %d, want 5", n)
	}
}

func TestProcessorOptionalFailureIsCounted(t *testing.T) {
	s := newProc(t, []string{"c1", "c2"}, map[string]int{"c2": 3}, map[string]string{"optional": "c2"})
	if err := testutil.PutCommit(s.chans["c2"], events("x", 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.proc.Process(t.Context(), events("e", 5)); err != nil {
		t.Fatalf("optional channel failure failed the put: %v", err)
	}
	if got := drain(t, s.chans["c1"]); len(got) != 5 {
		t.Fatalf("required channel got %d events", len(got))
	}
	if got := drain(t, s.chans["c2"]); !slices.Equal(got, []string{"x0", "x1", "x2"}) {
		t.Fatalf("full optional channel holds %q", got)
	}
	if d := dropped(s.reg, "r1", "optional_channel_failed"); d != 5 {
		t.Fatalf("dropped{optional_channel_failed} = %v, want 5", d)
	}
}

func TestProcessorRequiredFailure(t *testing.T) {
	// c1 commits, c2 is full, c3 is never tried: not atomic across channels, as in Flume.
	s := newProc(t, []string{"c1", "c2", "c3"}, map[string]int{"c2": 3}, nil)
	if err := testutil.PutCommit(s.chans["c2"], events("x", 3)); err != nil {
		t.Fatal(err)
	}
	err := s.proc.Process(t.Context(), events("e", 2))
	if !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("err = %v, want ErrChannelFull", err)
	}
	if !strings.Contains(err.Error(), "source r1: put 2 events into channel c2") || !strings.Contains(err.Error(), "channel c2 is full") {
		t.Fatalf("error does not say where: %v", err)
	}
	if got := drain(t, s.chans["c1"]); len(got) != 2 {
		t.Errorf("c1 got %d", len(got))
	}
	if got := drain(t, s.chans["c2"]); !slices.Equal(got, []string{"x0", "x1", "x2"}) {
		t.Errorf("c2 holds %q: the failed put was not rolled back", got)
	}
	if got := drain(t, s.chans["c3"]); len(got) != 0 {
		t.Errorf("c3 got %d after c2 failed", len(got))
	}
	if n := histCount(t, s.reg, metrics.StageSource, "r1"); n != 0 {
		t.Errorf("a failed put observed %d source latencies", n)
	}
}

func TestProcessorSplitsAtTransactionCapacity(t *testing.T) {
	s := newProc(t, []string{"c1"}, nil, nil) // transactionCapacity 100
	if err := s.proc.Process(t.Context(), events("e", 250)); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s.chans["c1"]); len(got) != 250 || got[249] != "e249" {
		t.Fatalf("got %d events", len(got))
	}
}

// filter drops events whose body starts with "drop" and tags the rest.
type filter struct{}

func (filter) Intercept(evs []event.Event) []event.Event {
	out := evs[:0]
	for _, e := range evs {
		if strings.HasPrefix(string(e.Body), "drop") {
			continue
		}
		e.SetHeader("seen", "yes")
		out = append(out, e)
	}
	return out
}

func TestProcessorInterceptors(t *testing.T) {
	s := newProc(t, []string{"c1"}, nil, nil, filter{})
	evs := append(events("keep", 2), events("drop", 2)...)
	if err := s.proc.Process(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	got := testutil.TakeAll(t, s.chans["c1"], 10, 10, 10*time.Millisecond)
	if !slices.Equal(bodies(got), []string{"keep0", "keep1"}) || got[0].Header("seen") != "yes" {
		t.Fatalf("got %q %v", bodies(got), got)
	}
	// All dropped: nothing to put, no error.
	if err := s.proc.Process(t.Context(), events("drop", 3)); err != nil {
		t.Fatal(err)
	}
}

func withHeader(body, k, v string) event.Event {
	e := event.Event{Body: []byte(body), ReceivedAt: event.Now()}
	if k != "" {
		e.SetHeader(k, v)
	}
	return e
}

func TestProcessorMultiplexing(t *testing.T) {
	sel := map[string]string{
		"type":        "multiplexing",
		"header":      "state",
		"mapping.CZ":  "c1",
		"mapping.US":  "c2 c3",
		"optional.CZ": "c3",
		"optional.US": "c2 c4", // c2 is required for US: stays required
		"optional.XX": "c4",    // unmapped value: default + this optional
		"default":     "c4",
	}
	s := newProc(t, []string{"c1", "c2", "c3", "c4"}, nil, sel)
	evs := []event.Event{
		withHeader("cz1", "state", "CZ"),
		withHeader("us1", "state", "US"),
		withHeader("none", "", ""),
		withHeader("empty", "state", ""),
		withHeader("other", "state", "DE"),
		withHeader("xx", "state", "XX"),
		withHeader("cz2", "state", "CZ"),
	}
	if err := s.proc.Process(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"c1": {"cz1", "cz2"},
		"c2": {"us1"},
		"c3": {"us1", "cz1", "cz2"},                   // required puts first, then optional, as Flume does
		"c4": {"none", "empty", "other", "xx", "us1"}, // us1 is optional here
	}
	for c, w := range want {
		if got := drain(t, s.chans[c]); !slices.Equal(got, w) {
			t.Errorf("%s got %q, want %q", c, got, w)
		}
	}
	if n := histCount(t, s.reg, metrics.StageSource, "r1"); n != 7 {
		t.Errorf("source latency observations = %d, want 7", n)
	}
}

func TestProcessorMultiplexingNoDefaultCountsDrops(t *testing.T) {
	s := newProc(t, []string{"c1"}, nil, map[string]string{"type": "multiplexing", "mapping.a": "c1"})
	evs := []event.Event{withHeader("a", "flume.selector.header", "a"), withHeader("b", "flume.selector.header", "b")}
	if err := s.proc.Process(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s.chans["c1"]); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("c1 got %q", got)
	}
	if d := dropped(s.reg, "r1", "no_channel"); d != 1 {
		t.Fatalf("dropped{no_channel} = %v, want 1", d)
	}
}

func TestProcessorMultiplexingFailureIsRequired(t *testing.T) {
	s := newProc(t, []string{"c1", "c2"}, map[string]int{"c2": 1},
		map[string]string{"type": "multiplexing", "mapping.a": "c1", "mapping.b": "c2"})
	evs := []event.Event{withHeader("a", "flume.selector.header", "a"), withHeader("b1", "flume.selector.header", "b"), withHeader("b2", "flume.selector.header", "b")}
	if err := s.proc.Process(t.Context(), evs); !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("err = %v, want ErrChannelFull from c2", err)
	}
}

func TestProcessorConcurrent(t *testing.T) {
	s := newProc(t, []string{"c1", "c2"}, map[string]int{"c1": 10000, "c2": 10000},
		map[string]string{"type": "multiplexing", "header": "h", "mapping.x": "c1", "default": "c2"})
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			for range 50 {
				evs := []event.Event{withHeader("x", "h", "x"), withHeader("y", "h", "y")}
				if g%2 == 0 {
					evs = evs[:1]
				}
				if err := s.proc.Process(t.Context(), evs); err != nil {
					done <- err
					return
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
	if a, b := len(drain(t, s.chans["c1"])), len(drain(t, s.chans["c2"])); a != 200 || b != 100 {
		t.Fatalf("c1 %d (want 200), c2 %d (want 100)", a, b)
	}
}

func TestProcessorAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	s := newProc(t, []string{"c1"}, map[string]int{"c1": 100000}, nil)
	evs := events("e", 100)
	in := make([]event.Event, len(evs))
	allocs := testing.AllocsPerRun(200, func() {
		copy(in, evs)
		if err := s.proc.Process(t.Context(), in); err != nil {
			t.Fatal(err)
		}
		if s.chans["c1"].Len() > 50000 {
			testutil.TakeAll(t, s.chans["c1"], 1<<20, 100, time.Millisecond)
		}
	})
	// One transaction object per batch; nothing per event.
	if allocs > 2 {
		t.Fatalf("Process of 100 events allocates %.1f times", allocs)
	}
}

// TestProcessorCloseGate: every Process after Close fails with
// ErrStopping, which also reads as a refused put (ErrChannelFull), and puts
// nothing.
func TestProcessorCloseGate(t *testing.T) {
	s := newProc(t, []string{"c1"}, nil, nil)
	if err := s.proc.Process(t.Context(), events("a", 5)); err != nil {
		t.Fatal(err)
	}
	if s.proc.Closed() {
		t.Fatal("Closed() = true before Close")
	}
	if err := s.proc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !s.proc.Closed() {
		t.Fatal("Closed() = false after Close")
	}
	err := s.proc.Process(t.Context(), events("c", 1))
	if !errors.Is(err, flow.ErrStopping) || !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("Process after Close = %v, want ErrStopping that is also ErrChannelFull", err)
	}
	if !strings.Contains(err.Error(), "r1") {
		t.Errorf("error %q does not name the source", err)
	}
	if got := drain(t, s.chans["c1"]); !slices.Equal(got, bodies(events("a", 5))) {
		t.Fatalf("channel holds %q, want only the puts before Close", got)
	}
}

// TestProcessorCloseIdleWithExpiredDeadline: with no put in progress, Close
// succeeds even when its deadline has already passed (an agent whose start
// failed stops with a deadline of now), rather than reporting a put that
// did not finish.
func TestProcessorCloseIdleWithExpiredDeadline(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 {
		s := newProc(t, []string{"c1"}, nil, nil)
		if err := s.proc.Close(done); err != nil {
			t.Fatalf("Close of an idle processor with an expired deadline = %v, want nil", err)
		}
	}
}

// TestProcessorCloseWaitsForCommit: a put that is committing when Close is
// called completes (its sender may be acknowledged); Close returns only
// after it, and ctx bounds the wait.
func TestProcessorCloseWaitsForCommit(t *testing.T) {
	blocker := &blockingInterceptor{entered: make(chan struct{}), release: make(chan struct{})}
	s := newProc(t, []string{"c1"}, nil, nil, blocker)
	done := make(chan error, 1)
	go func() { done <- s.proc.Process(t.Context(), events("a", 3)) }()
	<-blocker.entered
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.proc.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a call in progress = %v, want the deadline", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.proc.Close(t.Context()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a Process was in progress", err)
	case <-time.After(30 * time.Millisecond):
	}
	close(blocker.release)
	if err := <-done; err != nil {
		t.Fatalf("the Process in progress at Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s.chans["c1"]); len(got) != 3 {
		t.Fatalf("channel holds %d events, want the 3 put before Close", len(got))
	}
}

type blockingInterceptor struct {
	entered, release chan struct{}
	once             sync.Once
}

func (b *blockingInterceptor) Intercept(evs []event.Event) []event.Event {
	b.once.Do(func() { close(b.entered); <-b.release })
	return evs
}

// Flume 1.10's load_balancing selector: each event goes to exactly one
// channel; round_robin takes them in turn, event by event across batches,
// random spreads them.
func TestProcessorLoadBalancing(t *testing.T) {
	names := []string{"c1", "c2", "c3"}
	s := newProc(t, names, nil, map[string]string{"type": "load_balancing"})
	for b := range 10 { // batches of 1..10 events: 55 in all
		if err := s.proc.Process(t.Context(), events("b"+string(rune('a'+b))+"-", b+1)); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	for i, c := range names {
		got := drain(t, s.chans[c])
		if want := []int{19, 18, 18}[i]; len(got) != want {
			t.Errorf("%s got %d of 55 events, want %d (round robin)", c, len(got), want)
		}
		all = append(all, got...)
	}
	if len(all) != 55 || len(slices.Compact(slices.Sorted(slices.Values(all)))) != 55 {
		t.Fatalf("%d events delivered (each once?): %v", len(all), all)
	}
	if n := histCount(t, s.reg, metrics.StageSource, "r1"); n != 55 {
		t.Errorf("source latency observations = %d, want 55", n)
	}

	r := newProc(t, names, nil, map[string]string{"type": "load_balancing", "policy": "random"})
	if err := r.proc.Process(t.Context(), events("r", 300)); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range names {
		n := len(drain(t, r.chans[c]))
		if n < 50 { // expected 100 each; below 50 is about 1e-8 likely
			t.Errorf("random: %s got %d of 300 events", c, n)
		}
		total += n
	}
	if total != 300 {
		t.Fatalf("random: %d of 300 events delivered", total)
	}
}

func TestProcessorExpressionSelector(t *testing.T) {
	sel := map[string]string{
		"type":             "expression",
		"when.errors":      `json(body)?.level in ["ERROR", "FATAL"]`,
		"when.audit":       `headers.kind == "audit"`,
		"optional.archive": `json(body)?.level != "DEBUG"`,
		"default":          "main",
	}
	s := newProc(t, []string{"main", "errors", "audit", "archive"}, nil, sel)
	evs := []event.Event{
		{Body: []byte(`{"level":"INFO","n":1}`)},
		{Body: []byte(`{"level":"ERROR","n":2}`)},
		withHeader(`{"level":"ERROR","n":3}`, "kind", "audit"),
		{Body: []byte(`{"level":"DEBUG","n":4}`)},
		{Body: []byte(`not json`)},
	}
	if err := s.proc.Process(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"main":    {`{"level":"INFO","n":1}`, `{"level":"DEBUG","n":4}`, `not json`},
		"errors":  {`{"level":"ERROR","n":2}`, `{"level":"ERROR","n":3}`},
		"audit":   {`{"level":"ERROR","n":3}`},
		"archive": {`{"level":"INFO","n":1}`, `{"level":"ERROR","n":2}`, `{"level":"ERROR","n":3}`, `not json`},
	}
	for c, w := range want {
		if got := drain(t, s.chans[c]); !slices.Equal(got, w) {
			t.Errorf("%s got %q, want %q", c, got, w)
		}
	}
}

// A put blocked on a full channel returns when the source's ctx ends, long
// before the channel's keep-alive, as a refused put that also says why the
// wait ended; nothing is put.
func TestProcessorPutWaitEndsWithCtx(t *testing.T) {
	ch := newMem(t, "c1", 2, 2, "60")
	sel, err := flow.NewSelector(nil, map[string]flow.Channel{"c1": ch}, []string{"c1"})
	if err != nil {
		t.Fatal(err)
	}
	proc := flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Logger: quietLog})
	if err := proc.Process(t.Context(), events("full", 2)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() { res <- proc.Process(ctx, events("blocked", 1)) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, flow.ErrChannelFull) || !errors.Is(err, context.Canceled) || errors.Is(err, flow.ErrStopping) {
			t.Fatalf("cancelled put: err = %v, want ErrChannelFull and context.Canceled (not ErrStopping)", err)
		}
		if !strings.Contains(err.Error(), "r1") || !strings.Contains(err.Error(), "c1") {
			t.Errorf("error %q does not name the source and the channel", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a put blocked on a full channel did not return when its ctx was cancelled")
	}
	if got := drain(t, ch); !slices.Equal(got, []string{"full0", "full1"}) {
		t.Fatalf("channel holds %q after the cancelled put, want only the first two", got)
	}
	// The processor still works, and Close does not wait for the cut put.
	if err := proc.Process(t.Context(), events("after", 1)); err != nil {
		t.Fatal(err)
	}
	if err := proc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// countingSelector counts Route calls.
type countingSelector struct {
	flow.Selector
	routes int
}

func (c *countingSelector) Route(e *event.Event) ([]int, []int) {
	c.routes++
	return c.Selector.Route(e)
}

// Each event of a batch is routed once, also when the batch turns out to
// go several ways and the processor groups it.
func TestProcessorRoutesEachEventOnce(t *testing.T) {
	chans := map[string]flow.Channel{"c1": newMem(t, "c1", 100, 100, "0.05"), "c2": newMem(t, "c2", 100, 100, "0.05")}
	p := config.FromMap("a1.sources.r1.selector.", map[string]string{"type": "multiplexing", "header": "h", "mapping.a": "c1", "mapping.b": "c2"})
	inner, err := flow.NewSelector(p, chans, []string{"c1", "c2"})
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	sel := &countingSelector{Selector: inner}
	reg := metrics.NewRegistry("a1")
	proc := flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Metrics: reg, Logger: quietLog})
	for _, tc := range []struct {
		hs     []string
		c1, c2 []string
		drops  float64
	}{
		{hs: []string{"a", "a", "a"}, c1: []string{"0", "1", "2"}},
		{hs: []string{"a", "a", "b", "a", "b"}, c1: []string{"0", "1", "3"}, c2: []string{"2", "4"}},
		{hs: []string{"x", "x", "a", "x", "b"}, c1: []string{"2"}, c2: []string{"4"}, drops: 3},
	} {
		evs := make([]event.Event, len(tc.hs))
		for i, h := range tc.hs {
			evs[i] = withHeader(strconv.Itoa(i), "h", h)
		}
		sel.routes = 0
		before := dropped(reg, "r1", "no_channel")
		if err := proc.Process(t.Context(), evs); err != nil {
			t.Fatal(err)
		}
		if sel.routes != len(evs) {
			t.Errorf("%v: %d Route calls for %d events", tc.hs, sel.routes, len(evs))
		}
		if got := drain(t, chans["c1"]); !slices.Equal(got, tc.c1) && (len(got) > 0 || len(tc.c1) > 0) {
			t.Errorf("%v: c1 got %q, want %q", tc.hs, got, tc.c1)
		}
		if got := drain(t, chans["c2"]); !slices.Equal(got, tc.c2) && (len(got) > 0 || len(tc.c2) > 0) {
			t.Errorf("%v: c2 got %q, want %q", tc.hs, got, tc.c2)
		}
		if d := dropped(reg, "r1", "no_channel") - before; d != tc.drops {
			t.Errorf("%v: dropped{no_channel} grew by %v, want %v", tc.hs, d, tc.drops)
		}
	}
}
