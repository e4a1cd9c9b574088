package otlpsource

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/otlptest"
)

// newSource builds an otlp source on loopback with both listeners on free
// ports, plus props.
func newSource(t *testing.T, props map[string]string) *Source {
	t.Helper()
	all := map[string]string{"bind": "127.0.0.1", "grpcPort": "0", "httpPort": "0"}
	for k, v := range props {
		all[k] = v
	}
	return sourcetest.New(t, New, sourcetest.Env("r1", "otlp"), all).(*Source)
}

func metric(s *Source, name string) string { return testutil.Metric(s.counters.Set, name) }

// sdkRecords makes n records through the OpenTelemetry SDK: bodies
// prefix0..., a resource with a string and an int attribute, the scope
// "sluice/test", attributes of several types, and a span context on the
// even ones.
func sdkRecords(n int, prefix string) []sdklog.Record {
	res := resource.NewSchemaless(attribute.String("service.name", "shop"), attribute.Int("process.pid", 77))
	return otlptest.Records(res, "sluice/test", func(ctx context.Context, l log.Logger) {
		for i := range n {
			var r log.Record
			r.SetTimestamp(time.Unix(1_700_000_000, int64(i)*1_000_000+5))
			r.SetObservedTimestamp(time.Unix(1_700_000_001, 0))
			r.SetSeverity(log.SeverityWarn)
			r.SetSeverityText("WARN")
			r.SetBody(attribute.StringValue(fmt.Sprintf("%s%d", prefix, i)))
			r.AddAttributes(attribute.Int("seq", i), attribute.String("user", "u-1"), attribute.Bool("ok", i%2 == 0),
				attribute.Map("req", attribute.String("method", "GET"), attribute.Int("size", 512)))
			c := ctx
			if i%2 == 0 {
				c = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
					SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
				}))
			}
			l.Emit(c, r)
		}
	})
}

// tlsFiles writes a PEM keystore for 127.0.0.1 and returns it with a
// client configuration that trusts it.
func tlsFiles(t *testing.T) (keystore string, client *tls.Config) {
	cert := testutil.SelfSigned(t, "127.0.0.1", "localhost")
	keystore = filepath.Join(t.TempDir(), "server.pem")
	if err := os.WriteFile(keystore, append(cert.CertPEM(), cert.KeyPEM()...), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cert.CertPEM())
	return keystore, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// TestSDKExporters sends through the OpenTelemetry Go SDK's own exporters,
// over both protocols, with and without gzip and TLS, and checks the
// events: order, bodies, and the documented headers.
func TestSDKExporters(t *testing.T) {
	keystore, clientTLS := tlsFiles(t)
	cases := []struct {
		name   string
		tls    bool
		dialer func(addr string) (otlptest.Exporter, error)
	}{
		{"grpc", false, func(a string) (otlptest.Exporter, error) {
			return otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(a), otlploggrpc.WithInsecure())
		}},
		{"grpc+gzip", false, func(a string) (otlptest.Exporter, error) {
			return otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(a), otlploggrpc.WithInsecure(), otlploggrpc.WithCompressor("gzip"))
		}},
		{"grpc+tls", true, func(a string) (otlptest.Exporter, error) {
			return otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(a), otlploggrpc.WithTLSCredentials(credentialsFrom(clientTLS)))
		}},
		{"http", false, func(a string) (otlptest.Exporter, error) {
			return otlploghttp.New(context.Background(), otlploghttp.WithEndpoint(a), otlploghttp.WithInsecure())
		}},
		{"http+gzip", false, func(a string) (otlptest.Exporter, error) {
			return otlploghttp.New(context.Background(), otlploghttp.WithEndpoint(a), otlploghttp.WithInsecure(), otlploghttp.WithCompression(otlploghttp.GzipCompression))
		}},
		{"http+tls", true, func(a string) (otlptest.Exporter, error) {
			return otlploghttp.New(context.Background(), otlploghttp.WithEndpoint(a), otlploghttp.WithTLSClientConfig(clientTLS))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			props := map[string]string{}
			if tc.tls {
				props = map[string]string{"ssl": "true", "keystore": keystore, "keystore-type": "PEM"}
			}
			s := newSource(t, props)
			pl := sourcetest.NewPipeline(t, 1000, 1000, time.Second)
			sourcetest.Start(t, s, pl.Processor)
			addr := s.GRPCAddr().String()
			if strings.HasPrefix(tc.name, "http") {
				addr = s.HTTPAddr().String()
			}
			exp, err := tc.dialer(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer exp.Shutdown(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := exp.Export(ctx, sdkRecords(50, tc.name+"-")); err != nil {
				t.Fatalf("export: %v", err)
			}
			got := pl.Drain(t, 50, 5*time.Second)
			if want := sourcetest.Seq(tc.name+"-", 50); !slices.Equal(sourcetest.Bodies(got), want) {
				t.Fatalf("bodies %q, want %q", sourcetest.Bodies(got), want)
			}
			checkSDKHeaders(t, got[2], 2)
			if _, ok := got[1].Headers.Get("otel.trace_id"); ok {
				t.Errorf("record 1 has no span context, got headers %v", got[1].Headers)
			}
			if metric(s, "EventAcceptedCount") != "50" || metric(s, "AppendBatchAcceptedCount") != "1" {
				t.Errorf("EventAcceptedCount %s AppendBatchAcceptedCount %s", metric(s, "EventAcceptedCount"), metric(s, "AppendBatchAcceptedCount"))
			}
		})
	}
}

