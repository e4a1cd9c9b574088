package thriftsink

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/source/thrift"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
	"github.com/sluicehq/sluice/internal/thriftrpc"
	"github.com/sluicehq/sluice/internal/thriftrpc/thrifttest"
)

func newSink(t *testing.T, ch flow.Channel, addr string, props map[string]string) flow.Sink {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{"hostname": host, "port": port, "batch-size": "100", "connect-timeout": "2000", "request-timeout": "2000"}
	for k, v := range props {
		m[k] = v
	}
	env := sourcetest.Env("k1", "thrift")
	env.Channel = ch
	return sinktest.Start(t, New, env, m)
}

// events returns n events with headers (one without) and text, binary and
// empty bodies.
func events(prefix string, n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		e := event.Event{Headers: event.HeadersOf(map[string]string{"seq": strconv.Itoa(i), "ünï": "✓"}), Body: []byte(fmt.Sprintf("%s%d", prefix, i))}
		switch i % 5 {
		case 1:
			e.Body = []byte{0xff, 0, byte(i)}
		case 2:
			e.Body = nil
		case 3:
			e.Headers = nil
		}
		out[i] = e
	}
	return out
}

func put(t *testing.T, pl *sourcetest.Pipeline, evs []event.Event) {
	t.Helper()
	for i := 0; i < len(evs); i += 1000 {
		if err := pl.Processor.Process(context.Background(), evs[i:min(len(evs), i+1000)]); err != nil {
			t.Fatal(err)
		}
	}
}

// drain calls Process until the channel is empty; errors are returned in order.
func drain(t *testing.T, k flow.Sink, ch flow.Channel, maxErrors int) []error {
	t.Helper()
	var errs []error
	deadline := time.Now().Add(20 * time.Second)
	for ch.Len() > 0 {
		if _, err := k.Process(context.Background()); err != nil {
			errs = append(errs, err)
			if len(errs) > maxErrors {
				t.Fatalf("Process: %v (after %v)", err, errs[:len(errs)-1])
			}
			time.Sleep(150 * time.Millisecond) // the sink's backoff
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still in the channel", ch.Len())
		}
	}
	return errs
}

func checkReceived(t *testing.T, got []thrifttest.Received, want []event.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("the server took %d events, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		ok := bytes.Equal(g.Body, w.Body) && len(g.Headers) == len(w.Headers) && g.Method == "appendBatch"
		for k, v := range w.Headers.All() {
			ok = ok && g.Headers.Value(k) == v
		}
		if !ok {
			t.Fatalf("event %d: got %s %q %v, want %q %v", i, g.Method, g.Body, g.Headers, w.Body, w.Headers)
		}
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  string // problem text; "" = valid
	}{
		{"defaults", map[string]string{"hostname": "h", "port": "4545"}, ""},
		{"flume keys", map[string]string{"hostname": "h", "port": "4545", "protocol": "binary", "batch-size": "500", "connect-timeout": "1000",
			"request-timeout": "1000", "reset-connection-interval": "60", "kerberos": "false", "client-principal": "c", "client-keytab": "k", "server-principal": "s"}, ""},
		{"user guide's reset spelling", map[string]string{"hostname": "h", "port": "4545", "connection-reset-interval": "60"}, ""},
		{"both reset spellings", map[string]string{"hostname": "h", "port": "4545", "connection-reset-interval": "60", "reset-connection-interval": "30"}, "keep one"},
		{"missing hostname", map[string]string{"port": "1"}, "a1.sinks.k1.hostname: missing required property"},
		{"missing port", map[string]string{"hostname": "h"}, "a1.sinks.k1.port: missing required property"},
		{"bad protocol", map[string]string{"hostname": "h", "port": "1", "protocol": "tjson"}, `protocol "tjson" is not compact or binary`},
		{"kerberos refused", map[string]string{"hostname": "h", "port": "1", "kerberos": "true"}, "Kerberos (SASL/GSSAPI) authentication of Thrift peers is not provided"},
		{"jks truststore", map[string]string{"hostname": "h", "port": "1", "ssl": "true", "truststore": "/t.jks"}, ""},
		{"jceks truststore", map[string]string{"hostname": "h", "port": "1", "ssl": "true", "truststore": "/t.jceks", "truststore-type": "JCEKS"}, "keytool -importkeystore -srcstoretype JCEKS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := config.FromMap("a1.sinks.k1.", tt.props)
			if _, err := New(sourcetest.Env("k1", "thrift"), p); err != nil {
				t.Fatal(err)
			}
			p.Unused()
			err := p.Err()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected problems: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("problems %v, want %q", err, tt.want)
			}
		})
	}
}

