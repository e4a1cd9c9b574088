package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/source/netcat"
	"github.com/sluicehq/sluice/internal/testutil"
)

// delayWriter is the sink of the known-delay pipeline: it holds every
// batch for delay, then hands its events to the bench's receiver, except
// the event numbered drop, which it loses.
type delayWriter struct {
	delay time.Duration
	drop  uint64
	recv  *Receiver
}

func (w delayWriter) Write(ctx context.Context, events []event.Event) error {
	select {
	case <-time.After(w.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, e := range events {
		if seq, _, err := ParseLine(e.Body); err == nil && seq == w.drop {
			continue
		}
		w.recv.Record(e.Body)
	}
	return nil
}

// delayPipeline starts netcat -> memory -> BatchSink(delayWriter) with one
// metrics registry, and returns the netcat address.
func delayPipeline(t *testing.T, reg *metrics.Registry, w delayWriter) string {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	env := func(name, typ string) flow.Env {
		return flow.Env{Agent: "a1", Name: name, Type: typ, Metrics: reg, Logger: quiet}
	}
	cp := config.FromMap("a1.channels.c1.", map[string]string{"capacity": "10000", "transactionCapacity": "1000"})
	ch, err := memorychannel.New(env("c1", "memory"), cp)
	if err != nil || cp.Err() != nil {
		t.Fatal(err, cp.Err())
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop(context.Background()) })
	sel, err := flow.NewSelector(nil, map[string]flow.Channel{"c1": ch}, []string{"c1"})
	if err != nil {
		t.Fatal(err)
	}
	proc := flow.NewChannelProcessor(flow.ProcessorConfig{Source: "r1", Selector: sel, Metrics: reg, Logger: quiet})

	senv := env("k1", "delay")
	senv.Channel = ch
	sink := flow.NewBatchSink(senv, w, 100, nil)
	if err := sink.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	runner := flow.NewSinkRunner("k1", sink, quiet)
	runner.Start()
	t.Cleanup(func() { _ = runner.Stop(context.Background()) })

	port, err := pickPort()
	if err != nil {
		t.Fatal(err)
	}
	np := config.FromMap("a1.sources.r1.", map[string]string{"bind": "127.0.0.1", "port": itoa(port), "max-line-length": "2048"})
	src, err := netcatsource.New(env("r1", "netcat"), np)
	if err != nil || np.Err() != nil {
		t.Fatal(err, np.Err())
	}
	if err := src.Start(context.Background(), proc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Stop(context.Background()) })
	return net.JoinHostPort("127.0.0.1", itoa(port))
}

