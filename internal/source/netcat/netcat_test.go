package netcatsource

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newTCP(tb testing.TB, props map[string]string) *Source {
	tb.Helper()
	return sourcetest.New(tb, New, sourcetest.Env("r1", "netcat"), sourcetest.Loopback(props)).(*Source)
}

func start(tb testing.TB, s flow.Source, p flow.Processor) {
	tb.Helper()
	sourcetest.Start(tb, s, p)
}

func dial(tb testing.TB, addr net.Addr) *net.TCPConn {
	tb.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// readAll reads c until EOF or a 5 s deadline.
func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read replies: %v (got %q)", err, b)
	}
	return string(b)
}

func TestLinesBecomeEvents(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		send  string
		want  []string
		reply string
	}{
		{"lines", nil, "one\ntwo\nthree\n", []string{"one", "two", "three"}, "OK\nOK\nOK\n"},
		// Flume's netcat splits on '\n' only and keeps a '\r' in the body.
		{"crlf kept", nil, "a\r\nb\r\n", []string{"a\r", "b\r"}, "OK\nOK\n"},
		{"empty lines", nil, "\n\nx\n", []string{"", "", "x"}, "OK\nOK\nOK\n"},
		{"no acks", map[string]string{"ack-every-event": "false"}, "a\nb\n", []string{"a", "b"}, ""},
		{"utf-8", nil, "héllo wörld ✓\n", []string{"héllo wörld ✓"}, "OK\n"},
		{"small batches", map[string]string{"batchSize": "2"}, "1\n2\n3\n4\n5\n", []string{"1", "2", "3", "4", "5"}, "OK\nOK\nOK\nOK\nOK\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			s := newTCP(t, tt.props)
			start(t, s, pl.Processor)
			c := dial(t, s.Addr())
			if _, err := c.Write([]byte(tt.send)); err != nil {
				t.Fatal(err)
			}
			got := pl.Drain(t, len(tt.want), 5*time.Second)
			if !slices.Equal(sourcetest.Bodies(got), tt.want) {
				t.Fatalf("bodies = %q, want %q", sourcetest.Bodies(got), tt.want)
			}
			for _, e := range got {
				if e.ReceivedAt == 0 || len(e.Headers) != 0 {
					t.Errorf("event %q: ReceivedAt %d, headers %v; want a time and no headers", e.Body, e.ReceivedAt, e.Headers)
				}
			}
			c.CloseWrite()
			if r := readAll(t, c); r != tt.reply {
				t.Errorf("replies = %q, want %q", r, tt.reply)
			}
			if n := s.counters.EventAccepted.Load(); n != int64(len(tt.want)) {
				t.Errorf("EventAcceptedCount = %d, want %d", n, len(tt.want))
			}
		})
	}
}

// An over-long line is answered as Flume answers it, after the lines before
// it were committed and acknowledged, and the connection is closed.
func TestOverlongLine(t *testing.T) {
	tests := []struct {
		name string
		send string
		want []string
		fits bool
	}{
		{"fits exactly", "123456789\n", []string{"123456789"}, true},
		{"one too many", "ok\n1234567890\nnever\n", []string{"ok"}, false},
		{"no newline yet", "ok\n1234567890", []string{"ok"}, false},
		// Flume counts chars, not bytes: 9 two-byte chars and the newline fit.
		{"multibyte fits", "ééééééééé\n", []string{"ééééééééé"}, true},
		{"multibyte too long", "éééééééééé\n", nil, false},
		// A char outside the BMP is two Java chars.
		{"surrogate pair fits", "1234567😀\n", []string{"1234567😀"}, true},
		{"surrogate pair too long", "12345678😀\n", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
			s := newTCP(t, map[string]string{"max-line-length": "10"})
			start(t, s, pl.Processor)
			c := dial(t, s.Addr())
			c.Write([]byte(tt.send))
			got := pl.Drain(t, len(tt.want), 5*time.Second)
			if !slices.Equal(sourcetest.Bodies(got), tt.want) {
				t.Fatalf("bodies = %q, want %q", sourcetest.Bodies(got), tt.want)
			}
			wantReply := strings.Repeat("OK\n", len(tt.want))
			if !tt.fits {
				wantReply += "FAILED: Event exceeds the maximum length (10 chars, including newline)\n"
			} else {
				c.CloseWrite()
			}
			// The source closes the connection after FAILED, so this reads to EOF.
			if r := readAll(t, c); r != wantReply {
				t.Errorf("replies = %q, want %q", r, wantReply)
			}
			if !tt.fits && s.counters.EventReadFail.Load() != 1 {
				t.Errorf("EventReadFail = %d, want 1", s.counters.EventReadFail.Load())
			}
		})
	}
}

