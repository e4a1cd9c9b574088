package downstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// fakeConn stands for a client connection; the tests inject the failures a
// real downstream produces (refused dials, closes, refusals) through it.
type fakeConn struct {
	id     int
	closed bool
}

func (f *fakeConn) Close() error { f.closed = true; return nil }

// dialer hands out fakeConns, or the errors queued in fail.
type dialer struct {
	mu    sync.Mutex
	fail  []error
	dials int
	conns []*fakeConn
}

func (d *dialer) dial(ctx context.Context) (*fakeConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	if len(d.fail) > 0 {
		err := d.fail[0]
		d.fail = d.fail[1:]
		if err != nil {
			return nil, err
		}
	}
	c := &fakeConn{id: len(d.conns)}
	d.conns = append(d.conns, c)
	return c, nil
}

func newConn(t *testing.T, opt Options) (*Conn[*fakeConn], *dialer, *metrics.SinkCounters, *testutil.LogBuffer) {
	t.Helper()
	d := &dialer{}
	c := metrics.NewSinkCounters("k1", "test")
	logs := &testutil.LogBuffer{}
	opt.Name, opt.Addr, opt.Counters = "test sink", "peer:1", c
	opt.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return New(opt, d.dial), d, c, logs
}

var errRefused = errors.New("dial: connection refused")

func ok(*fakeConn) error { return nil }

func TestBackoffFailsFastThenDials(t *testing.T) {
	conn, d, c, _ := newConn(t, Options{})
	d.fail = []error{errRefused}
	ctx := context.Background()
	if err := conn.Send(ctx, ok); !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "test sink: connect to peer:1") {
		t.Fatalf("first Send: %v, want the wrapped dial error", err)
	}
	start := time.Now()
	if err := conn.Send(ctx, ok); !errors.Is(err, ErrBackingOff) {
		t.Fatalf("Send within the backoff: %v, want ErrBackingOff", err)
	}
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Fatalf("Send within the backoff took %v, want it to fail at once", el)
	}
	if d.dials != 1 || c.ConnectionFailed.Load() != 1 {
		t.Fatalf("dials %d, ConnectionFailed %d; want 1 and 1", d.dials, c.ConnectionFailed.Load())
	}
	time.Sleep(minBackoff)
	if err := conn.Send(ctx, ok); err != nil {
		t.Fatalf("Send after the backoff: %v", err)
	}
	if d.dials != 2 || c.ConnectionCreated.Load() != 1 || conn.Backoff() != 0 || conn.Failures() != 0 {
		t.Fatalf("dials %d created %d backoff %v failures %d; want 2, 1, 0, 0", d.dials, c.ConnectionCreated.Load(), conn.Backoff(), conn.Failures())
	}
}

func TestWaitBackoff(t *testing.T) {
	conn, d, _, _ := newConn(t, Options{WaitBackoff: true})
	d.fail = []error{errRefused}
	ctx := context.Background()
	_ = conn.Send(ctx, ok) // refused, as set up
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := conn.Send(short, ok); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send with a deadline shorter than the backoff: %v, want the deadline", err)
	}
	if d.dials != 1 {
		t.Fatalf("dials %d, want 1 (none while waiting)", d.dials)
	}
	start := time.Now()
	if err := conn.Send(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < minBackoff/2 {
		t.Fatalf("Send dialed after %v, want it to wait out the backoff", el)
	}
}

func TestBackoffDoublesToCap(t *testing.T) {
	conn, d, _, _ := newConn(t, Options{})
	var got []time.Duration
	for range 8 {
		d.fail = []error{errRefused}
		conn.next = time.Time{}                 // skip the wait: only the sequence matters here
		_ = conn.Send(context.Background(), ok) // refused, as set up
		got = append(got, conn.Backoff())
	}
	want := fmt.Sprint([]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second})
	if fmt.Sprint(got) != want {
		t.Fatalf("backoffs %v, want %v", got, want)
	}
}

