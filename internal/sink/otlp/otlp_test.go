package otlpsink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/otlptest"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// bodies are the bodies of the records a receiver took, in order.
func bodies(r *otlptest.Receiver) []string {
	var out []string
	for _, lr := range r.Records() {
		out = append(out, lr.Body().AsString())
	}
	return out
}

// sorted are the bodies sorted: the sink groups records by resource, so
// the order across resources is not the channel's.
func sorted(r *otlptest.Receiver) []string {
	b := bodies(r)
	slices.Sort(b)
	return b
}

func TestSinkSuite(t *testing.T) {
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPProtobuf, ProtocolHTTPJSON} {
		t.Run(proto, func(t *testing.T) {
			sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
				r, ep := receiver(t, proto, nil)
				// The gate refuses the way a busy receiver does (gRPC
				// UNAVAILABLE, HTTP 503: retryable, so the batch stays),
				// or holds the request.
				gate := sinktest.NewGate()
				r.SetAnswer(func(plog.Logs) (plogotlp.ExportResponse, error) {
					if gate.Admit(context.Background()) {
						return plogotlp.NewExportResponse(), nil
					}
					if proto == ProtocolGRPC {
						return plogotlp.NewExportResponse(), status.Error(codes.Unavailable, "refused by the test")
					}
					return plogotlp.NewExportResponse(), &otlptest.HTTPError{Code: 503, Msg: "refused by the test"}
				})
				t.Cleanup(gate.Accept) // frees a request the test left held
				p := config.FromMap("a1.sinks.k1.", map[string]string{"endpoint": ep, "protocol": proto, "batchSize": "500"})
				s, err := New(env, p)
				if err != nil || p.Err() != nil {
					t.Fatal(err, p.Err())
				}
				return s, gate.Downstream(func() []string { return bodies(r) })
			})
		})
	}
}

// receiver starts a receiver for proto and returns it with the sink's
// endpoint for it.
func receiver(t *testing.T, proto string, conf *tls.Config) (*otlptest.Receiver, string) {
	scheme := "http://"
	if conf != nil {
		scheme = "https://"
	}
	if proto == ProtocolGRPC {
		r := otlptest.NewGRPCReceiver(t, conf)
		if conf != nil {
			return r, scheme + r.Addr()
		}
		return r, r.Addr()
	}
	r := otlptest.NewHTTPReceiver(t, conf)
	return r, scheme + r.Addr()
}

// fixture is a sink over a memory channel and its metrics.
type fixture struct {
	ch   flow.Channel
	reg  *metrics.Registry
	sink *Sink
	logs *testutil.LogBuffer
}

func newFixture(t *testing.T, props map[string]string) *fixture {
	t.Helper()
	f := &fixture{reg: metrics.NewRegistry("a1"), logs: &testutil.LogBuffer{}}
	log := slog.New(slog.NewTextHandler(f.logs, nil))
	ch, err := memorychannel.New(flow.Env{Agent: "a1", Name: "c1", Type: "memory", Metrics: f.reg, Logger: log},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "10000", "transactionCapacity": "1000", "keep-alive": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop(context.Background()) })
	f.ch = ch
	env := flow.Env{Agent: "a1", Name: "k1", Type: "otlp", Metrics: f.reg, Logger: log, Channel: ch}
	f.sink = sinktest.Start(t, New, env, props).(*Sink)
	return f
}

func (f *fixture) put(t *testing.T, events []event.Event) {
	t.Helper()
	if err := testutil.PutCommit(f.ch, events); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) process(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := f.sink.Process(ctx)
	return err
}

func (f *fixture) dropped(reason string) float64 {
	var m dto.Metric
	_ = f.reg.Dropped("k1", reason).Write(&m)
	return m.GetCounter().GetValue()
}

func (f *fixture) counter(name string) string {
	return testutil.ComponentMetric(f.reg, metrics.KindSink, "k1", name)
}

// flumeEvents are Flume-style events: a body, a timestamp, headers, some
// behind the resource prefix.
func flumeEvents(n int, prefix string) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		svc := []string{"cart", "pay"}[i%2]
		out[i] = event.Event{Body: []byte(fmt.Sprintf("%s%d", prefix, i)), Headers: event.HeadersOf(map[string]string{
			"timestamp": fmt.Sprint(1_700_000_000_000 + i), "host": "web-7", "resource.service.name": svc,
			"otel.severity_text": "INFO", "otel.severity_number": "9",
		})}
	}
	return out
}