// A client that leaves in the middle of a line loses only that line.
func TestDisconnectMidLine(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newTCP(t, nil)
	start(t, s, pl.Processor)
	c := dial(t, s.Addr())
	c.Write([]byte("a\nb\npartial line"))
	c.Close()
	got := pl.Drain(t, 2, 5*time.Second)
	if !slices.Equal(sourcetest.Bodies(got), []string{"a", "b"}) {
		t.Fatalf("bodies = %q, want a, b", sourcetest.Bodies(got))
	}
	if !testutil.Eventually(func() bool { return s.counters.EventReadFail.Load() == 1 }, 5*time.Second) {
		t.Errorf("EventReadFail = %d, want 1", s.counters.EventReadFail.Load())
	}
	if extra := pl.Take(t, 10, 50*time.Millisecond); len(extra) != 0 {
		t.Errorf("the partial line became an event: %q", sourcetest.Bodies(extra))
	}
	if !testutil.Eventually(func() bool { return s.counters.OpenConnection.Load() == 0 }, 5*time.Second) {
		t.Errorf("OpenConnectionCount = %d after the client left, want 0", s.counters.OpenConnection.Load())
	}
}

// No OK is sent before the commit; a full channel stops the source reading,
// the sender's writes block, and once the channel drains every line arrives
// exactly once, in order, and is acknowledged.
func TestBackpressure(t *testing.T) {
	const capacity = 50
	pl := sourcetest.NewPipeline(t, capacity, capacity, 200*time.Millisecond)
	s := newTCP(t, map[string]string{"batchSize": "10"})
	start(t, s, pl.Processor)
	c := dial(t, s.Addr())
	c.SetWriteBuffer(16 << 10) // keep the kernel from absorbing much of the stream

	const lines = 20000
	line := strings.Repeat("x", 500)
	var written atomic.Int64
	writeErr := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(c, 8<<10)
		for i := range lines {
			if _, err := fmt.Fprintf(w, "%06d %s\n", i, line); err != nil {
				writeErr <- err
				return
			}
			written.Store(int64(i))
		}
		writeErr <- w.Flush()
	}()
	var oks atomic.Int64
	readDone := make(chan error, 1)
	go func() {
		r := bufio.NewReader(c)
		for oks.Load() < lines {
			l, err := r.ReadString('\n')
			if err != nil {
				readDone <- err
				return
			}
			if l != "OK\n" {
				readDone <- fmt.Errorf("reply %q", l)
				return
			}
			oks.Add(1)
		}
		readDone <- nil
	}()

	// Full: the source keeps retrying a batch that does not fit, has stopped
	// reading, so the sender stalls well short of the end, and nothing beyond
	// what was committed is acknowledged.
	if !testutil.Eventually(func() bool { return s.counters.ChannelWriteFail.Load() >= 2 }, 5*time.Second) {
		t.Fatal("the source never retried a full channel")
	}
	held, w1 := pl.Channel.Len(), written.Load()
	if held <= capacity-10 {
		t.Fatalf("channel holds %d events; a batch of at most 10 should not fit in the %d left", held, capacity-held)
	}
	time.Sleep(300 * time.Millisecond) // a negative: nothing may move meanwhile
	if w2 := written.Load(); w2 >= lines-1 || w2 != w1 {
		t.Fatalf("sender wrote %d then %d of %d lines while the channel was full; want it blocked", w1, w2, lines)
	}
	if n := oks.Load(); n != int64(held) {
		t.Fatalf("%d OKs while %d events are committed", n, held)
	}
	if n := pl.Channel.Len(); n != held {
		t.Fatalf("channel holds %d events, then %d with no taker", held, n)
	}

	got := sourcetest.Bodies(pl.Drain(t, lines, 30*time.Second))
	if len(got) != lines {
		t.Fatalf("drained %d events, want %d", len(got), lines)
	}
	for i, b := range got {
		if want := fmt.Sprintf("%06d %s", i, line); b != want {
			t.Fatalf("event %d = %.20q..., want %.20q...", i, b, want)
		}
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	if err := <-readDone; err != nil {
		t.Fatalf("reading OKs: %v", err)
	}
	if n := s.counters.EventAccepted.Load(); n != lines {
		t.Errorf("EventAcceptedCount = %d, want %d", n, lines)
	}
}

