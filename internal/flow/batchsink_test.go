package flow_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// recorder is a Writer that keeps what it was given and fails on demand.
type recorder struct {
	mu       sync.Mutex
	batches  [][]string
	failNext int // fail this many writes
	started  bool
	stopped  bool
}

var errDown = errors.New("downstream down")

func (r *recorder) Write(_ context.Context, evs []event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failNext > 0 {
		r.failNext--
		return errDown
	}
	r.batches = append(r.batches, bodies(evs))
	return nil
}

func (r *recorder) Start(context.Context) error { r.started = true; return nil }
func (r *recorder) Stop(context.Context) error  { r.stopped = true; return nil }

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, b := range r.batches {
		out = append(out, b...)
	}
	return out
}

func newSink(t *testing.T, ch flow.Channel, w flow.Writer, size int) (*flow.BatchSink, *metrics.SinkCounters, *metrics.Registry) {
	t.Helper()
	reg := metrics.NewRegistry("a1")
	c := metrics.NewSinkCounters("k1", "test")
	reg.Add(c.Set)
	s := flow.NewBatchSink(flow.Env{Agent: "a1", Name: "k1", Type: "test", Metrics: reg, Channel: ch}, w, size, c)
	s.SetTakeWait(20 * time.Millisecond)
	return s, c, reg
}

func TestBatchSinkBatches(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	w := &recorder{}
	s, c, reg := newSink(t, ch, w, 100)
	if err := s.Start(t.Context()); err != nil || !w.started {
		t.Fatalf("Start: %v, writer started %v", err, w.started)
	}
	for range 3 {
		if err := testutil.PutCommit(ch, events("e", 83)); err != nil {
			t.Fatal(err)
		}
	}
	var statuses []flow.Status
	for range 4 {
		st, err := s.Process(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, st)
	}
	if !slices.Equal(statuses, []flow.Status{flow.Ready, flow.Ready, flow.Ready, flow.Backoff}) {
		t.Fatalf("statuses %v", statuses)
	}
	sizes := []int{}
	for _, b := range w.batches {
		sizes = append(sizes, len(b))
	}
	if !slices.Equal(sizes, []int{100, 100, 49}) {
		t.Fatalf("batch sizes %v, want [100 100 49]", sizes)
	}
	if err := s.Stop(t.Context()); err != nil || !w.stopped {
		t.Fatalf("Stop: %v, writer stopped %v", err, w.stopped)
	}
	want := map[string]int64{
		"BatchCompleteCount": 2, "BatchUnderflowCount": 1, "BatchEmptyCount": 1,
		"EventDrainAttemptCount": 249, "EventDrainSuccessCount": 249, "EventWriteFail": 0, "ChannelReadFail": 0,
	}
	checkCounters(t, c.Set, want)
	for _, st := range []metrics.Stage{metrics.StageChannel, metrics.StageSink, metrics.StageEndToEnd} {
		if n := histCount(t, reg, st, "k1"); n != 249 {
			t.Errorf("%s observations = %d, want 249", st, n)
		}
	}
}

func checkCounters(t *testing.T, s *metrics.Set, want map[string]int64) {
	t.Helper()
	got := map[string]string{}
	s.Each(func(k, v string) { got[k] = v })
	for k, v := range want {
		if got[k] != itoa(v) {
			t.Errorf("%s = %s, want %d", k, got[k], v)
		}
	}
}

