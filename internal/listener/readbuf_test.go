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

// FillNow tops up the buffer with what has arrived, without waiting: the
// unread bytes move to the front, a busy sender's input moves into a large
// buffer, and nothing waiting reads nothing.
func TestReadBufferFillNow(t *testing.T) {
	g := NewGroup(Config{ProgressTimeout: time.Second}, Options{Source: "r1"})
	t.Cleanup(func() { g.Shutdown(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-acc
	defer server.Close()
	c := newConn(server, g, time.Now())

	const big = 64 << 10
	budget := NewBudget(big)
	rb := NewReadBuffer(c, NewBigBuffers(big), budget)
	if rb.FillNow() || rb.W != 0 {
		t.Fatalf("FillNow with nothing sent changed the buffer (W %d)", rb.W)
	}
	// A read fills the small buffer; a few bytes of it are handled.
	if _, err := client.Write(bytes.Repeat([]byte("x"), 3*SmallReadBuffer)); err != nil {
		t.Fatal(err)
	}
	rb.Prepare(context.Background(), 1)
	for rb.W < SmallReadBuffer {
		if _, err := rb.Fill(c); err != nil {
			t.Fatal(err)
		}
	}
	rb.R = 10
	deadline := time.Now().Add(5 * time.Second)
	for rb.W-rb.R < 3*SmallReadBuffer-10 && time.Now().Before(deadline) {
		if !rb.FillNow() {
			time.Sleep(time.Millisecond)
		}
	}
	if rb.R != 0 || rb.W != 3*SmallReadBuffer-10 {
		t.Fatalf("after FillNow: R %d W %d; want the unread bytes at the front and the rest read", rb.R, rb.W)
	}
	if len(rb.Buf) != big || budget.InUse() != big {
		t.Fatalf("buffer %d bytes, budget in use %d; want the large buffer", len(rb.Buf), budget.InUse())
	}
	if rb.FillNow() {
		t.Fatal("FillNow with nothing more sent and nothing to move reported a change")
	}
	// Unread bytes behind handled ones move to the front even when nothing
	// more came, and FillNow says so: offsets taken before are stale.
	rb.R = 100
	if !rb.FillNow() || rb.R != 0 || rb.W != 3*SmallReadBuffer-110 {
		t.Fatalf("FillNow after 100 bytes were handled: R %d W %d; want them moved and the change reported", rb.R, rb.W)
	}
	rb.Release()
}
