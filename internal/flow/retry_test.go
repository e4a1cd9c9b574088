package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestBackoffWait(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		b    flow.PutBackoff
		want []time.Duration // waits after refusals 1, 2, 3, ...
	}{
		{flow.FullBackoff, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 500 * ms, 500 * ms}},
		{flow.PutBackoff{Min: 250 * ms, Max: 4 * time.Second}, []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}},
		{flow.PutBackoff{Min: time.Second, Max: 5 * time.Second, Linear: true}, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{flow.PutBackoff{Min: 250 * ms, Max: 100 * ms}, []time.Duration{100 * ms, 100 * ms}},
	} {
		for i, want := range tc.want {
			if got := tc.b.Wait(i + 1); got != want {
				t.Errorf("%+v: wait after refusal %d = %v, want %v", tc.b, i+1, got, want)
			}
		}
	}
	// Far into a long outage the wait stays at the maximum (no overflow).
	if got := flow.FullBackoff.Wait(1 << 30); got != 500*ms {
		t.Errorf("wait after 2^30 refusals = %v", got)
	}
	if got := (flow.PutBackoff{Min: time.Second, Max: 5 * time.Second, Linear: true}).Wait(1 << 62); got != 5*time.Second {
		t.Errorf("linear wait after 2^62 refusals = %v", got)
	}
}

// scriptProc answers each Process with the next error of its script (nil
// once the script is used up), and records what each call was given.
type scriptProc struct {
	mu     sync.Mutex
	script []error
	calls  [][]string // bodies of each call
}

func (p *scriptProc) Process(_ context.Context, events []event.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var bodies []string
	for i := range events {
		bodies = append(bodies, string(events[i].Body))
		events[i].Body = []byte("changed by an interceptor")
	}
	p.calls = append(p.calls, bodies)
	if len(p.script) == 0 {
		return nil
	}
	err := p.script[0]
	p.script = p.script[1:]
	return err
}

func newRetry(t *testing.T, retryAll bool) (*flow.Retry, *metrics.SourceCounters, *testutil.LogBuffer) {
	t.Helper()
	logs := &testutil.LogBuffer{}
	c := metrics.NewSourceCounters("r1", "test")
	r := flow.NewRetry(slog.New(slog.NewTextHandler(logs, nil)), "test", "r1", c, flow.PutBackoff{Min: time.Millisecond, Max: 2 * time.Millisecond}, retryAll)
	return r, c, logs
}

func fullErr() error { return flow.FullErrorf("channel c1 is full") }

// TestRetryPut: what Put retries, what it returns at once, what it counts
// and tells, for a source that retries only a full channel and one that
// retries everything but the stop.
func TestRetryPut(t *testing.T) {
	other := errors.New("interceptor failed")
	stopping := fmt.Errorf("source r1: %w", flow.ErrStopping)
	for _, tc := range []struct {
		name      string
		retryAll  bool
		script    []error
		want      error // matched with errors.Is; nil: committed
		calls     int
		writeFail int64
		generic   int64
		streak    bool // a failure line was written
	}{
		{"committed at once", false, nil, nil, 1, 0, 0, false},
		{"full twice, then committed", false, []error{fullErr(), fullErr()}, nil, 3, 2, 0, true},
		{"closed channel: not retried", false, []error{flow.ErrClosed}, flow.ErrClosed, 1, 1, 0, false},
		{"other failure: not retried", false, []error{other}, other, 1, 0, 1, false},
		{"stopping: returned at once, not counted", false, []error{fullErr(), stopping}, flow.ErrStopping, 2, 1, 0, true},
		{"stopping at once: nothing told", false, []error{stopping}, flow.ErrStopping, 1, 0, 0, false},
		{"retry all: other failures retried", true, []error{other, flow.ErrClosed, fullErr()}, nil, 4, 2, 1, true},
		{"retry all: stopping still returned", true, []error{other, stopping}, flow.ErrStopping, 2, 0, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c, logs := newRetry(t, tc.retryAll)
			p := &scriptProc{script: tc.script}
			builds := 0
			err := r.Put(context.Background(), p, func() []event.Event {
				builds++
				return []event.Event{{Body: []byte("a")}, {Body: []byte("b")}}
			}, func() []any { return []any{"file", "/var/log/x"} })
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Put = %v, want %v", err, tc.want)
			}
			if len(p.calls) != tc.calls || builds != tc.calls {
				t.Fatalf("%d Process calls of %d builds, want %d", len(p.calls), builds, tc.calls)
			}
			for i, call := range p.calls {
				if strings.Join(call, ",") != "a,b" {
					t.Errorf("attempt %d put %q: a retry must put the batch as built, not what the last attempt left", i+1, call)
				}
			}
			if got := c.ChannelWriteFail.Load(); got != tc.writeFail {
				t.Errorf("ChannelWriteFail = %d, want %d", got, tc.writeFail)
			}
			if got := c.GenericProcessingFail.Load(); got != tc.generic {
				t.Errorf("GenericProcessingFail = %d, want %d", got, tc.generic)
			}
			out := logs.String()
			if got := strings.Contains(out, "test source could not put a batch; retrying"); got != tc.streak {
				t.Errorf("failure line written: %v, want %v; log:\n%s", got, tc.streak, out)
			}
			if tc.streak && !strings.Contains(out, "source=r1 file=/var/log/x") {
				t.Errorf("the failure line does not say where the batch came from:\n%s", out)
			}
		})
	}
}