func TestManyConnections(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 10000, 100, time.Second)
	s := newTCP(t, nil)
	start(t, s, pl.Processor)
	const conns, lines = 8, 500
	var wg sync.WaitGroup
	for k := range conns {
		c := dial(t, s.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b bytes.Buffer
			for i := range lines {
				fmt.Fprintf(&b, "c%d-%d\n", k, i)
			}
			c.Write(b.Bytes())
			c.CloseWrite()
			io.Copy(io.Discard, c)
		}()
	}
	got := pl.Drain(t, conns*lines, 10*time.Second)
	wg.Wait()
	next := make([]int, conns)
	for _, e := range got {
		var k, i int
		if _, err := fmt.Sscanf(string(e.Body), "c%d-%d", &k, &i); err != nil {
			t.Fatalf("body %q: %v", e.Body, err)
		}
		if i != next[k] {
			t.Fatalf("connection %d: line %d after %d", k, i, next[k]-1)
		}
		next[k]++
	}
	for k, n := range next {
		if n != lines {
			t.Errorf("connection %d: %d lines, want %d", k, n, lines)
		}
	}
}

// Stop ends idle connections and a handler waiting for channel space.
func TestStop(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 1, 1, 50*time.Millisecond)
	s := newTCP(t, nil)
	if err := s.Start(context.Background(), pl.Processor); err != nil {
		t.Fatal(err)
	}
	idle := dial(t, s.Addr())
	busy := dial(t, s.Addr())
	busy.Write([]byte("a\nb\nc\n")) // one fits; the rest waits for space
	if !testutil.Eventually(func() bool { return s.counters.ChannelWriteFail.Load() > 0 }, 5*time.Second) {
		t.Fatal("the source never hit the full channel")
	}
	addr := s.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, c := range []net.Conn{idle, busy} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("after stop: read %q, %v; want the connection closed", b, err)
		}
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("the listener still accepts after stop")
	}
}

func TestBadProperties(t *testing.T) {
	tests := []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{"port": "1"}, "a1.sources.r1.bind: missing required property"},
		{map[string]string{"bind": "x"}, "a1.sources.r1.port: missing required property"},
		{map[string]string{"bind": "x", "port": "70000"}, "port: 70000 is out of range"},
		{map[string]string{"bind": "x", "port": "1", "encoding": "latin1"}, `encoding "latin1" is not supported`},
		{map[string]string{"bind": "x", "port": "1", "max-line-length": "1"}, "max-line-length: 1 is out of range"},
		{map[string]string{"bind": "x", "port": "1", "ack-every-event": "yes"}, `"yes" is not a boolean`},
	}
	for _, tt := range tests {
		p := config.FromMap("a1.sources.r1.", tt.props)
		if _, err := New(sourcetest.Env("r1", "netcat"), p); err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("props %v: err = %v, want %q", tt.props, err, tt.want)
		}
	}
}