// checkSDKHeaders checks the headers of record i of sdkRecords.
func checkSDKHeaders(t *testing.T, e event.Event, i int) {
	t.Helper()
	want := map[string]string{
		"resource.service.name":        "shop",
		"resource.process.pid":         "77",
		"otel.scope.name":              "sluice/test",
		"timestamp":                    strconv.Itoa(1_700_000_000_000 + i),
		"otel.time_unix_nano":          strconv.Itoa(1_700_000_000_000_000_005 + i*1_000_000),
		"otel.observed_time_unix_nano": "1700000001000000000",
		"otel.severity_text":           "WARN",
		"otel.severity_number":         "13",
		"otel.trace_id":                "0102030405060708090a0b0c0d0e0f10",
		"otel.span_id":                 "0102030405060708",
		"otel.trace_flags":             "1",
		"seq":                          strconv.Itoa(i),
		"user":                         "u-1",
		"ok":                           "true",
		"req":                          `{"method":"GET","size":512}`,
	}
	for k, v := range want {
		if e.Headers.Value(k) != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, e.Headers.Value(k), v, e.Headers)
		}
	}
	var types map[string]string
	if err := json.Unmarshal([]byte(e.Headers.Value("otel.types")), &types); err != nil {
		t.Fatalf("otel.types %q: %v", e.Headers.Value("otel.types"), err)
	}
	for k, v := range map[string]string{"resource.process.pid": "int", "seq": "int", "ok": "bool", "req": "map"} {
		if types[k] != v {
			t.Errorf("otel.types[%s] = %q, want %q", k, types[k], v)
		}
	}
}

// pdataLogs is a request made with pdata: n records with bodies prefix0...
// and bodySize-byte padding.
func pdataLogs(n int, prefix string, bodySize int) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "pdata")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for i := range n {
		lr := lrs.AppendEmpty()
		b := fmt.Sprintf("%s%d", prefix, i)
		if len(b) < bodySize {
			b += strings.Repeat("x", bodySize-len(b))
		}
		lr.Body().SetStr(b)
		lr.SetTimestamp(1_700_000_000_000_000_000)
		lr.Attributes().PutInt("i", int64(i))
	}
	return ld
}

// emptyRecords is n records with nothing in them: a few bytes each on the
// wire, hundreds once decoded.
func emptyRecords(n int) plog.Logs {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for range n {
		lrs.AppendEmpty()
	}
	return ld
}

// deepJSON is a request whose body nests arrays 100 deep.
func deepJSON() []byte {
	inner := `{"stringValue":"x"}`
	for range 100 {
		inner = `{"arrayValue":{"values":[` + inner + `]}}`
	}
	return []byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":` + inner + `}]}]}]}`)
}