// TestRetryPutCancelled: a ctx that ends while Put waits between attempts
// (the source is being stopped) ends it at once with ctx's error, and a ctx
// that ends during a put that fails is ctx's error too, not the put's.
func TestRetryPutCancelled(t *testing.T) {
	r, _, _ := newRetry(t, false)
	r.Backoff = flow.PutBackoff{Min: time.Hour, Max: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	p := &scriptProc{script: []error{fullErr(), fullErr()}}
	done := make(chan error, 1)
	go func() {
		done <- r.Put(ctx, p, func() []event.Event { return []event.Event{{Body: []byte("a")}} }, nil)
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Put did not return within 5 s of its ctx ending during a backoff")
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancelling := procFunc(func(context.Context, []event.Event) error {
		cancel()
		return flow.FullWaitEnded(ctx, "channel c1 is full")
	})
	if err := r.Put(ctx, cancelling, func() []event.Event { return nil }, nil); !errors.Is(err, context.Canceled) || errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("Put whose put was cut by ctx = %v, want ctx's error", err)
	}
}

type procFunc func(context.Context, []event.Event) error

func (f procFunc) Process(ctx context.Context, events []event.Event) error { return f(ctx, events) }

// TestRetryStreakRecovers: after refusals, puts that succeed for
// PutStreakHold end the streak with one recovery line.
func TestRetryStreakRecovers(t *testing.T) {
	r, _, logs := newRetry(t, false)
	now := time.Unix(1000, 0)
	r.Streak.Now = func() time.Time { return now }
	p := &scriptProc{script: []error{fullErr()}}
	build := func() []event.Event { return []event.Event{{Body: []byte("a")}} }
	if err := r.Put(context.Background(), p, build, nil); err != nil {
		t.Fatal(err)
	}
	if !r.Streak.Failing() {
		t.Fatal("no streak after a refusal")
	}
	now = now.Add(flow.PutStreakHold + time.Second)
	if err := r.Put(context.Background(), p, build, nil); err != nil {
		t.Fatal(err)
	}
	if r.Streak.Failing() || !strings.Contains(logs.String(), "test source puts batches again") {
		t.Fatalf("streak not ended after puts succeeded for PutStreakHold; log:\n%s", logs.String())
	}
}

// BenchmarkRetryPut: a put the channel takes at once costs no allocation
// in the helper.
func BenchmarkRetryPut(b *testing.B) {
	r := flow.NewRetry(quietLog, "bench", "r1", metrics.NewSourceCounters("r1", "bench"), flow.FullBackoff, false)
	events := []event.Event{{Body: []byte("a")}}
	p := plainProc{}
	ctx := context.Background()
	peer := "10.0.0.1:5140"
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Put(ctx, p, func() []event.Event { return events }, func() []any { return []any{"remote", peer} }); err != nil {
			b.Fatal(err)
		}
	}
}
