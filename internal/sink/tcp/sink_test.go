package tcpsink

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newChannel(t *testing.T) flow.Channel {
	t.Helper()
	ch, err := memorychannel.New(flow.Env{Name: "c1", Type: "memory"},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "100000", "transactionCapacity": "1000"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop(context.Background()) })
	return ch
}

func newSink(t *testing.T, ch flow.Channel, addr string, batch int) (flow.Sink, *Writer) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	p := config.FromMap("a1.sinks.k1.", map[string]string{
		"hostname": host, "port": port, "batchSize": strconv.Itoa(batch),
		"connect-timeout": "1000", "request-timeout": "5000",
	})
	s, w := build(flow.Env{Name: "k1", Type: "tcp", Channel: ch}, p)
	if p.Err() != nil {
		t.Fatal(p.Err())
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s, w
}

// drain calls Process until the channel is empty, failing on any error.
func drain(t *testing.T, s flow.Sink, ch flow.Channel) {
	t.Helper()
	for ch.Len() > 0 {
		if _, err := s.Process(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSinkDeliversInOrder(t *testing.T) {
	p := newPeer(t, "", nil)
	ch := newChannel(t)
	s, _ := newSink(t, ch, p.addr(), 100)
	evs := testutil.Events("e", 1000)
	for i := 0; i < len(evs); i += 250 {
		if err := testutil.PutCommit(ch, evs[i:i+250]); err != nil {
			t.Fatal(err)
		}
		drain(t, s, ch)
	}
	p.waitLines(t, 0, len(evs))
	if got := p.all(); !equal(got, testutil.Bodies(evs)) {
		t.Fatalf("peer got %d lines, not the %d bodies in order", len(got), len(evs))
	}
}

// TestSinkKeepsEventsWhilePeerIsDown: with nothing listening, Process fails
// and the events stay in the channel; once the peer listens they are all
// delivered, in order.
func TestSinkKeepsEventsWhilePeerIsDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ch := newChannel(t)
	s, _ := newSink(t, ch, addr, 100)
	evs := testutil.Events("e", 300)
	if err := testutil.PutCommit(ch, evs); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Process(context.Background()); err == nil {
			t.Fatal("Process succeeded with the peer down")
		}
		if n := ch.Len(); n != len(evs) {
			t.Fatalf("channel holds %d events after a failed delivery, want %d", n, len(evs))
		}
	}
	p := newPeer(t, addr, nil)
	drain(t, s, ch)
	p.waitLines(t, 0, len(evs))
	if got := p.all(); !equal(got, testutil.Bodies(evs)) {
		t.Fatalf("peer got %d lines, not the %d bodies in order", len(got), len(evs))
	}
}

// TestSinkRetriesAfterPeerResetMidStream: the first connection is reset in
// the middle of a batch; the batch is rolled back and written again on a new
// connection. Every event arrives, in order, on the second connection; the
// first saw a prefix (at-least-once).
func TestSinkRetriesAfterPeerResetMidStream(t *testing.T) {
	const cut = 150
	p := newPeer(t, "", func(i int, c net.Conn, p *peer) {
		if i == 0 {
			c.(*net.TCPConn).SetReadBuffer(16 << 10)
			p.readLines(i, c, cut)
			c.(*net.TCPConn).SetLinger(0)
			return
		}
		p.readLines(i, c, -1)
	})
	ch := newChannel(t)
	s, w := newSink(t, ch, p.addr(), 1000)
	// Small socket buffers, so the batch cannot fit in them.
	w.onDial = func(c *net.TCPConn) { c.SetWriteBuffer(32 << 10) }
	evs := testutil.Events("e", 1000)
	pad := strings.Repeat("x", 2<<10)
	for i := range evs {
		evs[i].Body = append(evs[i].Body, pad...)
	}
	want := testutil.Bodies(evs)
	if err := testutil.PutCommit(ch, evs); err != nil {
		t.Fatal(err)
	}
	failures := 0
	for ch.Len() > 0 {
		if _, err := s.Process(context.Background()); err != nil {
			failures++
			if ch.Len() != len(want) {
				t.Fatalf("channel holds %d events after a failed batch, want %d", ch.Len(), len(want))
			}
		}
	}
	if failures == 0 {
		t.Fatal("no batch failed: the reset was not seen")
	}
	p.waitLines(t, 1, len(want))
	p.mu.Lock()
	first, second := p.conns[0], p.conns[1]
	p.mu.Unlock()
	if !equal(first, want[:len(first)]) {
		t.Fatal("first connection did not get a prefix of the batch")
	}
	if !equal(second, want) {
		t.Fatalf("second connection got %d lines, not all %d in order", len(second), len(want))
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		err   string
	}{
		{"minimal", map[string]string{"hostname": "localhost", "port": "5000"}, ""},
		{"all", map[string]string{"hostname": "::1", "port": "5000", "batchSize": "500", "connect-timeout": "100", "request-timeout": "200"}, ""},
		{"no hostname", map[string]string{"port": "5000"}, "a1.sinks.k1.hostname: missing required property"},
		{"no port", map[string]string{"hostname": "h"}, "a1.sinks.k1.port: missing required property"},
		{"bad port", map[string]string{"hostname": "h", "port": "70000"}, "a1.sinks.k1.port: 70000 is out of range"},
		{"bad timeout", map[string]string{"hostname": "h", "port": "1", "connect-timeout": "0"}, "connect-timeout: 0 is out of range"},
		{"Flume's batch-size spelling", map[string]string{"hostname": "h", "port": "1", "batch-size": "5"}, "a1.sinks.k1.batch-size: ignored: sluice does not read it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := config.FromMap("a1.sinks.k1.", tt.props)
			if _, err := New(flow.Env{Name: "k1", Type: "tcp"}, p); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			if tt.err == "" && p.Err() != nil || tt.err != "" && (p.Err() == nil || !strings.Contains(p.Err().Error(), tt.err)) {
				t.Errorf("problems %v, want %q", p.Err(), tt.err)
			}
		})
	}
}