func TestBatchSinkWriteFailureRollsBack(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	w := &recorder{failNext: 1}
	s, c, _ := newSink(t, ch, w, 10)
	if err := testutil.PutCommit(ch, events("e", 15)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Process(t.Context()); !errors.Is(err, errDown) {
		t.Fatalf("err = %v, want the writer's", err)
	}
	if ch.Len() != 15 {
		t.Fatalf("after a failed write the channel holds %d, want 15", ch.Len())
	}
	for range 2 {
		if _, err := s.Process(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.all(); !slices.Equal(got, bodies(events("e", 15))) {
		t.Fatalf("delivered %q", got)
	}
	checkCounters(t, c.Set, map[string]int64{"EventWriteFail": 1, "EventDrainAttemptCount": 25, "EventDrainSuccessCount": 15})
}

func TestBatchSinkLoneEventGoesAtOnce(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	w := &recorder{}
	s, _, _ := newSink(t, ch, w, 100)
	s.SetTakeWait(10 * time.Second)
	res := make(chan error, 1)
	go func() {
		_, err := s.Process(t.Context())
		res <- err
	}()
	t0 := time.Now()
	if err := testutil.PutCommit(ch, events("lone", 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("a lone event waited %v for its batch", d)
	}
	if got := w.all(); !slices.Equal(got, []string{"lone0"}) {
		t.Fatalf("delivered %q", got)
	}
}

func TestBatchSinkCancelledProcess(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	s, _, _ := newSink(t, ch, &recorder{}, 100)
	s.SetTakeWait(time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	st, err := s.Process(ctx)
	if err != nil || st != flow.Backoff {
		t.Fatalf("Process with a cancelled ctx on an empty channel: %v, %v", st, err)
	}
}

type countingWriter struct{ n int }

func (c *countingWriter) Write(_ context.Context, evs []event.Event) error {
	c.n += len(evs)
	return nil
}

func TestBatchSinkAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	ch := newMem(t, "c1", 100000, 100, "0.1")
	w := &countingWriter{}
	s, _, _ := newSink(t, ch, w, 100)
	evs := events("e", 100)
	allocs := testing.AllocsPerRun(200, func() {
		if err := testutil.PutCommit(ch, evs); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Process(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	// Two transaction objects (the put and the take); no per-event or per-batch slice.
	if allocs > 2 {
		t.Fatalf("put + Process of 100 events allocates %.1f times", allocs)
	}
}

// panicker is a Writer that panics while panicking is set, then records.
type panicker struct {
	recorder
	panicking atomic.Bool
}

func (p *panicker) Write(ctx context.Context, evs []event.Event) error {
	if p.panicking.Load() {
		var m map[string]int
		m["boom"]++ //nolint:staticcheck // SA5000: a runtime error, as a bug would make
	}
	return p.recorder.Write(ctx, evs)
}

// TestBatchSinkPanic: a panic in the writer rolls the batch back (the
// channel holds every event again), comes back as an error wrapping
// *panics.Error, is counted, logged once at ERROR with its stack, and
// reported by Panicked until a delivery succeeds, which logs one INFO line.
func TestBatchSinkPanic(t *testing.T) {
	ch := newMem(t, "c1", 1000, 100, "0.1")
	w := &panicker{}
	w.panicking.Store(true)
	var logs testutil.LogBuffer
	reg := metrics.NewRegistry("a1")
	c := metrics.NewSinkCounters("k1", "test")
	s := flow.NewBatchSink(flow.Env{Agent: "a1", Name: "k1", Type: "test", Metrics: reg, Channel: ch,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, w, 10, c)
	if err := testutil.PutCommit(ch, events("e", 5)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := s.Process(t.Context())
		var pe *panics.Error
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "assignment to entry in nil map") {
			t.Fatalf("attempt %d: %v, want a caught panic", i, err)
		}
		if ch.Len() != 5 {
			t.Fatalf("attempt %d: the channel holds %d, want the 5 events rolled back", i, ch.Len())
		}
	}
	if got := testutil.Metric(c.Set, "PanicCount"); got != "3" {
		t.Errorf("PanicCount %s, want 3", got)
	}
	if got := testutil.Metric(c.Set, "EventDrainSuccessCount"); got != "0" {
		t.Errorf("EventDrainSuccessCount %s after panics", got)
	}
	err := s.Panicked()
	if err == nil || !strings.Contains(err.Error(), "panicked delivering a batch (3 times") || !strings.Contains(err.Error(), "nil map") {
		t.Fatalf("Panicked: %v", err)
	}
	if n := logs.Lines(`"level":"ERROR"`); n != 1 || !strings.Contains(logs.String(), `"stack":"goroutine`) {
		t.Fatalf("%d ERROR lines, want 1 with the stack:\n%s", n, logs.String())
	}
	w.panicking.Store(false)
	if _, err := s.Process(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.Panicked() != nil || !slices.Equal(w.all(), bodies(events("e", 5))) || ch.Len() != 0 {
		t.Fatalf("after a delivery: Panicked %v, delivered %v, channel %d", s.Panicked(), w.all(), ch.Len())
	}
	if n := logs.Lines("sink delivered again after panicking"); n != 1 {
		t.Errorf("%d recovery lines:\n%s", n, logs.String())
	}
}