// post sends body to the source's HTTP listener.
func post(t *testing.T, url, contentType, encoding string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestHTTPJSON posts OTLP/JSON (as pdata encodes it), plain and gzipped,
// and reads the JSON answer.
func TestHTTPJSON(t *testing.T) {
	s := newSource(t, nil)
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	sourcetest.Start(t, s, pl.Processor)
	url := "http://" + s.HTTPAddr().String() + "/v1/logs"
	body, err := plogotlp.NewExportRequestFromLogs(pdataLogs(3, "json-", 0)).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []string{"", "gzip"} {
		b := body
		if enc == "gzip" {
			b = gz(t, body)
		}
		resp, out := post(t, url, "application/json", enc, b) //nolint:bodyclose // post reads and closes it
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%q: status %d type %q body %q", enc, resp.StatusCode, resp.Header.Get("Content-Type"), out)
		}
		r := plogotlp.NewExportResponse()
		if err := r.UnmarshalJSON(out); err != nil {
			t.Fatalf("answer %q: %v", out, err)
		}
		got := pl.Drain(t, 3, 5*time.Second)
		if !slices.Equal(sourcetest.Bodies(got), sourcetest.Seq("json-", 3)) {
			t.Fatalf("bodies %q", sourcetest.Bodies(got))
		}
		if got[1].Headers.Value("i") != "1" || got[1].Headers.Value("resource.service.name") != "pdata" || got[1].Headers.Value("timestamp") != "1700000000000" {
			t.Errorf("headers %v", got[1].Headers)
		}
	}
}

func credentialsFrom(c *tls.Config) credentials.TransportCredentials { return credentials.NewTLS(c) }

// bytesMessage and bytesCodec send bytes as they are.
type bytesMessage []byte

type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return v.(bytesMessage), nil }
func (bytesCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = b
	return nil
}
func (bytesCodec) Name() string { return "proto" }

func configFromMap(props map[string]string) *config.Props {
	all := map[string]string{"bind": "127.0.0.1", "grpcPort": "0", "httpPort": "0"}
	for k, v := range props {
		all[k] = v
	}
	return config.FromMap("a1.sources.r1.", all)
}

// grpcClient is pdata's own gRPC client, for reading statuses and
// partial success exactly.
func grpcClient(t *testing.T, addr string) (plogotlp.GRPCClient, *grpc.ClientConn) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return plogotlp.NewGRPCClient(cc), cc
}

func export(cl plogotlp.GRPCClient, ld plog.Logs) (plogotlp.ExportResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.Export(ctx, plogotlp.NewExportRequestFromLogs(ld))
}

// wantRetry checks err is UNAVAILABLE with a RetryInfo of a second.
func wantRetry(t *testing.T, err error, msg string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), msg) {
		t.Fatalf("status %v %q, want UNAVAILABLE with %q", st.Code(), st.Message(), msg)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() == time.Second {
			return
		}
	}
	t.Fatalf("no RetryInfo of 1s in %v", st.Details())
}

// wantHTTPStatus checks an OTLP/HTTP failure answer: the status code, and
// a google.rpc.Status body whose message has msg.
func wantHTTPStatus(t *testing.T, resp *http.Response, body []byte, code int, msg string) {
	t.Helper()
	var st spb.Status
	if resp.StatusCode != code {
		t.Fatalf("status %d %q, want %d", resp.StatusCode, body, code)
	}
	var err error
	if resp.Header.Get("Content-Type") == "application/json" {
		err = protojson.Unmarshal(body, &st)
	} else {
		err = proto.Unmarshal(body, &st)
	}
	if err != nil || !strings.Contains(st.GetMessage(), msg) {
		t.Fatalf("body %q (%v): want a google.rpc.Status with %q", body, err, msg)
	}
}