// signal is a slog handler that reports each WARN record's message.
type signal chan string

func (s signal) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (s signal) Handle(_ context.Context, r slog.Record) error {
	select {
	case s <- r.Message:
	default:
	}
	return nil
}
func (s signal) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s signal) WithGroup(string) slog.Handler      { return s }

// TestRunnerDeliversWhenPeerComesBack runs the sink under a SinkRunner: the
// peer is down at first, the runner keeps retrying with backoff, and once
// the peer listens the channel drains with nothing lost. Stop returns
// promptly even while the writer waits out a backoff.
func TestRunnerDeliversWhenPeerComesBack(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ch := newChannel(t)
	warned := make(signal, 1)
	host, port, _ := net.SplitHostPort(addr)
	p := config.FromMap("a1.sinks.k1.", map[string]string{"hostname": host, "port": port})
	s, err := New(flow.Env{Name: "k1", Type: "tcp", Channel: ch, Logger: slog.New(warned)}, p)
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	evs := testutil.Events("e", 500)
	if err := testutil.PutCommit(ch, evs); err != nil {
		t.Fatal(err)
	}
	r := flow.NewSinkRunner("k1", s, slog.New(slog.DiscardHandler))
	r.Start()
	<-warned // the first delivery failed
	peer := newPeer(t, addr, nil)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := r.Drain(dctx, ch); err != nil {
		t.Fatalf("drain: %v", err)
	}
	peer.waitLines(t, 0, len(evs))
	if got := peer.all(); !equal(got, testutil.Bodies(evs)) {
		t.Fatalf("peer got %d lines, not the %d bodies in order", len(got), len(evs))
	}

	// Peer gone again: the runner backs off; Stop must not wait it out.
	peer.close()
	r2 := flow.NewSinkRunner("k1", s, slog.New(slog.DiscardHandler))
	if err := testutil.PutCommit(ch, evs[:1]); err != nil {
		t.Fatal(err)
	}
	r2.Start()
	<-warned
	start := time.Now()
	sctx, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if err := r2.Stop(sctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("stop took %v", d)
	}
	if ch.Len() != 1 {
		t.Fatalf("channel holds %d events, want the undelivered 1", ch.Len())
	}
}

// BenchmarkSink puts batches of 100 events of 256 bytes into a memory
// channel and lets the sink take and send them to a draining peer.
func BenchmarkSink(b *testing.B) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	ch, _ := memorychannel.New(flow.Env{Name: "c1", Type: "memory"},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "10000", "transactionCapacity": "100"}))
	if err := ch.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer ch.Stop(ctx)
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	s, _ := New(flow.Env{Name: "k1", Type: "tcp", Channel: ch},
		config.FromMap("a1.sinks.k1.", map[string]string{"hostname": host, "port": port}))
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(ctx)
	evs := make([]event.Event, 100)
	for i := range evs {
		evs[i].Body = bytes.Repeat([]byte{'a'}, 256)
	}
	b.SetBytes(100 * 257)
	b.ReportAllocs()
	for b.Loop() {
		if err := testutil.PutCommit(ch, evs); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Process(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}
