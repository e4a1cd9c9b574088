package elasticsearchsink

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

var words = strings.Fields(`request served user session cart checkout payment order accepted declined
	retry timeout upstream latency cache hit miss db query rows returned error warning info debug trace
	GET POST PUT /api/v1/orders /api/v1/users /health 200 201 404 500 503 ms bytes region eu-west-1 us-east-1`)

// perfEvents returns n JSON events of about 1 KiB each, with log-like text.
func perfEvents(n int) ([]event.Event, int) {
	r := rand.New(rand.NewPCG(1, 2))
	evs := make([]event.Event, n)
	total := 0
	for i := range evs {
		var b strings.Builder
		fmt.Fprintf(&b, `{"seq":%d,"level":"info","service":"checkout","host":"web-%d","trace_id":"%016x","msg":"`, i, i%16, r.Uint64())
		for b.Len() < 1000 {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteString(`"}`)
		evs[i] = event.Event{Headers: event.HeadersOf(map[string]string{"timestamp": strconv.FormatInt(time.Now().UnixMilli(), 10)}), Body: []byte(b.String())}
		total += len(evs[i].Body)
	}
	return evs, total
}

// TestPerfVictoriaLogs measures the sink into VictoriaLogs (on the same
// machine) with 1 KiB JSON events, with and without gzip. Opt-in:
//
//	SLUICE_PERF=1 go test -run TestPerfVictoriaLogs -v ./internal/sink/elasticsearch/
func TestPerfVictoriaLogs(t *testing.T) {
	testutil.RequirePerf(t)
	base := startVictoriaLogs(t)
	const n = 200_000
	for _, tc := range []struct{ compression, batch, inFlight string }{
		{"none", "1000", "1"},
		{"gzip", "1000", "1"},
		{"none", "5000", "2"},
		{"gzip", "5000", "2"},
	} {
		name := fmt.Sprintf("compression=%s/batchSize=%s/maxInFlight=%s", tc.compression, tc.batch, tc.inFlight)
		t.Run(name, func(t *testing.T) {
			run := strings.NewReplacer("/", "_", "=", "_").Replace(name)
			ch := newChannel(t)
			s, w := newSink(t, ch, map[string]string{
				"hostNames": base + "/insert/elasticsearch", "batchSize": tc.batch, "compression": tc.compression,
				"maxInFlight": tc.inFlight, "serializer": "sluice", "query._msg_field": "msg", "query._time_field": "@timestamp",
				"query.extra_fields": "run=" + run,
			})
			evs, bodyBytes := perfEvents(n)
			for i := 0; i < n; i += 10000 {
				if err := testutil.PutCommit(ch, evs[i:i+10000]); err != nil {
					t.Fatal(err)
				}
			}
			evs = nil
			vlCPU := vlCPUSeconds(t, base)
			cpu := selfCPU()
			start := time.Now()
			drain(t, s, ch, 0)
			el := time.Since(start).Seconds()
			cpu = selfCPU() - cpu
			vlCPU = vlCPUSeconds(t, base) - vlCPU
			rows := vlQuery(t, base, fmt.Sprintf("run:=%q | stats count() n", run))
			if len(rows) != 1 || rows[0]["n"] != strconv.Itoa(n) {
				t.Fatalf("VictoriaLogs holds %v, want %d rows", rows, n)
			}
			reqs := w.m.requests.Load()
			t.Logf("%s: %d events in %.2fs: %.0f events/s, %.1f MiB/s of bodies, %.1f MiB/s on the wire, %.1f bulk requests/s (%d requests); CPU: sluice %.2f µs/event (%.2f cores), VictoriaLogs %.2f µs/event (%.2f cores)",
				name, n, el, n/el, float64(bodyBytes)/el/(1<<20), float64(w.m.bytes.Load())/el/(1<<20), float64(reqs)/el, reqs,
				cpu/n*1e6, cpu/el, vlCPU/n*1e6, vlCPU/el)
		})
	}
}

// BenchmarkEncode measures encoding a take into bulk lines with each
// serializer (sluice's is the one docs/PERFORMANCE.md quotes).
func BenchmarkEncode(b *testing.B) {
	evs, total := perfEvents(1000)
	for _, ser := range []string{"sluice", "logstash", "dynamic"} {
		b.Run(ser, func(b *testing.B) {
			w, err := buildProps(b, map[string]string{"hostNames": "es1", "idHeader": "id", "serializer": ser})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(total))
			b.ReportAllocs()
			for b.Loop() {
				w.encode(evs)
			}
		})
	}
}

// vlCPUSeconds reads VictoriaLogs' process_cpu_seconds_total.
func vlCPUSeconds(t testing.TB, base string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	t.Fatal("VictoriaLogs /metrics has no process_cpu_seconds_total")
	return 0
}