// TestFullChannel: a full channel is answered so that exporters retry
// (UNAVAILABLE with RetryInfo, 503 with Retry-After), nothing of the
// request is kept, and the SDK's exporters, retrying, get everything in
// once the channel drains.
func TestFullChannel(t *testing.T) {
	s := newSource(t, nil)
	pl := sourcetest.NewPipeline(t, 10, 10, 50*time.Millisecond)
	sourcetest.Start(t, s, pl.Processor)
	if err := pl.Processor.Process(context.Background(), make([]event.Event, 10)); err != nil {
		t.Fatal(err)
	}
	cl, _ := grpcClient(t, s.GRPCAddr().String())
	_, err := export(cl, pdataLogs(3, "g", 0))
	wantRetry(t, err, "could not take the records now")
	body, _ := plogotlp.NewExportRequestFromLogs(pdataLogs(3, "h", 0)).MarshalProto()
	resp, out := post(t, "http://"+s.HTTPAddr().String()+"/v1/logs", "application/x-protobuf", "", body) //nolint:bodyclose // post reads and closes it
	wantHTTPStatus(t, resp, out, 503, "could not take the records now")
	if resp.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if n := pl.Channel.Len(); n != 10 {
		t.Fatalf("channel holds %d, want the 10 it held", n)
	}

	// The SDK's exporters retry until the channel has room.
	grpcExp, err := otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(s.GRPCAddr().String()), otlploggrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer grpcExp.Shutdown(context.Background())
	httpExp, err := otlploghttp.New(context.Background(), otlploghttp.WithEndpoint(s.HTTPAddr().String()), otlploghttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer httpExp.Shutdown(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, exp := range []otlptest.Exporter{grpcExp, httpExp} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs[i] = exp.Export(ctx, sdkRecords(4, fmt.Sprintf("retried%d-", i)))
		}()
	}
	time.Sleep(300 * time.Millisecond) // both refused at least once
	var got []event.Event
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 18 && time.Now().Before(deadline) {
		got = append(got, pl.Take(t, 100, 100*time.Millisecond)...)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("exports: %v", errs)
	}
	var bodies []string
	for _, e := range got {
		if len(e.Body) > 0 {
			bodies = append(bodies, string(e.Body))
		}
	}
	slices.Sort(bodies)
	want := append(sourcetest.Seq("retried0-", 4), sourcetest.Seq("retried1-", 4)...)
	if !slices.Equal(bodies, want) {
		t.Fatalf("delivered %q, want %q", bodies, want)
	}
	if f := metric(s, "ChannelWriteFail"); f == "0" {
		t.Errorf("ChannelWriteFail %s: the refusals were not counted", f)
	}
}

// TestStopping: once the agent closed intake, requests are refused for a
// retry (the sender keeps them), over both protocols.
func TestStopping(t *testing.T) {
	s := newSource(t, nil)
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	sourcetest.Start(t, s, pl.Processor)
	if err := pl.Processor.(*flow.ChannelProcessor).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	cl, _ := grpcClient(t, s.GRPCAddr().String())
	_, err := export(cl, pdataLogs(2, "g", 0))
	wantRetry(t, err, "the agent is stopping")
	body, _ := plogotlp.NewExportRequestFromLogs(pdataLogs(2, "h", 0)).MarshalProto()
	resp, out := post(t, "http://"+s.HTTPAddr().String()+"/v1/logs", "application/x-protobuf", "", body) //nolint:bodyclose // post reads and closes it
	wantHTTPStatus(t, resp, out, 503, "the agent is stopping")
	if pl.Channel.Len() != 0 {
		t.Fatal("events were put after intake closed")
	}
}

