package filerollsink

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// TestSinkSuite runs the sink contract against a directory that refuses
// by being replaced with a file (sinktest.DirGone). A write to a local file
// returns at once, so nothing can hold a delivery unanswered.
func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		dir := filepath.Join(t.TempDir(), "out")
		s, err := New(env, config.FromMap("a1.sinks.k1.", map[string]string{
			"sink.directory": dir, "sink.rollInterval": "0.05", "sink.batchSize": "100"}))
		if err != nil {
			t.Fatal(err)
		}
		refuse, accept := sinktest.DirGone(t, dir)
		// The files in name order (start time, then counter) hold the bodies in order.
		return s, sinktest.Downstream{Refuse: refuse, Accept: accept,
			Note: "a write to a local file returns at once", Delivered: func() []string {
				names, _ := filepath.Glob(filepath.Join(dir, "*"))
				sort.Strings(names)
				var bodies []string
				for _, n := range names {
					b, err := os.ReadFile(n)
					if err != nil {
						t.Fatal(err)
					}
					bodies = append(bodies, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
				}
				if len(bodies) == 1 && bodies[0] == "" {
					return nil
				}
				return bodies
			}}
	})
}