// The FAILED answer reaches a client that goes on sending after its
// over-long line: the connection is not reset under it.
func TestOverlongLineWhileStreaming(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newTCP(t, map[string]string{"max-line-length": "10"})
	start(t, s, pl.Processor)
	c := dial(t, s.Addr())
	go func() {
		c.Write([]byte("12345678901234\n"))
		junk := bytes.Repeat([]byte("x\n"), 1<<16)
		for range 8 {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r, err := bufio.NewReader(c).ReadString('\n')
	if want := "FAILED: Event exceeds the maximum length (10 chars, including newline)\n"; r != want {
		t.Fatalf("reply %q, %v; want %q", r, err, want)
	}
}

// compactor is an interceptor that rewrites the batch in place the way a
// filter does: it keeps every event but moves them (reversing the batch) and
// marks each, so a source that retried with the rewritten slice would send
// duplicates, lose events or double-mark them.
type compactor struct{}

func (compactor) Intercept(events []event.Event) []event.Event {
	slices.Reverse(events)
	for i := range events {
		events[i].Body = append([]byte("seen:"), events[i].Body...)
	}
	return events
}

// Retries after a full channel start from the lines as read, not from what
// the interceptors made of the failed attempt.
func TestRetryRebuildsEvents(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 5, 5, 0)
	sel, err := flow.NewSelector(nil, map[string]flow.Channel{"c1": pl.Channel}, []string{"c1"})
	if err != nil {
		t.Fatal(err)
	}
	proc := flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Interceptors: []flow.Interceptor{compactor{}}})
	s := newTCP(t, map[string]string{"batchSize": "4", "ack-every-event": "false"})
	start(t, s, proc)
	c := dial(t, s.Addr())
	var b bytes.Buffer
	for i := range 40 {
		fmt.Fprintf(&b, "%d\n", i)
	}
	c.Write(b.Bytes())
	if !testutil.Eventually(func() bool { return s.counters.ChannelWriteFail.Load() >= 2 }, 5*time.Second) {
		t.Fatal("the source never retried a full channel")
	}
	got := sourcetest.Bodies(pl.Drain(t, 40, 10*time.Second))
	slices.Sort(got)
	want := make([]string, 40)
	for i := range want {
		want[i] = fmt.Sprintf("seen:%d", i)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want each line once, marked once", got)
	}
}

// sendPiledUp sends one line, and while the source is busy with it, lines
// more lines of 256 bytes, which pile up in the socket; then it lets the
// source go on and returns the sizes of the batches after the first.
func sendPiledUp(t *testing.T, s *Source, p *sourcetest.HoldProcessor, lines int) []int {
	t.Helper()
	start(t, s, p)
	c := dial(t, s.Addr())
	if _, err := c.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	<-p.First() // the handler is busy with the first line
	line := strings.Repeat("x", 255) + "\n"
	if _, err := c.Write([]byte(strings.Repeat(line, lines))); err != nil {
		t.Fatal(err)
	}
	p.Release()
	sizes, _ := p.Wait(t, lines+1, 10*time.Second)
	return sizes[1:]
}

// With batchSize left at its default, a batch grows past 100 lines to the
// channels' transactionCapacity (flow.Batching) while lines are already
// there: 3000 waiting lines go in three commits of 1000, not thirty of 100,
// and not 1000 + 24 per read of a 256 KiB buffer (the rest of a read is
// topped up with what has arrived before it is cut).
func TestDefaultBatchGrowsToTransactionCapacity(t *testing.T) {
	s := newTCP(t, map[string]string{"ack-every-event": "false"})
	p := sourcetest.NewHoldProcessor(1000)
	sizes := sendPiledUp(t, s, p, 3000)
	if !slices.Equal(sizes, []int{1000, 1000, 1000}) {
		t.Fatalf("batches %v after the first line; want [1000 1000 1000]", sizes)
	}
}

