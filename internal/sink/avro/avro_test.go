package avrosink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/downstream"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/source/avro"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// hop is an Avro source putting into channel dst, and an Avro sink taking
// from channel src and sending to that source.
type hop struct {
	src, dst *sourcetest.Pipeline
	source   flow.Source
	sink     flow.Sink
}

func newHop(t *testing.T, dstCap int, sinkProps, sourceProps map[string]string) *hop {
	t.Helper()
	h := &hop{
		src: sourcetest.NewPipeline(t, 10000, 1000, 50*time.Millisecond),
		dst: sourcetest.NewPipeline(t, dstCap, min(dstCap, 1000), 50*time.Millisecond),
	}
	sp := map[string]string{"bind": "127.0.0.1", "port": "0"}
	for k, v := range sourceProps {
		sp[k] = v
	}
	props := config.FromMap("a1.sources.r1.", sp)
	src, err := avrosource.New(sourcetest.Env("r1", "avro"), props)
	if err != nil || props.Err() != nil {
		t.Fatal(err, props.Err())
	}
	if err := src.Start(context.Background(), h.dst.Processor); err != nil {
		t.Fatal(err)
	}
	h.source = src
	t.Cleanup(func() { _ = src.Stop(context.Background()) })
	_, port, _ := net.SplitHostPort(src.(*avrosource.Source).Addr().String())
	h.sink = newSink(t, h.src.Channel, port, sinkProps)
	return h
}

func newSink(t *testing.T, ch flow.Channel, port string, props map[string]string) flow.Sink {
	t.Helper()
	m := map[string]string{"hostname": "127.0.0.1", "port": port, "batch-size": "100", "connect-timeout": "2000", "request-timeout": "2000"}
	for k, v := range props {
		m[k] = v
	}
	env := sourcetest.Env("k1", "avro")
	env.Channel = ch
	return sinktest.Start(t, New, env, m)
}