// TestProtocols delivers over every protocol, with and without gzip and
// TLS, with headers, and checks what the receiver decoded.
func TestProtocols(t *testing.T) {
	cert := testutil.SelfSigned(t, "127.0.0.1", "localhost")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{cert.TLS()}, MinVersion: tls.VersionTLS12}
	trust := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(trust, cert.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPProtobuf, ProtocolHTTPJSON} {
		for _, variant := range []string{"plain", "gzip", "tls"} {
			t.Run(proto+"/"+variant, func(t *testing.T) {
				var conf *tls.Config
				props := map[string]string{"protocol": proto, "compression": "none", "headers.authorization": "Bearer s3cret", "batchSize": "100"}
				switch variant {
				case "gzip":
					props["compression"] = "gzip"
				case "tls":
					conf = serverTLS
					props["truststore"], props["truststore-type"] = trust, "PEM"
				}
				r, ep := receiver(t, proto, conf)
				props["endpoint"] = ep
				f := newFixture(t, props)
				f.put(t, flumeEvents(10, "e"))
				if err := f.process(t); err != nil {
					t.Fatal(err)
				}
				reqs := r.Requests()
				if len(reqs) != 1 {
					t.Fatalf("%d requests, want 1", len(reqs))
				}
				q := reqs[0]
				auth := q.Metadata["authorization"]
				if proto != ProtocolGRPC {
					auth = q.Metadata["Authorization"]
				}
				if auth != "Bearer s3cret" || q.Gzip != (variant == "gzip") || q.JSON != (proto == ProtocolHTTPJSON) {
					t.Errorf("request: authorization %q gzip %v json %v", auth, q.Gzip, q.JSON)
				}
				// Two resources (by service.name), records in order within each.
				rls := q.Logs.ResourceLogs()
				if rls.Len() != 2 {
					t.Fatalf("%d resources, want 2", rls.Len())
				}
				svc, _ := rls.At(1).Resource().Attributes().Get("service.name")
				lrs := rls.At(1).ScopeLogs().At(0).LogRecords()
				if svc.Str() != "pay" || lrs.Len() != 5 {
					t.Fatalf("second resource %q with %d records", svc.Str(), lrs.Len())
				}
				lr := lrs.At(1) // event 3
				host, _ := lr.Attributes().Get("host")
				if lr.Body().Str() != "e3" || lr.Timestamp() != 1_700_000_000_003_000_000 || host.Str() != "web-7" ||
					lr.SeverityNumber() != plog.SeverityNumberInfo || lr.SeverityText() != "INFO" || lr.Attributes().Len() != 1 {
					t.Errorf("record: body %q time %d attrs %v severity %v %q", lr.Body().Str(), lr.Timestamp(), lr.Attributes().AsRaw(), lr.SeverityNumber(), lr.SeverityText())
				}
				if f.counter("EventDrainSuccessCount") != "10" {
					t.Errorf("EventDrainSuccessCount %s", f.counter("EventDrainSuccessCount"))
				}
			})
		}
	}
}

// TestRetryable: UNAVAILABLE with RetryInfo and 503 with Retry-After roll
// the batch back; the sink waits the pause asked before it sends again,
// failing at once meanwhile; then it delivers.
func TestRetryable(t *testing.T) {
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(proto, func(t *testing.T) {
			r, ep := receiver(t, proto, nil)
			r.SetAnswer(func(plog.Logs) (plogotlp.ExportResponse, error) {
				if proto == ProtocolGRPC {
					st, _ := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
					return plogotlp.NewExportResponse(), st.Err()
				}
				return plogotlp.NewExportResponse(), &otlptest.HTTPError{Code: 503, Msg: "busy", Header: map[string]string{"Retry-After": "1"}}
			})
			f := newFixture(t, map[string]string{"endpoint": ep, "protocol": proto})
			f.put(t, flumeEvents(5, "r"))
			if err := f.process(t); err == nil {
				t.Fatal("a refused batch was committed")
			}
			if f.ch.Len() != 5 {
				t.Fatalf("channel holds %d after the refusal, want 5", f.ch.Len())
			}
			r.SetAnswer(nil)
			start := time.Now()
			err := f.process(t)
			if !errors.Is(err, errWait) {
				t.Fatalf("a Write within the pause asked: %v, want errWait", err)
			}
			if time.Since(start) > 500*time.Millisecond || r.Count() != 0 {
				t.Fatal("the sink sent during the pause the downstream asked for")
			}
			time.Sleep(time.Second)
			if err := f.process(t); err != nil {
				t.Fatal(err)
			}
			if got := sorted(r); !slices.Equal(got, []string{"r0", "r1", "r2", "r3", "r4"}) {
				t.Fatalf("delivered %q", got)
			}
		})
	}
}