// TestBadHTTPRequests: what cannot be read is answered 4xx with a reason,
// counted, and nothing of it is kept; the budget is whole again after.
func TestBadHTTPRequests(t *testing.T) {
	s := newSource(t, map[string]string{"maxRequestBytes": "100000", "maxBytesInFlight": "1048576"})
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	sourcetest.Start(t, s, pl.Processor)
	base := "http://" + s.HTTPAddr().String()
	good, _ := plogotlp.NewExportRequestFromLogs(pdataLogs(2, "g", 0)).MarshalProto()
	big, _ := plogotlp.NewExportRequestFromLogs(pdataLogs(50, "b", 4000)).MarshalProto()
	empties, _ := plogotlp.NewExportRequestFromLogs(emptyRecords(10_000)).MarshalProto()
	for _, tc := range []struct {
		name, path, method, ctype, enc string
		body                           []byte
		code                           int
		msg                            string
	}{
		{"garbage protobuf", "/v1/logs", "POST", "application/x-protobuf", "", []byte("\xff\xff\xff\xffnot protobuf"), 400, "not an OTLP ExportLogsServiceRequest"},
		{"bad JSON", "/v1/logs", "POST", "application/json", "", []byte(`{"resourceLogs":[{`), 400, "not an OTLP"},
		{"unknown media type", "/v1/logs", "POST", "text/plain", "", good, 415, "unsupported Content-Type"},
		{"unknown encoding", "/v1/logs", "POST", "application/x-protobuf", "br", good, 400, "unsupported Content-Encoding"},
		{"bad gzip", "/v1/logs", "POST", "application/x-protobuf", "gzip", []byte("not gzip"), 400, "not valid gzip"},
		{"too large", "/v1/logs", "POST", "application/x-protobuf", "", big, 413, "maxRequestBytes"},
		{"too large once decompressed", "/v1/logs", "POST", "application/x-protobuf", "gzip", gz(t, big), 413, "maxRequestBytes"},
		{"too many records to decode within the budget", "/v1/logs", "POST", "application/x-protobuf", "", empties, 413, "more than maxBytesInFlight"},
		{"values nested too deep", "/v1/logs", "POST", "application/json", "", deepJSON(), 400, "nest deeper"},
		{"wrong path", "/v1/traces", "POST", "application/x-protobuf", "", good, 404, ""},
		{"GET", "/v1/logs", "GET", "application/x-protobuf", "", nil, 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, base+tc.path, bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.ctype)
			if tc.enc != "" {
				req.Header.Set("Content-Encoding", tc.enc)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tc.msg == "" {
				if resp.StatusCode != tc.code {
					t.Fatalf("status %d %q, want %d", resp.StatusCode, out, tc.code)
				}
				return
			}
			wantHTTPStatus(t, resp, out, tc.code, tc.msg)
		})
	}
	if pl.Channel.Len() != 0 {
		t.Fatal("something of a bad request was put")
	}
	for _, c := range []string{"BadRequestCount", "UnsupportedMediaTypeCount", "RequestTooLargeCount", "NotFoundCount"} {
		if metric(s, c) == "0" {
			t.Errorf("%s not counted", c)
		}
	}
	if b := metric(s, "BytesInFlight"); b != "0" {
		t.Errorf("BytesInFlight %s after the requests", b)
	}
}

// TestGRPCLimits: a request over maxRequestBytes is refused without a
// retry (RESOURCE_EXHAUSTED); undecodable bytes too; the budget is whole
// again after, and a good request goes in.
func TestGRPCLimits(t *testing.T) {
	s := newSource(t, map[string]string{"maxRequestBytes": "100000", "maxBytesInFlight": "1048576"})
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	sourcetest.Start(t, s, pl.Processor)
	cl, cc := grpcClient(t, s.GRPCAddr().String())
	_, err := export(cl, pdataLogs(50, "b", 4000))
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
		t.Fatalf("a request too large: %v", err)
	}
	// Fewer bytes than the limit, but records that decoding could not fit
	// in the budget: refused before they are decoded, without a retry.
	_, err = export(cl, emptyRecords(10_000))
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "more than maxBytesInFlight") {
		t.Fatalf("a request too dear to decode: %v", err)
	}
	// Raw bytes that are no ExportLogsServiceRequest.
	var out []byte
	err = cc.Invoke(context.Background(), exportMethod, bytesMessage("\xff\xff\xff\xff"), &out, grpc.ForceCodec(bytesCodec{}))
	if st := status.Convert(err); st.Code() != codes.InvalidArgument {
		t.Fatalf("garbage: %v, want INVALID_ARGUMENT", err)
	}
	if metric(s, "BadRequestCount") != "1" || metric(s, "RequestTooLargeCount") != "1" {
		t.Errorf("BadRequestCount %s, RequestTooLargeCount %s", metric(s, "BadRequestCount"), metric(s, "RequestTooLargeCount"))
	}
	if _, err := export(cl, pdataLogs(2, "ok", 0)); err != nil {
		t.Fatal(err)
	}
	if got := sourcetest.Bodies(pl.Drain(t, 2, 5*time.Second)); !slices.Equal(got, sourcetest.Seq("ok", 2)) {
		t.Fatalf("bodies %q", got)
	}
	if !testutil.Eventually(func() bool { return metric(s, "BytesInFlight") == "0" }, 5*time.Second) {
		t.Errorf("BytesInFlight %s after the calls", metric(s, "BytesInFlight"))
	}
}