// TestDeliversIntoPythonServer: a server generated by Debian's
// thrift-compiler from our IDL and run on Debian's python3-thrift receives
// every event with its headers and body, in order, in each protocol, in
// plain TCP and TLS.
func TestDeliversIntoPythonServer(t *testing.T) {
	peer := thrifttest.New(t)
	cert, key := thrifttest.TLSFiles(t)
	for _, tc := range []struct {
		protocol string
		tls      bool
	}{{"compact", false}, {"binary", false}, {"compact", true}, {"binary", true}} {
		t.Run(fmt.Sprintf("%s tls=%v", tc.protocol, tc.tls), func(t *testing.T) {
			opt := thrifttest.ServerOptions{Protocol: tc.protocol}
			props := map[string]string{"protocol": tc.protocol}
			if tc.tls {
				opt.CertFile, opt.KeyFile = cert, key
				props["ssl"], props["truststore"], props["truststore-type"] = "true", cert, "PEM"
			}
			srv := peer.Serve(t, opt)
			src := sourcetest.NewPipeline(t, 10000, 1000, 50*time.Millisecond)
			k := newSink(t, src.Channel, srv.Addr, props)
			want := events("e", 750)
			put(t, src, want)
			if errs := drain(t, k, src.Channel, 0); len(errs) != 0 {
				t.Fatal(errs)
			}
			var got []thrifttest.Received
			testutil.Eventually(func() bool { got = srv.Events(); return len(got) >= len(want) }, 5*time.Second)
			checkReceived(t, got, want)
		})
	}
}

// TestFailedRollsBack: the server replies FAILED to the first two batches;
// each goes back into the channel, and every event is delivered once.
func TestFailedRollsBack(t *testing.T) {
	peer := thrifttest.New(t)
	srv := peer.Serve(t, thrifttest.ServerOptions{FailFirst: 2})
	src := sourcetest.NewPipeline(t, 10000, 1000, 50*time.Millisecond)
	k := newSink(t, src.Channel, srv.Addr, map[string]string{"batch-size": "50"})
	want := events("f", 120)
	put(t, src, want)
	errs := drain(t, k, src.Channel, 2)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "replied FAILED") {
		t.Fatalf("errors %v, want two FAILED replies", errs)
	}
	var got []thrifttest.Received
	testutil.Eventually(func() bool { got = srv.Events(); return len(got) >= len(want) }, 5*time.Second)
	checkReceived(t, got, want)
}

// TestServerDownThenUp: while nothing listens, Process fails fast and the
// events stay in the channel; once a server listens they are delivered.
func TestServerDownThenUp(t *testing.T) {
	peer := thrifttest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	src := sourcetest.NewPipeline(t, 10000, 1000, 50*time.Millisecond)
	k := newSink(t, src.Channel, addr, nil)
	want := events("d", 10)
	put(t, src, want)
	for range 3 {
		begin := time.Now()
		if _, err := k.Process(context.Background()); err == nil {
			t.Fatal("Process delivered to nothing")
		}
		if d := time.Since(begin); d > time.Second {
			t.Fatalf("a failing Process took %v", d)
		}
		if n := src.Channel.Len(); n != 10 {
			t.Fatalf("the channel holds %d events, want all 10", n)
		}
	}
	_, port, _ := net.SplitHostPort(addr)
	srv := peer.ServeOnPort(t, port, thrifttest.ServerOptions{})
	drain(t, k, src.Channel, 10)
	var got []thrifttest.Received
	testutil.Eventually(func() bool { got = srv.Events(); return len(got) >= len(want) }, 5*time.Second)
	checkReceived(t, got, want)
}

