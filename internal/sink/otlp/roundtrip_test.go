package otlpsink

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/otlp"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil/otlptest"
)

// startSource starts an otlp source on loopback into a fresh channel.
func startSource(t testing.TB) (*otlpsource.Source, *sourcetest.Pipeline) {
	t.Helper()
	pl := sourcetest.NewPipeline(t, 1000, 1000, time.Second)
	s := sourcetest.New(t, otlpsource.New, sourcetest.Env("r1", "otlp"),
		map[string]string{"bind": "127.0.0.1", "grpcPort": "0", "httpPort": "0"}).(*otlpsource.Source)
	sourcetest.Start(t, s, pl.Processor)
	return s, pl
}

// TestFlumeEventRoundTrip: Flume events through an otlp sink into an otlp
// source come out with the same bodies and headers, over each protocol.
func TestFlumeEventRoundTrip(t *testing.T) {
	events := []event.Event{
		{Body: []byte("plain"), Headers: event.HeadersOf(map[string]string{"host": "web-1", "timestamp": "1700000000123", "topic": "orders"})},
		{Body: []byte("no headers at all")},
		{Body: []byte{0x00, 0xff, 0x10}, Headers: event.HeadersOf(map[string]string{"binary": "\xfe\xff", "empty": ""})},
		{Body: []byte(`{"json":"text"}`), Headers: event.HeadersOf(map[string]string{"Severity": "3", "Facility": "16", "resource.service.name": "legacy"})},
		{Body: []byte("unicode ✓"), Headers: event.HeadersOf(map[string]string{"otel.custom": "kept", "k=v": "a,b"})},
	}
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPProtobuf, ProtocolHTTPJSON} {
		t.Run(proto, func(t *testing.T) {
			src, pl := startSource(t)
			ep := src.GRPCAddr().String()
			if proto != ProtocolGRPC {
				ep = "http://" + src.HTTPAddr().String()
			}
			f := newFixture(t, map[string]string{"endpoint": ep, "protocol": proto})
			f.put(t, events)
			if err := f.process(t); err != nil {
				t.Fatal(err)
			}
			got := pl.Drain(t, len(events), 5*time.Second)
			// Events go out grouped by resource: match them by body.
			byBody := map[string]event.Event{}
			for _, e := range got {
				byBody[string(e.Body)] = e
			}
			for _, e := range events {
				g, ok := byBody[string(e.Body)]
				if !ok || !e.Headers.Equal(g.Headers) {
					t.Errorf("event %q: came back %v, %q; want headers %v", e.Body, ok, g.Headers, e.Headers)
				}
			}
		})
	}
}

// TestOTLPRecordRoundTrip: records the OpenTelemetry SDK exports through an
// otlp source, a channel and an otlp sink reach the downstream as they
// reach it straight from the SDK: attributes (types and nesting included),
// severity, trace context, timestamps, resource and scope.
func TestOTLPRecordRoundTrip(t *testing.T) {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "shop"), attribute.Int("process.pid", 4242), attribute.StringSlice("tags", []string{"a", "b"}))
	recs := otlptest.Records(res, "shop/checkout", func(ctx context.Context, l log.Logger) {
		for i := range 6 {
			var r log.Record
			if i != 3 { // one record with only an observed time
				r.SetTimestamp(time.Unix(1_700_000_000, int64(i)*1_234_567))
			}
			r.SetObservedTimestamp(time.Unix(1_700_000_100, int64(i)))
			r.SetSeverity(log.Severity(i + 1))
			r.SetSeverityText(fmt.Sprint("S", i))
			r.SetEventName("ev")
			switch i {
			case 4:
				r.SetBody(attribute.MapValue(attribute.String("msg", "structured"), attribute.Int("n", 3)))
			case 5:
				r.SetBody(attribute.ByteSliceValue([]byte{0, 1, 2}))
			default:
				r.SetBody(attribute.StringValue(fmt.Sprint("line ", i)))
			}
			r.AddAttributes(attribute.Int("int", i), attribute.Float64("double", 1), attribute.Bool("bool", true),
				attribute.String("timestamp", "an attribute named timestamp"),
				attribute.Slice("list", attribute.StringValue("x"), attribute.IntValue(2)),
				attribute.Map("map", attribute.String("k", "v"), attribute.Map("deep", attribute.Float64("f", 2.5))))
			c := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{0xa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, byte(i)},
				SpanID:  trace.SpanID{0xb, 1, 2, 3, 4, 5, 6, byte(i)}, TraceFlags: trace.FlagsSampled,
			}))
			l.Emit(c, r)
		}
	})
	export := func(t *testing.T, addr string) {
		t.Helper()
		exp, err := otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(addr), otlploggrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		defer exp.Shutdown(context.Background())
		if err := exp.Export(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
	}
	// Straight from the SDK: the reference.
	direct := otlptest.NewGRPCReceiver(t, nil)
	export(t, direct.Addr())

	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPJSON} {
		t.Run(proto, func(t *testing.T) {
			src, pl := startSource(t)
			r, ep := receiver(t, proto, nil)
			env := flow.Env{Agent: "a1", Name: "k1", Type: "otlp", Channel: pl.Channel}
			p := config.FromMap("a1.sinks.k1.", map[string]string{"endpoint": ep, "protocol": proto})
			s, err := New(env, p)
			if err != nil || p.Err() != nil {
				t.Fatal(err, p.Err())
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer s.Stop(context.Background())
			export(t, src.GRPCAddr().String())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := s.Process(ctx); err != nil {
				t.Fatal(err)
			}
			if !r.WaitCount(len(recs), 5*time.Second) {
				t.Fatalf("%d records arrived of %d", r.Count(), len(recs))
			}
			want, got := normalize(direct.Requests()[0].Logs), normalize(r.Requests()[0].Logs)
			if len(want) != 6 || len(want[0]["attrs"].(map[string]any)) != 6 {
				t.Fatalf("the reference is not what the SDK was given: %v", want)
			}
			if !reflect.DeepEqual(want, got) {
				wj, _ := json.MarshalIndent(want, "", " ")
				gj, _ := json.MarshalIndent(got, "", " ")
				t.Fatalf("through sluice the logs changed:\nwant %s\n got %s", wj, gj)
			}
		})
	}
}

// normalize is a Logs in a form reflect.DeepEqual compares, attribute
// order aside.
func normalize(ld plog.Logs) []map[string]any {
	var out []map[string]any
	for _, rl := range ld.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				out = append(out, map[string]any{
					"resource": rl.Resource().Attributes().AsRaw(), "resourceSchema": rl.SchemaUrl(),
					"scope": sl.Scope().Name(), "scopeVersion": sl.Scope().Version(), "scopeSchema": sl.SchemaUrl(),
					"scopeAttrs": sl.Scope().Attributes().AsRaw(),
					"time":       uint64(lr.Timestamp()), "observed": uint64(lr.ObservedTimestamp()),
					"sevText": lr.SeverityText(), "sevNum": int(lr.SeverityNumber()),
					"trace": lr.TraceID().String(), "span": lr.SpanID().String(), "flags": uint32(lr.Flags()),
					"event": lr.EventName(), "dropped": lr.DroppedAttributesCount(),
					"bodyType": lr.Body().Type().String(), "body": lr.Body().AsRaw(),
					"attrs": lr.Attributes().AsRaw(),
				})
			}
		}
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return int(a["sevNum"].(int) - b["sevNum"].(int)) })
	return out
}
