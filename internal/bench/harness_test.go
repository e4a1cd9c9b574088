package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// The harness presets run end to end through the real binary with the
// harness's configs: every line of each workload delivered by both rows,
// W1 into file_roll and W2 and W3 over tcp (shortened loads).
func TestHarnessPresets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, name := range []string{"harness-w1", "harness-w2", "harness-w3"} {
		t.Run(name, func(t *testing.T) {
			p, ok := FindPreset(name)
			if !ok {
				t.Fatalf("no preset %s", name)
			}
			out, err := RunPreset(context.Background(), p, PresetOptions{
				Examples: "../../examples", Binary: testutil.AgentBinary(t), Rounds: 1,
				Override: func(l *Load) {
					if l.Rate > 0 {
						l.Duration = 2 * time.Second
					} else {
						l.Count = 20000
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Runs) != 2 {
				t.Fatalf("%d rows, want the memory and the file row", len(out.Runs))
			}
			for _, r := range out.Runs {
				if r.Err != nil || r.Sent == 0 || r.Received != r.Sent || r.Duplicated != 0 {
					t.Errorf("%s: sent %d, delivered %d, %d duplicates, err %v", r.Label, r.Sent, r.Received, r.Duplicated, r.Err)
				}
			}
		})
	}
}