// TestKnownDelay is what the bench is for: a pipeline whose sink holds each
// batch 25 ms must show at least 25 ms at every percentile, the sink stage
// must hold that time, and an event the sink drops must show as lost.
func TestKnownDelay(t *testing.T) {
	const delay = 25 * time.Millisecond
	reg := metrics.NewRegistry("a1")
	recv := NewReceiver()
	defer recv.Close()
	addr := delayPipeline(t, reg, delayWriter{delay: delay, drop: 7, recv: recv})

	res, err := Run(context.Background(), Options{
		Label:    "delay",
		Load:     Load{Transport: SendNetcat, Addr: addr, Rate: 30, Count: 60, Size: 200},
		Receiver: recv,
		Metrics:  reg,
		Drain:    time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", res.Report)
	if res.Sent != 60 || res.Received != 59 || res.Lost != 1 || res.Duplicated != 0 {
		t.Errorf("sent %d received %d lost %d dup %d, want 60, 59, 1 (event 7 dropped), 0", res.Sent, res.Received, res.Lost, res.Duplicated)
	}
	for name, d := range map[string]time.Duration{"p50": res.P50, "p90": res.P90, "p99": res.P99, "max": res.Max} {
		if d < delay {
			t.Errorf("%s %v is below the sink's delay %v", name, d, delay)
		}
	}
	// An event every 33 ms, so a batch holds one event and waits for none:
	// the median is the delay plus the pipeline's own fraction of a
	// millisecond (a loaded machine grows the tail, not the median).
	if res.P50 > delay+10*time.Millisecond {
		t.Errorf("p50 %v is far above the delay %v", res.P50, delay)
	}
	var sink, e2e *metrics.StageLatency
	for i, s := range res.Stages {
		switch s.Stage {
		case metrics.StageSink:
			sink = &res.Stages[i]
		case metrics.StageEndToEnd:
			e2e = &res.Stages[i]
		}
	}
	if sink == nil || e2e == nil {
		t.Fatalf("stages %+v: no sink or end_to_end stage", res.Stages)
	}
	// The histograms' buckets are 6.25% wide.
	if sink.P50 < delay*15/16 || sink.P50 > delay+15*time.Millisecond {
		t.Errorf("sink stage p50 %v, want about %v: the stage that holds the time", sink.P50, delay)
	}
	if e2e.Count != 60 {
		t.Errorf("end_to_end counted %d events, want 60 (the dropped one was acknowledged by the sink)", e2e.Count)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// writeConfig writes conf into a temporary file and returns its path.
func writeConfig(t *testing.T, conf string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "bench.properties")
	testutil.WriteFile(t, file, conf)
	return file
}

const tcpPipeline = `a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = ${bench.in.port}
a1.sources.r1.max-line-length = 2048
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.channels.c1.capacity = 10000
a1.sinks.k1.type = tcp
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = ${bench.out.port}
a1.sinks.k1.channel = c1
`

// TestMainAgentJSONAndSVG runs the command with an agent in process and
// checks its JSON and its chart.
func TestMainAgentJSONAndSVG(t *testing.T) {
	file := writeConfig(t, tcpPipeline)
	svg := filepath.Join(t.TempDir(), "chart.svg")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"-f", file, "-n", "a1", "--rate", "0", "--count", "3000", "--conns", "2", "--size", "100",
		"--json", "--svg", svg, "--drain", "5s"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	var doc struct {
		Runs []struct {
			Sent, Delivered, Lost, Duplicated int
			Throughput                        float64                         `json:"throughput_eps"`
			LatencyMs                         struct{ P50, P99, Max float64 } `json:"latency_ms"`
			Stages                            []struct {
				Stage string
				Count uint64
			}
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("%v in %s", err, stdout.String())
	}
	if len(doc.Runs) != 1 {
		t.Fatalf("runs: %s", stdout.String())
	}
	r := doc.Runs[0]
	if r.Sent != 3000 || r.Delivered != 3000 || r.Lost != 0 || r.Duplicated != 0 || r.Throughput <= 0 {
		t.Errorf("run %+v", r)
	}
	if !(0 < r.LatencyMs.P50 && r.LatencyMs.P50 <= r.LatencyMs.P99 && r.LatencyMs.P99 <= r.LatencyMs.Max) {
		t.Errorf("latencies out of order: %+v", r.LatencyMs)
	}
	stages := map[string]uint64{}
	for _, s := range r.Stages {
		stages[s.Stage] = s.Count
	}
	for _, s := range []string{"source", "channel", "sink", "end_to_end"} {
		if stages[s] != 3000 {
			t.Errorf("stage %s counted %d events, want 3000", s, stages[s])
		}
	}
	checkSVG(t, svg)
}

func checkSVG(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	lines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	// Over time: p50, p99 and max per run; the distribution: one per run.
	if lines < 4 {
		t.Errorf("the chart has %d polylines, want at least 4", lines)
	}
}

// TestPresetLatencyShort runs the latency preset for a second: both rows
// are measured at the same time, and the tuned-Flume row is printed beside.
func TestPresetLatencyShort(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"latency-200-short", "--duration", "1s", "--quiet"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	t.Log("\n" + out)
	for _, want := range []string{"sluice ", "no agent (floor)", "Flume, tuned (article)", "46.0", "87.0", "end_to_end", "200 events/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestPresetNeedsMissingType checks that a preset whose config uses a type
// this build lacks fails with a message naming it, measuring nothing.
func TestPresetNeedsMissingType(t *testing.T) {
	dir := t.TempDir()
	conf := strings.Replace(tcpPipeline, "a1.sinks.k1.type = tcp", "a1.sinks.k1.type = irc", 1)
	for _, f := range []string{"bench-latency.properties", "needs-irc.properties"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := Preset{Name: "irc-test", Runs: []PresetRun{{Label: "x", Config: "needs-irc.properties", Load: Load{Count: 1}}}, Needs: []string{"sink:irc"}}
	_, err := RunPreset(context.Background(), p, PresetOptions{Examples: dir})
	if err == nil || !strings.Contains(err.Error(), "needs the irc sink") || !strings.Contains(err.Error(), "nothing was measured") {
		t.Fatalf("err = %v", err)
	}
}

// TestTransports sends through each input and receives from each output
// the bench supports.
func TestTransports(t *testing.T) {
	httpToTCP := strings.NewReplacer("a1.sources.r1.type = netcat", "a1.sources.r1.type = http",
		"a1.sources.r1.max-line-length = 2048\n", "").Replace(tcpPipeline)
	toDir := strings.Replace(tcpPipeline, `a1.sinks.k1.type = tcp
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = ${bench.out.port}`, `a1.sinks.k1.type = file_roll
a1.sinks.k1.sink.directory = ${bench.out.dir}
a1.sinks.k1.sink.rollInterval = 0`, 1)
	for _, tc := range []struct {
		name    string
		conf    string // "" sends straight to the receiver
		send    string
		receive string
	}{
		{"netcat to tcp sink", tcpPipeline, SendNetcat, ReceiveTCP},
		{"http to tcp sink", httpToTCP, SendHTTP, ReceiveTCP},
		{"netcat to file_roll", toDir, SendNetcat, ReceiveDir},
		{"avro straight", "", SendAvro, ReceiveAvro},
		{"syslog straight", "", SendSyslog, ReceiveTCP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := Options{
				Label:   tc.name,
				Load:    Load{Transport: tc.send, Count: 500, Size: 64, Conns: 2, Batch: 50},
				Receive: Receive{Kind: tc.receive},
				Drain:   3 * time.Second,
				Logger:  slog.New(slog.DiscardHandler),
			}
			if tc.conf != "" {
				opt.Agent = &AgentConfig{File: writeConfig(t, tc.conf), Name: "a1"}
			}
			if tc.name == "syslog straight" {
				// The floor would send lines; point syslog at the listener.
				r, err := Listen("127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				opt.Receiver, opt.Load.Addr = r, r.Addr()
			}
			res, err := Run(context.Background(), opt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent != 500 || res.Received != 500 || res.Lost != 0 || res.Malformed != 0 || res.Err != nil {
				t.Errorf("%v malformed %d err %v", res.Report, res.Malformed, res.Err)
			}
		})
	}
}

// TestRecorder covers duplicates, malformed input, events beyond the sent
// range, unsent ranges and the thinning of samples past the cap.
func TestRecorder(t *testing.T) {
	r := NewReceiver()
	defer r.Close()
	r.rec.capacity = 8
	now := time.Now()
	for i := range 20 {
		line := AppendLine(nil, uint64(i), now.Add(-time.Duration(i+1)*time.Millisecond), 50)
		r.RecordAt(line, now.UnixNano())
	}
	r.Record(AppendLine(nil, 3, now, 50)) // a duplicate
	r.Record([]byte("no payload here\n"))
	r.RecordAt([]byte("<13>1 2026-01-01T00:00:00Z host app 1 - - 25 "+strconv.FormatInt(now.UnixNano()-1e6, 10)+" xxx"), now.UnixNano())
	rep := r.rec.report(30, []seqRange{{from: 28, n: 2}})
	if rep.Sent != 28 || rep.Received != 21 || rep.Duplicated != 1 || rep.Malformed != 1 {
		t.Errorf("report %+v", rep)
	}
	// 20..27 except 25 are missing: 7 lost (28 and 29 were never sent).
	if rep.Lost != 7 {
		t.Errorf("lost %d, want 7", rep.Lost)
	}
	if got := len(r.rec.samples); got > 8 || got < 4 || r.rec.stride < 2 {
		t.Errorf("kept %d samples with stride %d; want at most 8, thinned", got, r.rec.stride)
	}
	if rep.Max > 21*time.Millisecond || rep.P50 < time.Millisecond {
		t.Errorf("latencies %v", rep)
	}
}

// TestPercentiles checks the nearest-rank percentiles on known samples.
func TestPercentiles(t *testing.T) {
	lat := make([]int64, 1000)
	for i := range lat {
		lat[i] = int64(i+1) * int64(time.Millisecond)
	}
	var rep Report
	rep.fill(lat)
	want := map[string][2]time.Duration{
		"p50": {rep.P50, 500 * time.Millisecond}, "p90": {rep.P90, 900 * time.Millisecond},
		"p99": {rep.P99, 990 * time.Millisecond}, "p99.9": {rep.P999, 999 * time.Millisecond},
		"max": {rep.Max, time.Second}, "mean": {rep.Mean, 500500 * time.Microsecond},
	}
	for name, w := range want {
		if w[0] != w[1] {
			t.Errorf("%s = %v, want %v", name, w[0], w[1])
		}
	}
}

// TestGeneratorPacesAndStops checks a paced run sends exactly rate ×
// duration events, none early.
func TestGeneratorPacesAndStops(t *testing.T) {
	r, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	g, err := NewGenerator(Load{Addr: r.Addr(), Rate: 500, Duration: 400 * time.Millisecond, Size: 50, Conns: 3})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 390*time.Millisecond {
		t.Errorf("200 events at 500/s took %v", took)
	}
	if g.Sent() != 200 {
		t.Errorf("sent %d, want 200", g.Sent())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.WaitFor(ctx, 200); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, l := range []Load{
		{Transport: "carrier-pigeon", Addr: "x:1"},
		{Addr: "x:1", Size: 10},
		{},
		{Addr: "x:1", Rate: -1},
	} {
		if _, err := NewGenerator(l); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
}

func TestMainBadArgs(t *testing.T) {
	for _, args := range [][]string{
		{"no-such-preset"},
		{"--no-such-flag"},
		{"-f", "x.properties"},
		{"latency-200", "memory-vs-file"},
	} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"--list"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "memory-vs-file") {
		t.Errorf("--list: %d %s", code, out.String())
	}
}

// FuzzFindPayload checks that arbitrary bytes never break the parser and
// that a generated line, with or without a prefix, always parses back.
func FuzzFindPayload(f *testing.F) {
	f.Add([]byte("12 1700000000000000000 xxxx\n"), uint64(5), int64(1700000000000000001))
	f.Add([]byte("<13>1 2026-01-01T00:00:00Z h a 1 - - "), uint64(0), int64(1e18+1))
	f.Add([]byte("\x02\x06abc\x02x"), uint64(99), int64(2e18))
	f.Fuzz(func(t *testing.T, prefix []byte, seq uint64, sent int64) {
		_, _, _ = findPayload(prefix)
		_, _, _ = ParseLine(prefix)
		if sent <= 1e18 || len(prefix) > 500 || bytes.ContainsAny(prefix, "0123456789") {
			return
		}
		line := AppendLine(nil, seq, time.Unix(0, sent), 60)
		if s, ts, err := ParseLine(line); err != nil || s != seq || ts != sent {
			t.Fatalf("ParseLine(%q) = %d %d %v", line, s, ts, err)
		}
		in := append(append([]byte(nil), prefix...), line...)
		if s, ts, err := findPayload(in); err != nil || s != seq || ts != sent {
			t.Fatalf("findPayload(%q) = %d %d %v", in, s, ts, err)
		}
	})
}

// TestRefusedForeverEndsTheRun checks that a source that refuses every
// call (a full channel whose sink never delivers) ends the run with an
// error, after retries, instead of hanging.
func TestRefusedForeverEndsTheRun(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "channel full", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Options{
		Load:    Load{Transport: SendHTTP, Addr: strings.TrimPrefix(srv.URL, "http://"), Count: 10, Size: 50},
		Receive: Receive{Kind: ReceiveNone},
		Drain:   300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || !strings.Contains(res.Err.Error(), "refused a batch") || res.Retries < 2 || calls.Load() < 3 {
		t.Fatalf("err %v, retries %d, calls %d", res.Err, res.Retries, calls.Load())
	}
}
