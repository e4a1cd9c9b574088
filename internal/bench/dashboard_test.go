package bench

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// TestGrafanaDashboardNames checks that every metric the Grafana dashboard
// in docs/ queries is one a running agent exposes, so a renamed metric
// breaks this test rather than a user's dashboard.
func TestGrafanaDashboardNames(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	want := map[string]string{} // metric -> panel
	name := regexp.MustCompile(`\b(sluice_[a-z_]+|process_[a-z_]+|go_[a-z_]+)\b`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				want[m] = p.Title
			}
		}
	}
	if len(want) < 10 {
		t.Fatalf("found only %d metric names in the dashboard", len(want))
	}

	file := writeConfig(t, strings.NewReplacer("${bench.in.port}", "0", "${bench.out.port}", "9").Replace(tcpPipeline))
	a := agenttest.Start(t, agent.Options{File: file, HTTPAddr: "127.0.0.1:0"})
	// A latency histogram appears once a component registered it.
	a.Metrics().Latency("end_to_end", "k1").Observe(1)
	a.Metrics().Dropped("r1", "filtered").Add(0)
	resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	exposed := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			exposed[f[2]] = true
			if f[3] == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					exposed[f[2]+s] = true
				}
			}
		}
	}
	for m, panel := range want {
		if !exposed[m] {
			t.Errorf("panel %q queries %s, which the agent does not expose", panel, m)
		}
	}
}