// TestBudget: while requests being put hold maxBytesInFlight, another is
// refused for a retry (busy), on both protocols; the budget frees again.
func TestBudget(t *testing.T) {
	// maxRequestBytes 170000 × 6 ≈ the 1 MiB budget: a 150 kB request
	// being put holds 5 × 150 kB, leaving no room for another's decoding.
	s := newSource(t, map[string]string{"maxRequestBytes": "170000", "maxBytesInFlight": "1048576"})
	pl := sourcetest.NewPipeline(t, 10, 10, 3*time.Second)
	sourcetest.Start(t, s, pl.Processor)
	if err := pl.Processor.Process(context.Background(), make([]event.Event, 10)); err != nil {
		t.Fatal(err)
	}
	cl, _ := grpcClient(t, s.GRPCAddr().String())
	first := make(chan error, 1)
	go func() {
		_, err := export(cl, pdataLogs(30, "first", 5000)) // waits in the full channel
		first <- err
	}()
	if !testutil.Eventually(func() bool { n, _ := strconv.Atoi(metric(s, "BytesInFlight")); return n > 600_000 }, 5*time.Second) {
		t.Fatalf("the first request holds %s bytes", metric(s, "BytesInFlight"))
	}
	_, err := export(cl, pdataLogs(30, "second", 5000))
	wantRetry(t, err, "maxBytesInFlight")
	body, _ := plogotlp.NewExportRequestFromLogs(pdataLogs(30, "third", 5000)).MarshalProto()
	resp, out := post(t, "http://"+s.HTTPAddr().String()+"/v1/logs", "application/x-protobuf", "", body) //nolint:bodyclose // post reads and closes it
	wantHTTPStatus(t, resp, out, 503, "maxBytesInFlight")
	if resp.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	// Room: the first request goes in, a transaction at a time.
	got := pl.Drain(t, 40, 10*time.Second)
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	if len(got) != 40 || string(got[10].Body) != "first0"+strings.Repeat("x", 5000-6) {
		t.Fatalf("%d events after the first request", len(got))
	}
	if metric(s, "OverBudgetCount") == "0" {
		t.Error("OverBudgetCount not counted")
	}
	if !testutil.Eventually(func() bool { return metric(s, "BytesInFlight") == "0" }, 5*time.Second) {
		t.Errorf("BytesInFlight %s at the end", metric(s, "BytesInFlight"))
	}
}