func put(t *testing.T, pl *sourcetest.Pipeline, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		var evs []event.Event
		for j := i; j < min(n, i+1000); j++ {
			evs = append(evs, event.Event{Headers: event.HeadersOf(map[string]string{"seq": strconv.Itoa(j)}), Body: []byte(fmt.Sprintf("%s%d", prefix, j))})
		}
		if err := pl.Processor.Process(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHopDeliversEveryEvent(t *testing.T) {
	for _, deflate := range []bool{false, true} {
		t.Run(fmt.Sprintf("deflate=%v", deflate), func(t *testing.T) {
			var sinkProps, srcProps map[string]string
			if deflate {
				sinkProps = map[string]string{"compression-type": "deflate", "compression-level": "1"}
				srcProps = map[string]string{"compression-type": "deflate"}
			}
			h := newHop(t, 10000, sinkProps, srcProps)
			const n = 2500
			put(t, h.src, "e", n)
			for h.src.Channel.Len() > 0 {
				if _, err := h.sink.Process(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			got := h.dst.Drain(t, n, 5*time.Second)
			if len(got) != n {
				t.Fatalf("delivered %d of %d", len(got), n)
			}
			for i, e := range got {
				if string(e.Body) != fmt.Sprintf("e%d", i) || e.Header("seq") != strconv.Itoa(i) {
					t.Fatalf("event %d: %q %v", i, e.Body, e.Headers)
				}
			}
			if st, err := h.sink.Process(context.Background()); err != nil || st != flow.Backoff {
				t.Fatalf("empty channel: %v %v", st, err)
			}
		})
	}
}

// TestFailedKeepsEventsInSendersChannel: the receiver's channel is full, so
// it replies FAILED; the batch goes back to the sender's channel, and is
// delivered once the receiver has room.
func TestFailedKeepsEventsInSendersChannel(t *testing.T) {
	h := newHop(t, 10, map[string]string{"batch-size": "10"}, nil)
	put(t, h.dst, "old", 8)
	put(t, h.src, "e", 10)
	if _, err := h.sink.Process(context.Background()); err == nil || !strings.Contains(err.Error(), "FAILED") {
		t.Fatalf("Process into a full receiver: %v, want a FAILED error", err)
	}
	if n := h.src.Channel.Len(); n != 10 {
		t.Fatalf("sender's channel holds %d events, want all 10 back", n)
	}
	if n := h.dst.Channel.Len(); n != 8 {
		t.Fatalf("receiver's channel holds %d events after FAILED, want its 8", n)
	}
	if got := h.dst.Drain(t, 8, 5*time.Second); len(got) != 8 {
		t.Fatalf("drained %d", len(got))
	}
	if _, err := h.sink.Process(context.Background()); err != nil {
		t.Fatalf("Process once the receiver has room: %v", err)
	}
	got := h.dst.Drain(t, 10, 5*time.Second)
	if len(got) != 10 || string(got[0].Body) != "e0" || string(got[9].Body) != "e9" {
		t.Fatalf("delivered %v", sourcetest.Bodies(got))
	}
	if n := h.src.Channel.Len(); n != 0 {
		t.Fatalf("%d events left in the sender's channel", n)
	}
}

func portOf(h *hop) string {
	_, port, _ := net.SplitHostPort(h.source.(*avrosource.Source).Addr().String())
	return port
}

// TestDownstreamDown: with nothing listening, Process fails, counts a
// failed connection, and the events stay in the channel.
func TestDownstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	src := sourcetest.NewPipeline(t, 100, 100, 50*time.Millisecond)
	put(t, src, "e", 3)
	k := newSink(t, src.Channel, port, nil)
	if _, err := k.Process(context.Background()); err == nil {
		t.Fatal("Process with the downstream down succeeded")
	}
	if n := src.Channel.Len(); n != 3 {
		t.Fatalf("channel holds %d, want 3", n)
	}
}

// TestBackoffFailsFastThenReconnects: after a failed connection, a batch
// within the backoff fails at once without dialing (a sink group's other
// sinks take it now), and once the source is back the sink reconnects.
func TestBackoffFailsFastThenReconnects(t *testing.T) {
	h := newHop(t, 1000, nil, nil)
	port := mustAtoi(portOf(h))
	if err := h.source.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := metrics.NewSinkCounters("k1", "avro")
	w := NewWriter(Options{Host: "127.0.0.1", Port: port, Client: avrorpc.ClientConfig{ConnectTimeout: 2 * time.Second}}, c, nil)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	batch := []event.Event{{Body: []byte("x")}}
	if err := w.Write(context.Background(), batch); err == nil {
		t.Fatal("Write with the source down succeeded")
	}
	start := time.Now()
	err := w.Write(context.Background(), batch)
	if !errors.Is(err, downstream.ErrBackingOff) {
		t.Fatalf("second Write: %v, want a backoff error", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("Write within the backoff took %v, want it to fail at once", d)
	}
	if got := c.ConnectionFailed.Load(); got != 1 {
		t.Fatalf("ConnectionFailedCount = %d, want 1 (no dial within the backoff)", got)
	}

	// The source comes back on its port.
	props := config.FromMap("a1.sources.r1.", map[string]string{"bind": "127.0.0.1", "port": strconv.Itoa(port)})
	src, err := avrosource.New(sourcetest.Env("r1", "avro"), props)
	if err != nil || props.Err() != nil {
		t.Fatal(err, props.Err())
	}
	if err := src.Start(context.Background(), h.dst.Processor); err != nil {
		t.Fatal(err)
	}
	defer src.Stop(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for err = w.Write(context.Background(), batch); err != nil; err = w.Write(context.Background(), batch) {
		if !errors.Is(err, downstream.ErrBackingOff) || time.Now().After(deadline) {
			t.Fatalf("Write after the source came back: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := h.dst.Drain(t, 1, 5*time.Second); len(got) != 1 || string(got[0].Body) != "x" {
		t.Fatalf("delivered %v", sourcetest.Bodies(got))
	}
}

func TestResetConnectionInterval(t *testing.T) {
	h := newHop(t, 1000, nil, nil)
	c := metrics.NewSinkCounters("k1", "avro")
	w := NewWriter(Options{Host: "127.0.0.1", Port: mustAtoi(portOf(h)), ResetInterval: time.Nanosecond}, c, nil)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	for i := range 3 {
		if err := w.Write(context.Background(), []event.Event{{Body: []byte{byte('a' + i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.ConnectionCreated.Load(); got != 3 {
		t.Fatalf("ConnectionCreated = %d, want 3 (a new connection per batch)", got)
	}
	if got := c.ConnectionClosed.Load(); got != 2 {
		t.Fatalf("ConnectionClosed = %d, want 2", got)
	}
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  string
	}{
		{"flume keys", map[string]string{"hostname": "h", "port": "4141", "batch-size": "500", "connect-timeout": "1000", "request-timeout": "1000",
			"reset-connection-interval": "60", "compression-type": "deflate", "compression-level": "9", "ssl": "true", "trust-all-certs": "true", "maxIoWorkers": "4"}, ""},
		{"missing hostname", map[string]string{"port": "1"}, "a1.sinks.k1.hostname: missing required property"},
		{"bad level", map[string]string{"hostname": "h", "port": "1", "compression-level": "10"}, "out of range"},
		{"jks truststore", map[string]string{"hostname": "h", "port": "1", "ssl": "true", "truststore": "/t.jks", "truststore-password": "p"}, ""},
		{"jceks truststore", map[string]string{"hostname": "h", "port": "1", "ssl": "true", "truststore": "/t.jceks", "truststore-type": "JCEKS"}, "keytool -importkeystore -srcstoretype JCEKS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := config.FromMap("a1.sinks.k1.", tt.props)
			if _, err := New(sourcetest.Env("k1", "avro"), p); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			err := p.Err()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("problems %v, want %q", err, tt.want)
			}
		})
	}
}

// TestConnectionClosedWhileIdle: the receiving source closes a connection
// that stayed idle past its idle-timeout (sluice's avro source does after 10
// minutes). The next batch must go through at once on a new connection,
// as Java's client reconnects when Netty sees the close: no failed batch,
// no WARN, no backoff.
func TestConnectionClosedWhileIdle(t *testing.T) {
	for _, deflate := range []bool{false, true} {
		t.Run(fmt.Sprintf("deflate=%v", deflate), func(t *testing.T) {
			sinkProps := map[string]string{}
			srcProps := map[string]string{"idle-timeout": "100"}
			if deflate {
				sinkProps["compression-type"] = "deflate"
				srcProps["compression-type"] = "deflate"
			}
			h := newHop(t, 1000, sinkProps, srcProps)
			put(t, h.src, "a", 10)
			if _, err := h.sink.Process(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(400 * time.Millisecond) // the source closes the idle connection
			put(t, h.src, "b", 10)
			if _, err := h.sink.Process(context.Background()); err != nil {
				t.Fatalf("the batch after an idle close failed: %v", err)
			}
			if got := h.dst.Drain(t, 20, 5*time.Second); len(got) != 20 {
				t.Fatalf("delivered %d of 20", len(got))
			}
		})
	}
}