// A refused batch counts as a failure but keeps the connection, which the
// next batch uses without dialing.
func TestRefusedKeepsConnection(t *testing.T) {
	conn, d, c, _ := newConn(t, Options{})
	reply := errors.New("peer replied FAILED")
	err := conn.Send(context.Background(), func(*fakeConn) error { return Refused(reply) })
	if !errors.Is(err, reply) || err.Error() != reply.Error() || !logthrottle.Reported(err) {
		t.Fatalf("Send: %v, want the refusal itself, marked as told", err)
	}
	cur, open := conn.Current()
	if !open || cur.closed || conn.Failures() != 1 || conn.Backoff() != minBackoff {
		t.Fatalf("open %v closed %v failures %d backoff %v; want the connection kept, one failure", open, cur != nil && cur.closed, conn.Failures(), conn.Backoff())
	}
	if err := conn.Send(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	if d.dials != 1 || c.ConnectionClosed.Load() != 0 {
		t.Fatalf("dials %d closed %d, want 1 and 0", d.dials, c.ConnectionClosed.Load())
	}
}

// A connection that had served a batch and then fails because the peer
// closed or reset it is replaced, and the batch sent again once, at once;
// any other failure, or one on a fresh connection, is not retried.
func TestResendOnceAfterPeerClose(t *testing.T) {
	timeout := errors.New("i/o timeout")
	for _, tc := range []struct {
		name      string
		reused    bool
		errs      []error // what each call of send returns
		wantErr   error
		wantCalls int
		wantDials int
	}{
		{"EOF on a reused connection", true, []error{io.EOF, nil}, nil, 2, 2},
		{"reset on a reused connection", true, []error{fmt.Errorf("write: %w", syscall.ECONNRESET), nil}, nil, 2, 2},
		{"broken pipe on a reused connection", true, []error{fmt.Errorf("write: %w", syscall.EPIPE), nil}, nil, 2, 2},
		{"closed again on the new connection", true, []error{io.EOF, io.ErrUnexpectedEOF}, io.ErrUnexpectedEOF, 2, 2},
		{"EOF on a fresh connection", false, []error{io.EOF}, io.EOF, 1, 1},
		{"timeout on a reused connection", true, []error{timeout}, timeout, 1, 1},
		{"refusal on a reused connection", true, []error{Refused(io.EOF)}, io.EOF, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, d, c, logs := newConn(t, Options{})
			ctx := context.Background()
			if tc.reused {
				if err := conn.Send(ctx, ok); err != nil {
					t.Fatal(err)
				}
			}
			calls := 0
			var used []*fakeConn
			err := conn.Send(ctx, func(fc *fakeConn) error {
				used = append(used, fc)
				calls++
				return tc.errs[calls-1]
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Send: %v, want %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Fatalf("send called %d times, want %d", calls, tc.wantCalls)
			}
			if got := d.dials; got != tc.wantDials {
				t.Fatalf("dials %d, want %d", got, tc.wantDials)
			}
			if calls == 2 && (used[0] == used[1] || !used[0].closed) {
				t.Fatal("the batch was sent again on the same connection, or the old one left open")
			}
			wantFailures := 0
			if err != nil {
				wantFailures = 1
			}
			if conn.Failures() != wantFailures || c.ConnectionFailed.Load() != 0 {
				t.Fatalf("failures %d ConnectionFailed %d, want %d and 0", conn.Failures(), c.ConnectionFailed.Load(), wantFailures)
			}
			if n := logs.Count("delivery failed"); n != wantFailures {
				t.Fatalf("%d WARN lines, want %d", n, wantFailures)
			}
		})
	}
}

func TestResetInterval(t *testing.T) {
	conn, d, c, _ := newConn(t, Options{ResetInterval: time.Nanosecond})
	for range 3 {
		if err := conn.Send(context.Background(), ok); err != nil {
			t.Fatal(err)
		}
	}
	if d.dials != 3 || c.ConnectionCreated.Load() != 3 || c.ConnectionClosed.Load() != 2 {
		t.Fatalf("dials %d created %d closed %d, want 3 3 2", d.dials, c.ConnectionCreated.Load(), c.ConnectionClosed.Load())
	}
	for i, fc := range d.conns[:2] {
		if !fc.closed {
			t.Fatalf("connection %d left open after its reset", i)
		}
	}
}

// Each streak of failures is told the same way (logthrottle.Streak): its
// first failure at once, then, when it ends, one summary of the rest right
// before one "delivering again" line with the streak's length; nothing of
// it comes after. Every error Send returns is marked as told, so the sink
// runner does not log it a second time.
func TestLogsOncePerStreak(t *testing.T) {
	conn, _, _, logs := newConn(t, Options{})
	fail := func(*fakeConn) error { return Refused(errors.New("FAILED")) }
	for range 2 {
		for range 5 {
			if err := conn.Send(context.Background(), fail); !logthrottle.Reported(err) {
				t.Fatalf("Send: %v, not marked as told", err)
			}
		}
		if err := conn.Send(context.Background(), ok); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, "level=DEBUG") {
			continue
		}
		_, l, _ = strings.Cut(l, " level=") // drop the time
		got = append(got, regexp.MustCompile(`(failing_for|recovered_after)=\S+`).ReplaceAllString(l, "$1=D"))
	}
	streak := []string{
		`WARN msg="test sink: delivery failed; the events stay in the channel and will be sent again" addr=peer:1 retry_in=100ms err=FAILED`,
		`WARN msg="test sink: delivery failed; the events stay in the channel and will be sent again (repeated)" addr=peer:1 retry_in=1.6s err=FAILED failures=5 failing_for=D`,
		`INFO msg="test sink: delivering again" addr=peer:1 recovered_after=D failures=5`,
	}
	want := append(append([]string(nil), streak...), streak...)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines for two streaks of 5 failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A dial cut short by the caller's context (the agent stopping) is not the
// downstream's failure: nothing is counted and no backoff starts.
func TestCancelledDialNotCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	conn, d, c, _ := newConn(t, Options{})
	d.fail = []error{context.Canceled}
	if err := conn.Send(ctx, ok); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send: %v, want canceled", err)
	}
	if c.ConnectionFailed.Load() != 0 || conn.Failures() != 0 || conn.Backoff() != 0 {
		t.Fatalf("ConnectionFailed %d failures %d backoff %v, want nothing counted", c.ConnectionFailed.Load(), conn.Failures(), conn.Backoff())
	}
}
