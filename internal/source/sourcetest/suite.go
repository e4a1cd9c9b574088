package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/panics"
)

// Harness is a push source as the source suite drives it: how to build
// it, and how its senders talk to it.
type Harness struct {
	// Type names the source (its env.Type, as a config names it).
	Type string
	// New builds the source; Props are its properties (keys relative to
	// a1.sources.r1.), listening on loopback with a port the system picks.
	New   func(flow.Env, *config.Props) (flow.Source, error)
	Props map[string]string
	// Dial opens one connection (or socket) of a sender to the started
	// source at addr (see Addr). nil for a source that makes its input
	// itself (exec): then Props make it produce Generated events, with the
	// bodies SeqBody(0), SeqBody(1), ...
	Dial      func(ctx context.Context, addr string) (Session, error)
	Generated int
	// Acks: the source acknowledges what it committed (an RPC reply, an
	// HTTP status, a netcat OK), so the suite checks that it never
	// acknowledges more than the channel holds. Without acknowledgements
	// (syslog, UDP) Send returns once the bytes are written.
	Acks bool
	// Lossy: the source cannot push back (UDP), so what its socket cannot
	// hold the kernel drops, and the source counts in DatagramDropCount:
	// events delivered plus dropped must be every event sent.
	Lossy bool
	// StoppingReply is what Send's error says (a substring) when the agent
	// is stopping: Avro FAILED, HTTP 503, netcat "FAILED: agent is
	// stopping". "" for a source that has no reply: then a Session that
	// implements Closer must see its connection closed by the source.
	StoppingReply string
	// Malformed is input the source cannot read, written on a connection
	// of its own (plain TCP to Addr); nil skips the malformed input test.
	// MalformedKept: the source keeps reading that connection (syslog
	// delivers what it cannot parse, tagged) instead of closing it.
	Malformed     []byte
	MalformedKept bool
}

// Session is one connection of a sender.
type Session interface {
	// Send sends bodies, in order, as the source's clients do (one
	// request, one batch, lines, datagrams). It returns nil once the source
	// acknowledged every one (for a source without acknowledgements: once
	// they are written), and an error when it refused them or the
	// connection failed; the error's text carries the source's reply.
	Send(ctx context.Context, bodies []string) error
	Close() error
}

// ClosedWaiter is a Session that can tell whether the source closed its
// connection (for a source whose refusal is a close).
type ClosedWaiter interface {
	// ClosedBySource reports whether the source closed the connection
	// within wait.
	ClosedBySource(wait time.Duration) bool
}

// SeqBody is the body of the i-th event the suite sends.
func SeqBody(i int) string { return fmt.Sprintf("seq-%04d", i) }

// RunSourceSuite runs the contract of flow.Source for a push source: a
// full channel pushes back on the sender and loses nothing (every event
// arrives, in order, once the channel has room), nothing is acknowledged
// that the channel does not hold, whatever happens at Stop, and nothing
// enters the channel after Stop; a stopping agent refuses new work with
// the source's documented reply; malformed input on one connection closes
// only that connection, while the others keep working.
func RunSourceSuite(t *testing.T, h Harness) {
	t.Run("FullChannelPushesBack", func(t *testing.T) { suiteFull(t, h) })
	t.Run("NothingAcknowledgedPastStop", func(t *testing.T) { suiteStop(t, h) })
	t.Run("StoppingRefuses", func(t *testing.T) { suiteStopping(t, h) })
	t.Run("MalformedClosesOnlyItsConnection", func(t *testing.T) { suiteMalformed(t, h) })
}

// closer is the agent's side of a source's processor: Close makes every
// Process fail with ErrStopping.
type closer interface {
	Close(ctx context.Context) error
}

type fixture struct {
	h    Harness
	pl   *Pipeline
	src  flow.Source
	addr string // where the source listens; "" for one that does not
	env  flow.Env
	stop func() // stops the source (once)
}

func newFixture(t *testing.T, h Harness, capacity int) *fixture {
	t.Helper()
	pl := NewPipeline(t, capacity, capacity, 100*time.Millisecond)
	env := Env("r1", h.Type)
	s := New(t, h.New, env, h.Props)
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	f := &fixture{h: h, pl: pl, src: s, env: env}
	if h.Dial != nil {
		f.addr = Addr(t, s)
	}
	f.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := s.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Stop took %v", d)
			}
		})
	}
	t.Cleanup(f.stop)
	return f
}