// The rest of a buffer after a full batch is topped up before it is cut,
// which moves the unread lines to the front of the buffer: every line must
// still arrive once, in order, unchanged, when nothing more came to top up
// with (1010 lines in a buffer of 1024: batches of 1000 and 10) and when
// more did (3000).
func TestToppedUpBatchesKeepTheirLines(t *testing.T) {
	for _, n := range []int{1010, 3000} {
		s := newTCP(t, map[string]string{"ack-every-event": "false"})
		p := sourcetest.NewHoldProcessor(1000)
		start(t, s, p)
		c := dial(t, s.Addr())
		if _, err := c.Write([]byte("first\n")); err != nil {
			t.Fatal(err)
		}
		<-p.First()
		var b strings.Builder
		want := []string{"first"}
		for i := range n {
			line := fmt.Sprintf("line %05d ", i)
			line += strings.Repeat("x", 255-len(line))
			b.WriteString(line + "\n")
			want = append(want, line)
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		p.Release()
		sizes, got := p.Wait(t, n+1, 10*time.Second)
		if !slices.Equal(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("%d lines in batches %v: line %d is %.12q, want %.12q", n, sizes, i, got[i], want[i])
				}
			}
			t.Fatalf("%d lines in batches %v: got %d lines, want %d", n, sizes, len(got), len(want))
		}
	}
}

// Lines that come in two parts, the first ending in a partial line (so the
// batch of the first part leaves unread bytes behind handled ones): the
// second part's batch is topped up, which moves the unread bytes to the
// front of the buffer even when nothing more came, and its lines must
// arrive unchanged.
func TestToppedUpBatchAfterAPartialLine(t *testing.T) {
	s := newTCP(t, map[string]string{"ack-every-event": "false"})
	p := sourcetest.NewHoldProcessor(1000)
	p.Release()
	start(t, s, p)
	c := dial(t, s.Addr())
	var want []string
	lines := func(from, n int) string {
		var b strings.Builder
		for i := from; i < from+n; i++ {
			line := fmt.Sprintf("line %05d ", i)
			line += strings.Repeat("x", 255-len(line))
			b.WriteString(line + "\n")
			want = append(want, line)
		}
		return b.String()
	}
	// The first part (more than the connection's small buffer holds, so it
	// reads into a large one) ends 100 bytes into line 20; the second is
	// longer than the first, so moving it to the front of the buffer
	// overwrites where it was.
	first := lines(0, 20)
	second := lines(20, 100)
	for _, part := range []string{first + second[:100], second[100:]} {
		if _, err := c.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the source handles it before the next part
	}
	sizes, bodies := p.Wait(t, len(want), 10*time.Second)
	for i := range want {
		if bodies[i] != want[i] {
			t.Fatalf("line %d is %.12q, want %.12q (batches %v)", i, bodies[i], want[i], sizes)
		}
	}
}

// An explicit batchSize stays a maximum, as in Flume, whatever the
// channels' transactionCapacity.
func TestExplicitBatchSizeIsAMaximum(t *testing.T) {
	s := newTCP(t, map[string]string{"ack-every-event": "false", "batchSize": "100"})
	p := sourcetest.NewHoldProcessor(1000)
	sizes := sendPiledUp(t, s, p, 3000)
	if m := slices.Max(sizes); m != 100 {
		t.Fatalf("largest batch %d lines (batches %v); want 100, the batchSize set", m, sizes)
	}
}

// With batchSize 1000 the connection's large read buffer holds a batch of
// 1000 lines of 256 bytes (256 KiB), so lines that are already waiting go
// into one commit, not four: each commit to a file channel waits for an
// fdatasync (issue 17). A 64 KiB buffer holds at most 256 such lines.
func TestReadBufferFitsTheBatch(t *testing.T) {
	s := newTCP(t, map[string]string{"batchSize": "1000", "ack-every-event": "false"})
	p := sourcetest.NewHoldProcessor(0)
	start(t, s, p)
	c := dial(t, s.Addr())
	if _, err := c.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	<-p.First() // the handler is busy with the first line
	const lines = 3000
	line := strings.Repeat("x", 255) + "\n"
	if _, err := c.Write([]byte(strings.Repeat(line, lines))); err != nil {
		t.Fatal(err)
	}
	p.Release()
	sizes, _ := p.Wait(t, lines+1, 10*time.Second)
	if m := slices.Max(sizes); m <= 256 {
		t.Fatalf("largest batch %d lines of 256 bytes (batches %v); want one read to hold more than 64 KiB", m, sizes)
	}
}