// TestRejected: INVALID_ARGUMENT and 400 drop the batch, counted; other
// refusals (UNAUTHENTICATED, 401, 500) keep it and retry.
func TestRejected(t *testing.T) {
	for _, tc := range []struct {
		proto string
		err   error
		drop  bool
	}{
		{ProtocolGRPC, status.Error(codes.InvalidArgument, "bad records"), true},
		{ProtocolHTTPProtobuf, &otlptest.HTTPError{Code: 400, Msg: "bad records"}, true},
		{ProtocolGRPC, status.Error(codes.Unauthenticated, "who are you"), false},
		{ProtocolGRPC, status.Error(codes.Unimplemented, "no logs here"), false},
		{ProtocolHTTPJSON, &otlptest.HTTPError{Code: 401, Msg: "who are you"}, false},
		{ProtocolHTTPProtobuf, &otlptest.HTTPError{Code: 500, Msg: "oops"}, false},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.proto, tc.err), func(t *testing.T) {
			r, ep := receiver(t, tc.proto, nil)
			r.SetAnswer(func(plog.Logs) (plogotlp.ExportResponse, error) { return plogotlp.NewExportResponse(), tc.err })
			f := newFixture(t, map[string]string{"endpoint": ep, "protocol": tc.proto})
			f.put(t, flumeEvents(4, "x"))
			err := f.process(t)
			if tc.drop {
				if err != nil || f.ch.Len() != 0 || f.dropped("otlp_rejected") != 4 || f.counter("EventDrainSuccessCount") != "0" {
					t.Fatalf("err %v, channel %d, dropped %v, drained %s: want the batch dropped and counted",
						err, f.ch.Len(), f.dropped("otlp_rejected"), f.counter("EventDrainSuccessCount"))
				}
				if f.logs.Count("rejected a batch as invalid") != 1 || !strings.Contains(f.logs.String(), "bad records") {
					t.Errorf("log: %s", f.logs.String())
				}
				return
			}
			if err == nil || f.ch.Len() != 4 || f.dropped("otlp_rejected") != 0 {
				t.Fatalf("err %v, channel %d: want the batch kept", err, f.ch.Len())
			}
			if !strings.Contains(err.Error(), "kept in the channel") {
				t.Errorf("error %v does not say the events are kept", err)
			}
		})
	}
}

// TestDownstreamPartialSuccess: records a partial success rejects are
// counted as dropped and not as delivered.
func TestDownstreamPartialSuccess(t *testing.T) {
	r, ep := receiver(t, ProtocolGRPC, nil)
	r.SetAnswer(func(ld plog.Logs) (plogotlp.ExportResponse, error) {
		resp := plogotlp.NewExportResponse()
		resp.PartialSuccess().SetRejectedLogRecords(2)
		resp.PartialSuccess().SetErrorMessage("two records too old")
		return resp, nil
	})
	f := newFixture(t, map[string]string{"endpoint": ep})
	f.put(t, flumeEvents(5, "p"))
	if err := f.process(t); err != nil {
		t.Fatal(err)
	}
	if f.dropped("otlp_rejected") != 2 || f.counter("EventDrainSuccessCount") != "3" || f.ch.Len() != 0 {
		t.Fatalf("dropped %v drained %s channel %d", f.dropped("otlp_rejected"), f.counter("EventDrainSuccessCount"), f.ch.Len())
	}
	if !strings.Contains(f.logs.String(), "two records too old") {
		t.Errorf("log does not carry the downstream's message: %s", f.logs.String())
	}
}

// TestTooLarge: a batch refused as too large is split until it fits; a
// single record still too large is dropped and counted.
func TestTooLarge(t *testing.T) {
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(proto, func(t *testing.T) {
			r, ep := receiver(t, proto, nil)
			r.SetAnswer(func(ld plog.Logs) (plogotlp.ExportResponse, error) {
				big := false
				for _, rl := range ld.ResourceLogs().All() {
					for _, sl := range rl.ScopeLogs().All() {
						for _, lr := range sl.LogRecords().All() {
							big = big || len(lr.Body().Str()) > 100
						}
					}
				}
				if ld.LogRecordCount() <= 3 && !big {
					return plogotlp.NewExportResponse(), nil
				}
				if proto == ProtocolGRPC {
					return plogotlp.NewExportResponse(), status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000 vs. 4000)")
				}
				return plogotlp.NewExportResponse(), &otlptest.HTTPError{Code: 413, Msg: "too large"}
			})
			f := newFixture(t, map[string]string{"endpoint": ep, "protocol": proto})
			events := flumeEvents(10, "s")
			events[6].Body = []byte(strings.Repeat("B", 200))
			f.put(t, events)
			if err := f.process(t); err != nil {
				t.Fatal(err)
			}
			var want []string
			for i, e := range events {
				if i != 6 {
					want = append(want, string(e.Body))
				}
			}
			slices.Sort(want)
			if got := sorted(r); !slices.Equal(got, want) {
				t.Fatalf("delivered %q, want %q", got, want)
			}
			if f.dropped("otlp_too_large") != 1 || f.counter("EventDrainSuccessCount") != "9" {
				t.Fatalf("dropped %v drained %s", f.dropped("otlp_too_large"), f.counter("EventDrainSuccessCount"))
			}
		})
	}
}