// TestSinkSuite runs the sink contract, in each protocol, against Flume's
// Thrift RPC server (thriftrpc, as the thrift source serves it) whose
// handler answers FAILED while refusing, as a Flume source with a full
// channel does, and holds a call unanswered while stalled.
func TestSinkSuite(t *testing.T) {
	for _, protocol := range []string{"compact", "binary"} {
		t.Run(protocol, func(t *testing.T) {
			sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
				proto, err := thriftrpc.ParseProtocol(protocol)
				if err != nil {
					t.Fatal(err)
				}
				h := &gateHandler{gate: sinktest.NewGate()}
				addr, _ := testutil.ServeConns(t, (&thriftrpc.Server{Handler: h, Protocol: proto}).ServeConn)
				_, port, _ := net.SplitHostPort(addr)
				sp := config.FromMap("a1.sinks.k1.", map[string]string{"hostname": "127.0.0.1", "port": port, "protocol": protocol,
					"batch-size": "100", "request-timeout": "20000"})
				env.Type = "thrift"
				k, err := New(env, sp)
				if err != nil || sp.Err() != nil {
					t.Fatal(err, sp.Err())
				}
				return k, h.gate.Downstream(h.got.Get)
			})
		})
	}
}

// gateHandler takes the calls its gate admits and answers FAILED to the
// others.
type gateHandler struct {
	gate *sinktest.Gate
	got  sinktest.Bodies
}

func (h *gateHandler) Append(ctx context.Context, e event.Event) thriftrpc.Status {
	return h.AppendBatch(ctx, []event.Event{e})
}

func (h *gateHandler) AppendBatch(ctx context.Context, events []event.Event) thriftrpc.Status {
	if !h.gate.Admit(ctx) {
		return thriftrpc.Failed
	}
	for _, e := range events {
		h.got.Add(string(e.Body))
	}
	return thriftrpc.OK
}

// startSource starts sluice's thrift source on port ("0": any) feeding dst.
func startSource(t *testing.T, port string, dst *sourcetest.Pipeline) flow.Source {
	t.Helper()
	src := sourcetest.New(t, thriftsource.New, sourcetest.Env("r1", "thrift"), sourcetest.Loopback(map[string]string{"port": port}))
	sourcetest.Start(t, src, dst.Processor)
	return src
}

// TestConnectionClosedWhileIdle: the receiver closes the sink's connection
// while it is idle between batches (here a collector restarted on the same
// port; a load balancer's idle timeout looks the same). The next batch goes
// through at once on a new connection: no failed batch, no backoff.
func TestConnectionClosedWhileIdle(t *testing.T) {
	dst := sourcetest.NewPipeline(t, 10000, 1000, 50*time.Millisecond)
	src := startSource(t, "0", dst)
	addr := src.(*thriftsource.Source).Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	pl := sourcetest.NewPipeline(t, 10000, 1000, 50*time.Millisecond)
	k := newSink(t, pl.Channel, addr, nil)
	put(t, pl, events("a", 10))
	if _, err := k.Process(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := src.Stop(context.Background()); err != nil { // closes the idle connection
		t.Fatal(err)
	}
	startSource(t, port, dst)
	put(t, pl, events("b", 10))
	if _, err := k.Process(context.Background()); err != nil {
		t.Fatalf("the batch after an idle close failed: %v", err)
	}
	if got := dst.Drain(t, 20, 5*time.Second); len(got) != 20 {
		t.Fatalf("delivered %d of 20", len(got))
	}
}
