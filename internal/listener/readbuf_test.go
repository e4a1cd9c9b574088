package listener

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

// newTestConn is a Conn of a group with progressTimeout, over one end of
// a pipe nobody reads (ReadBuffer tests feed Fill from readers of their own).
func newTestConn(t *testing.T, progressTimeout time.Duration) *Conn {
	t.Helper()
	g := NewGroup(Config{ProgressTimeout: progressTimeout}, Options{Source: "r1"})
	a, b := net.Pipe()
	t.Cleanup(func() {
		a.Close()
		b.Close()
		g.Shutdown(context.Background())
	})
	return newConn(a, g, time.Now())
}

// fill reads exactly n bytes of x into rb.
func fill(t *testing.T, rb *ReadBuffer, n int) {
	t.Helper()
	got, err := rb.Fill(bytes.NewReader(bytes.Repeat([]byte("x"), n)))
	if err != nil || got != n {
		t.Fatalf("Fill read %d (%v), want %d", got, err, n)
	}
}

func TestReadBufferStaysSmallForShortReads(t *testing.T) {
	budget := NewBudget(1 << 20)
	rb := NewReadBuffer(newTestConn(t, time.Second), NewBigBuffers(64<<10), budget)
	defer rb.Release()
	for range 10 {
		if !rb.Prepare(context.Background(), 1) {
			t.Fatal("Prepare refused a short read")
		}
		fill(t, rb, 100)
		rb.R = rb.W // all handled
	}
	if len(rb.Buf) != SmallReadBuffer || budget.InUse() != 0 {
		t.Fatalf("buffer %d bytes, budget in use %d; want the small buffer and nothing taken", len(rb.Buf), budget.InUse())
	}
}

// A read that fills the small buffer (a busy sender) moves the unread
// input into a large buffer when the budget has room, and keeps reading
// small when it has not, without waiting; a short read that empties the
// large buffer gives it back.
func TestReadBufferGrowsForBusySender(t *testing.T) {
	const big = 64 << 10
	for _, free := range []bool{true, false} {
		budget := NewBudget(big)
		if !free {
			budget.TryAcquire(1)
		}
		rb := NewReadBuffer(newTestConn(t, time.Second), NewBigBuffers(big), budget)
		rb.Prepare(context.Background(), 1)
		fill(t, rb, SmallReadBuffer)
		rb.R = 10 // ten bytes handled, the rest unread
		start := time.Now()
		if !rb.Prepare(context.Background(), 1) {
			t.Fatal("Prepare refused a busy sender")
		}
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Fatalf("Prepare waited %v for a busy sender", el)
		}
		want, wantUse := SmallReadBuffer, int64(0)
		if free {
			want, wantUse = big, big
		} else {
			wantUse = 1
		}
		if len(rb.Buf) != want || budget.InUse() != wantUse {
			t.Fatalf("budget free %v: buffer %d bytes, in use %d; want %d and %d", free, len(rb.Buf), budget.InUse(), want, wantUse)
		}
		if rb.W-rb.R != SmallReadBuffer-10 {
			t.Fatalf("budget free %v: %d unread bytes, want %d", free, rb.W-rb.R, SmallReadBuffer-10)
		}
		if free {
			rb.R = rb.W
			rb.Prepare(context.Background(), 1)
			fill(t, rb, 100) // a short read, handled
			rb.R = rb.W
			rb.Prepare(context.Background(), 1)
			if len(rb.Buf) != SmallReadBuffer || budget.InUse() != 0 {
				t.Fatalf("after a short read: buffer %d bytes, in use %d; want the small buffer back and nothing taken", len(rb.Buf), budget.InUse())
			}
		}
		rb.Release()
	}
}

// A message in progress that fills the small buffer waits for the budget
// (Busy meanwhile) as long as the progress timeout, at least a second, and
// Prepare fails when none came; it gets the buffer when the budget frees.
func TestReadBufferWaitsForBudget(t *testing.T) {
	const big = 64 << 10
	budget := NewBudget(big)
	other := NewHold(budget)
	other.Try(big)
	c := newTestConn(t, 100*time.Millisecond)
	rb := NewReadBuffer(c, NewBigBuffers(big), budget)
	defer rb.Release()
	fill(t, rb, SmallReadBuffer) // R is 0: one message fills the buffer
	start := time.Now()
	if rb.Prepare(context.Background(), 1) {
		t.Fatal("Prepare grew with the budget taken")
	}
	if el := time.Since(start); el < time.Second || el > 3*time.Second {
		t.Fatalf("Prepare gave up after %v, want about a second (the progress timeout is shorter)", el)
	}
	if c.State() != Receiving {
		t.Fatalf("connection %v after the wait, want receiving", c.State())
	}

	go func() {
		time.Sleep(200 * time.Millisecond)
		other.Release()
	}()
	if !rb.Prepare(context.Background(), 1) {
		t.Fatal("Prepare failed although the budget was freed during its wait")
	}
	if len(rb.Buf) != big || rb.W != SmallReadBuffer || budget.InUse() != big {
		t.Fatalf("buffer %d bytes holding %d, in use %d; want %d, %d, %d", len(rb.Buf), rb.W, budget.InUse(), big, SmallReadBuffer, big)
	}
	rb.Release()
	if budget.InUse() != 0 {
		t.Fatalf("in use %d after Release, want 0", budget.InUse())
	}
}

// Unread input moves to the front only when fewer than need bytes of space
// follow it.
func TestReadBufferCompacts(t *testing.T) {
	for _, c := range []struct {
		need      int
		wantFront bool
	}{{1, false}, {SmallReadBuffer - 200, true}} {
		rb := NewReadBuffer(newTestConn(t, time.Second), NewBigBuffers(64<<10), nil)
		fill(t, rb, 300)
		rb.R = 250
		rb.Prepare(context.Background(), c.need)
		if front := rb.R == 0 && rb.W == 50; front != c.wantFront {
			t.Errorf("need %d: unread at [%d:%d], moved to the front %v, want %v", c.need, rb.R, rb.W, front, c.wantFront)
		}
	}
}