// TestDownstreamDown: while the downstream is away the events stay in the
// channel, and /healthz says so past the grace; back, they are delivered
// and health is restored.
func TestDownstreamDown(t *testing.T) {
	old := healthGrace
	healthGrace = 300 * time.Millisecond
	t.Cleanup(func() { healthGrace = old })
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(proto, func(t *testing.T) {
			r, ep := receiver(t, proto, nil)
			f := newFixture(t, map[string]string{"endpoint": ep, "protocol": proto, "connectTimeout": "500"})
			r.Stop()
			f.put(t, flumeEvents(3, "d"))
			deadline := time.Now().Add(2 * time.Second)
			for f.sink.Health() == nil && time.Now().Before(deadline) {
				if err := f.process(t); err == nil {
					t.Fatal("delivered to a stopped downstream")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err := f.sink.Health(); err == nil || !strings.Contains(err.Error(), "the events stay in the channel") {
				t.Fatalf("health %v", err)
			}
			if f.ch.Len() != 3 {
				t.Fatalf("channel %d", f.ch.Len())
			}
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			deadline = time.Now().Add(15 * time.Second)
			for f.ch.Len() > 0 && time.Now().Before(deadline) {
				_ = f.process(t)
				time.Sleep(50 * time.Millisecond)
			}
			if got := sorted(r); !slices.Equal(got, []string{"d0", "d1", "d2"}) {
				t.Fatalf("delivered %q", got)
			}
			if err := f.sink.Health(); err != nil {
				t.Fatalf("health after delivering: %v", err)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string // "" = valid; else part of the error
		ep    string // the endpoint as the sink uses it
	}{
		{map[string]string{"endpoint": "collector:4317"}, "", "collector:4317"},
		{map[string]string{"endpoint": "collector"}, "", "collector:4317"},
		{map[string]string{"endpoint": "https://collector:4317"}, "", "collector:4317"},
		{map[string]string{"endpoint": "http://c:4318", "protocol": "http/protobuf"}, "", "http://c:4318/v1/logs"},
		{map[string]string{"endpoint": "http://c:4318/otlp", "protocol": "http/json"}, "", "http://c:4318/otlp/v1/logs"},
		{map[string]string{"endpoint": "https://c/v1/logs", "protocol": "http/protobuf"}, "", "https://c/v1/logs"},
		{map[string]string{"endpoint": "c:4318", "protocol": "http/protobuf"}, "not an http:// or https:// URL", ""},
		{map[string]string{"endpoint": "http://c:4318", "protocol": "http/protobuf", "ssl": "true"}, "use https://", ""},
		{map[string]string{"endpoint": "c:4317", "protocol": "thrift"}, "protocol", ""},
		{map[string]string{"endpoint": "c:4317", "compression": "br"}, "compression", ""},
		{map[string]string{"endpoint": "c:4317", "headers.bad name": "x"}, "not a valid header", ""},
		{map[string]string{}, "endpoint", ""},
		{map[string]string{"endpoint": "c:4317", "resourcePrefix": ""}, "resourcePrefix", ""},
	} {
		p := config.FromMap("a1.sinks.k1.", tc.props)
		s, err := New(flow.Env{Agent: "a1", Name: "k1", Metrics: metrics.NewRegistry("a1")}, p)
		if err != nil {
			t.Fatal(err)
		}
		perr := p.Err()
		if tc.want == "" {
			if perr != nil {
				t.Errorf("%v: %v", tc.props, perr)
			} else if got := s.(*Sink).w.opt.Endpoint; got != tc.ep {
				t.Errorf("%v: endpoint %q, want %q", tc.props, got, tc.ep)
			}
			continue
		}
		if perr == nil || !strings.Contains(perr.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.props, perr, tc.want)
		}
	}
}