// TestPartialSuccess: records over maxEventBytes are refused alone, the
// OTLP way, and the rest of the request is put.
func TestPartialSuccess(t *testing.T) {
	s := newSource(t, map[string]string{"maxEventBytes": "1000"})
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	sourcetest.Start(t, s, pl.Processor)
	ld := pdataLogs(5, "p", 0)
	lrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
	lrs.At(1).Body().SetStr(strings.Repeat("L", 2000))
	lrs.At(3).Body().SetStr(strings.Repeat("L", 3000))
	cl, _ := grpcClient(t, s.GRPCAddr().String())
	resp, err := export(cl, ld)
	if err != nil {
		t.Fatal(err)
	}
	if ps := resp.PartialSuccess(); ps.RejectedLogRecords() != 2 || !strings.Contains(ps.ErrorMessage(), "maxEventBytes") {
		t.Fatalf("partial success %d %q", ps.RejectedLogRecords(), ps.ErrorMessage())
	}
	if got := sourcetest.Bodies(pl.Drain(t, 3, 5*time.Second)); !slices.Equal(got, []string{"p0", "p2", "p4"}) {
		t.Fatalf("bodies %q", got)
	}
	body, _ := plogotlp.NewExportRequestFromLogs(ld).MarshalJSON()
	hresp, out := post(t, "http://"+s.HTTPAddr().String()+"/v1/logs", "application/json", "", body) //nolint:bodyclose // post reads and closes it
	r := plogotlp.NewExportResponse()
	if hresp.StatusCode != 200 || r.UnmarshalJSON(out) != nil || r.PartialSuccess().RejectedLogRecords() != 2 {
		t.Fatalf("HTTP answer %d %q", hresp.StatusCode, out)
	}
	pl.Drain(t, 3, 5*time.Second)
	var m dto.Metric
	if err := s.droppedLarge.Write(&m); err != nil || m.GetCounter().GetValue() != 4 {
		t.Errorf("dropped event_too_large = %v (%v), want 4", m.GetCounter().GetValue(), err)
	}
}

// TestGRPCConnectionHygiene: a gRPC connection between calls is idle, not
// a message stalled half way, so the progress rule leaves it alone however
// long it waits; the idle timeout closes it.
func TestGRPCConnectionHygiene(t *testing.T) {
	s := newSource(t, map[string]string{"progressTimeout": "100", "minBytesPerSecond": "1000000", "idleTimeout": "1500"})
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	sourcetest.Start(t, s, pl.Processor)
	cl, _ := grpcClient(t, s.GRPCAddr().String())
	for i := range 3 {
		if _, err := export(cl, pdataLogs(1, fmt.Sprint(i), 0)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		time.Sleep(400 * time.Millisecond) // four progress windows between calls
	}
	if c := metric(s, "ConnectionTooSlowCount"); c != "0" {
		t.Fatalf("ConnectionTooSlowCount %s: an idle gRPC connection was taken for a slow message", c)
	}
	if o := metric(s, "OpenConnectionCount"); o != "1" {
		t.Fatalf("OpenConnectionCount %s, want the one connection kept", o)
	}
	if !testutil.Eventually(func() bool { return metric(s, "OpenConnectionCount") == "0" }, 5*time.Second) {
		t.Fatal("the idle connection was not closed")
	}
	pl.Drain(t, 3, time.Second)
}

// TestHTTPSlowSender: a body trickling in below minBytesPerSecond is cut.
func TestHTTPSlowSender(t *testing.T) {
	s := newSource(t, map[string]string{"progressTimeout": "200", "minBytesPerSecond": "1000"})
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	sourcetest.Start(t, s, pl.Processor)
	c, err := net.Dial("tcp", s.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n")
	closed := false
	for range 50 {
		if _, err := c.Write([]byte{0x0a}); err != nil {
			closed = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !closed && !testutil.ClosedByServer(c, 2*time.Second) {
		t.Fatal("the trickling connection was not closed")
	}
	if metric(s, "ConnectionTooSlowCount") == "0" {
		t.Error("ConnectionTooSlowCount not counted")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{"grpcPort": "-1", "httpPort": "-1"}, "listen nowhere"},
		{map[string]string{"grpcPort": "4317", "httpPort": "4317"}, "same as grpcPort"},
		{map[string]string{"resourcePrefix": ""}, "resourcePrefix"},
		{map[string]string{"resourcePrefix": "otel.res."}, "starts with otel."},
		{map[string]string{"httpPath": "v1/logs"}, "does not start with /"},
		{map[string]string{"maxRequestBytes": "10000000", "maxBytesInFlight": "20000000"}, "maxRequestBytes"},
		{map[string]string{"ssl": "true"}, "no keystore"},
	} {
		p := configFromMap(tc.props)
		if _, err := New(sourcetest.Env("r1", "otlp"), p); err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.props, err, tc.want)
		}
	}
}