// closeProcessor does what the agent does first at a stop: every Process
// from now on fails with ErrStopping.
func (f *fixture) closeProcessor(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.pl.Processor.(closer).Close(ctx); err != nil {
		t.Fatalf("close the processor: %v", err)
	}
}

func (f *fixture) dial(t *testing.T) Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess, err := f.h.Dial(ctx, f.addr)
	if err != nil {
		t.Fatalf("dial %s: %v", f.h.Type, err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

// sender sends SeqBody(0..n-1) in batches of batch over one session, as a
// client that retries does: a batch refused or unanswered is sent again
// (on a new connection when its connection failed) until it is
// acknowledged or ctx ends. acked holds the bodies acknowledged.
type sender struct {
	f     *fixture
	n     int
	batch int

	mu    sync.Mutex
	acked []string
	sent  atomic.Int64 // batches sent, retries included
	fails atomic.Int64 // refused or failed sends
}

func (s *sender) run(ctx context.Context) error {
	var sess Session
	defer func() {
		if sess != nil {
			_ = sess.Close()
		}
	}()
	for i := 0; i < s.n; {
		bodies := make([]string, 0, s.batch)
		for j := i; j < min(i+s.batch, s.n); j++ {
			bodies = append(bodies, SeqBody(j))
		}
		if sess == nil {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			sess, err = s.f.h.Dial(dctx, s.f.addr)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.fails.Add(1)
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		s.sent.Add(1)
		if err := sess.Send(ctx, bodies); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.fails.Add(1)
			_ = sess.Close()
			sess = nil
			time.Sleep(20 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		s.acked = append(s.acked, bodies...)
		s.mu.Unlock()
		i += len(bodies)
	}
	return nil
}

func (s *sender) ackedBodies() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.acked)
}

// drainAll takes from the channel until it has seen want distinct bodies
// of the suite's (see seqOf), or timeout passes, and returns the suite's
// bodies taken, in order.
func (f *fixture) drainAll(t *testing.T, want int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	seen := map[string]bool{}
	var all []string
	for len(seen) < want && time.Now().Before(deadline) {
		for _, b := range seqOf(Bodies(f.pl.Take(t, 100, min(200*time.Millisecond, time.Until(deadline)+time.Millisecond)))) {
			all = append(all, b)
			seen[b] = true
		}
	}
	return all
}

// seqOf returns the suite's bodies found at the end of each of bodies (a
// syslog event keeps "app: " before it), in order; the others are left
// out.
func seqOf(bodies []string) []string {
	var out []string
	for _, b := range bodies {
		if i := strings.LastIndex(b, "seq-"); i >= 0 {
			out = append(out, b[i:])
		}
	}
	return out
}

// firstDeliveries is s without repeats, each where it first appeared.
func firstDeliveries(s []string) []string {
	seen := make(map[string]bool, len(s))
	var out []string
	for _, b := range s {
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

// waitStalled waits until the channel holds events and has stopped
// growing for a while: it cannot take the source's next batch, which the
// source holds and retries. It returns how many events the channel holds.
func (f *fixture) waitStalled(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	last, since := -1, time.Now()
	for {
		n := f.pl.Channel.Len()
		switch {
		case n != last:
			last, since = n, time.Now()
		case n > 0 && time.Since(since) >= 300*time.Millisecond:
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the channel holds %d events, and was never full for 300 ms in 15 s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// suiteFull: with the channel full, the source holds its sender back: it
// acknowledges no more than the channel holds, keeps retrying, and once
// the channel has room every event arrives, in the order sent.
func suiteFull(t *testing.T, h Harness) {
	const capacity, n = 100, 500
	f := newFixture(t, h, capacity)
	var snd *sender
	total := h.Generated
	if h.Dial != nil {
		total = n
		snd = &sender{f: f, n: n, batch: 10}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		done := make(chan error, 1)
		panics.Go("source suite: sender", func() { done <- snd.run(ctx) })
		defer func() {
			if t.Failed() {
				cancel()
			}
			if err := <-done; err != nil && !t.Failed() {
				t.Errorf("the sender gave up: %v", err)
			}
		}()
	} else if total == 0 {
		t.Fatal("the harness has neither Dial nor Generated")
	}
	held := f.waitStalled(t)
	// The channel stays full for a while: the source retries, and must not
	// acknowledge what it could not put.
	time.Sleep(500 * time.Millisecond)
	if got := f.pl.Channel.Len(); got != held {
		t.Fatalf("a full channel went from %d events to %d with nothing taken", held, got)
	}
	if snd != nil && h.Acks {
		if acked := len(snd.ackedBodies()); acked > held || acked == n {
			t.Fatalf("the source acknowledged %d events of %d while the channel, full, holds %d", acked, n, held)
		}
	}
	got := f.drainAll(t, total, 30*time.Second)
	want := make([]string, total)
	for i := range want {
		want[i] = SeqBody(i)
	}
	first := firstDeliveries(got)
	if h.Lossy {
		dropped := f.counter("DatagramDropCount")
		if !slices.IsSorted(first) || len(first)+int(dropped) != total {
			t.Fatalf("%d distinct events delivered (in order: %v) and %d counted as dropped, of %d sent",
				len(first), slices.IsSorted(first), dropped, total)
		}
		if dropped > 0 {
			t.Logf("the kernel dropped %d datagrams (counted)", dropped)
		}
		return
	}
	if !slices.Equal(first, want) {
		t.Fatalf("the channel got %d distinct events of %d (first %q, last %q), want all in order",
			len(first), total, firstOr(first, 0), firstOr(first, len(first)-1))
	}
	if len(got) > total {
		t.Logf("%d events delivered twice (a sender resent a batch whose reply it did not get)", len(got)-total)
	}
	if snd != nil {
		t.Logf("%d sends, %d refused or failed while the channel was full", snd.sent.Load(), snd.fails.Load())
	}
}

// counter is the source's counter name, or 0.
func (f *fixture) counter(name string) int64 {
	var v int64
	for _, set := range f.env.Metrics.Sets() {
		if set.Name != f.env.Name {
			continue
		}
		set.Each(func(n, val string) {
			if n == name {
				v, _ = strconv.ParseInt(val, 10, 64)
			}
		})
	}
	return v
}

func firstOr(s []string, i int) string {
	if i < 0 || i >= len(s) {
		return ""
	}
	return s[i]
}

// suiteStop: a stop while the channel is full and senders wait (the
// agent's order: the processor closes, then the source stops) leaves every
// acknowledged event in the channel, and after Stop the source takes
// nothing more.
func suiteStop(t *testing.T, h Harness) {
	if h.Dial == nil {
		t.Skip("the source has no sender")
	}
	const capacity, n = 100, 300
	f := newFixture(t, h, capacity)
	snd := &sender{f: f, n: n, batch: 10}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	panics.Go("source suite: sender", func() { done <- snd.run(ctx) })
	f.waitStalled(t)
	f.closeProcessor(t)
	f.stop()
	cancel()
	select {
	case err := <-done:
		t.Logf("the sender ended: %v", err) // cancelled, or done before the stop
	case <-time.After(10 * time.Second):
		t.Fatal("the sender did not return within 10 s of the source's stop")
	}
	held := f.pl.Channel.Len()
	if h.Acks {
		acked := snd.ackedBodies()
		in := map[string]bool{}
		for _, b := range seqOf(Bodies(f.pl.Drain(t, held, 5*time.Second))) {
			in[b] = true
		}
		for _, b := range acked {
			if !in[b] {
				t.Fatalf("%s was acknowledged to its sender but is not in the channel (%d acknowledged, %d held)", b, len(acked), held)
			}
		}
		held = 0
	}
	// After Stop nothing enters the channel, whether the sender can still
	// reach the source or not.
	sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer scancel()
	if sess, err := h.Dial(sctx, f.addr); err == nil {
		err := sess.Send(sctx, []string{"after-stop"})
		_ = sess.Close()
		if h.Acks && err == nil {
			t.Fatal("a send after Stop was acknowledged")
		}
	}
	time.Sleep(200 * time.Millisecond)
	if got := f.pl.Channel.Len(); got != held {
		t.Fatalf("the channel holds %d events after Stop, %d before", got, held)
	}
}

// delivering starts the source with room in its channel and a session
// that has sent SeqBody(0).
func delivering(ctx context.Context, t *testing.T, h Harness) (*fixture, Session) {
	t.Helper()
	f := newFixture(t, h, 1000)
	sess := f.dial(t)
	if err := sess.Send(ctx, []string{SeqBody(0)}); err != nil {
		t.Fatalf("send: %v", err)
	}
	return f, sess
}

// suiteStopping: once the agent is stopping (the processor is closed, the
// source not yet stopped), a new batch is refused with the source's
// documented reply, on a connection opened before and on one opened
// after, and none of it enters the channel.
func suiteStopping(t *testing.T, h Harness) {
	if h.Dial == nil {
		t.Skip("the source has no sender")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, before := delivering(ctx, t, h)
	if got := seqOf(Bodies(f.pl.Drain(t, 1, 5*time.Second))); !slices.Equal(got, []string{SeqBody(0)}) {
		t.Fatalf("the channel holds %q, want %q", got, SeqBody(0))
	}
	f.closeProcessor(t)
	for _, which := range []string{"open before", "opened after"} {
		sess := before
		if which == "opened after" {
			var err error
			if sess, err = h.Dial(ctx, f.addr); err != nil {
				t.Logf("%s: dial refused: %v", which, err)
				continue
			}
			defer sess.Close()
		}
		err := sess.Send(ctx, []string{SeqBody(1), SeqBody(2)})
		switch {
		case h.StoppingReply != "":
			if err == nil || !strings.Contains(err.Error(), h.StoppingReply) {
				t.Errorf("%s: a send to a stopping source = %v, want a refusal saying %q", which, err, h.StoppingReply)
			}
		case h.Acks && err == nil:
			t.Errorf("%s: a send to a stopping source was acknowledged", which)
		}
		if h.StoppingReply == "" {
			if cw, ok := sess.(ClosedWaiter); ok && !cw.ClosedBySource(5*time.Second) {
				t.Errorf("%s: the stopping source did not close the connection", which)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	if got := f.pl.Channel.Len(); got != 0 {
		t.Fatalf("a stopping source put %d events into the channel", got)
	}
}

// suiteMalformed: input the source cannot read, on one connection, closes
// that connection (unless the source keeps reading it, tagged), while a
// connection opened before it and one opened after it deliver.
func suiteMalformed(t *testing.T, h Harness) {
	if h.Malformed == nil || h.Dial == nil {
		t.Skip("the source has no connections, or no input it cannot read")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, good := delivering(ctx, t, h)
	raw, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write(h.Malformed); err != nil {
		t.Fatalf("write the malformed input: %v", err)
	}
	wait := 10 * time.Second
	if h.MalformedKept {
		wait = 500 * time.Millisecond // to see that it stays open
	}
	closed := ClosedBySource(raw, wait)
	switch {
	case !h.MalformedKept && !closed:
		t.Fatalf("the connection that sent malformed input is still open after %v", wait)
	case h.MalformedKept && closed:
		t.Fatal("the source closed a connection whose input it reads on")
	}
	if err := good.Send(ctx, []string{SeqBody(1)}); err != nil {
		t.Fatalf("the connection opened before the malformed one: %v", err)
	}
	fresh := f.dial(t)
	if err := fresh.Send(ctx, []string{SeqBody(2)}); err != nil {
		t.Fatalf("a connection opened after the malformed one: %v", err)
	}
	got := f.drainAll(t, 3, 10*time.Second)
	slices.Sort(got) // two connections: no order between them
	if want := []string{SeqBody(0), SeqBody(1), SeqBody(2)}; !slices.Equal(got, want) {
		t.Fatalf("the channel holds %q, want %q", got, want)
	}
}

// ClosedBySource reports whether the peer closes c within wait, reading
// (and discarding) what it sends before: an answer such as HTTP's 400
// comes first, then the close.
func ClosedBySource(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		return true // EOF
	}
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// Addr returns the first address a started network source listens on.
func Addr(t testing.TB, s flow.Source) string {
	t.Helper()
	switch a := s.(type) {
	case interface{ Addr() net.Addr }:
		if ad := a.Addr(); ad != nil {
			return ad.String()
		}
	case interface{ Addrs() []net.Addr }:
		if ads := a.Addrs(); len(ads) > 0 {
			return ads[0].String()
		}
	case interface{ HTTPAddr() net.Addr }:
		if ad := a.HTTPAddr(); ad != nil {
			return ad.String()
		}
	}
	t.Fatalf("%T has no address", s)
	return ""
}
