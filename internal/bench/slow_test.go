package bench

import (
	"fmt"
	"testing"
	"time"
)

// logSlow logs every arrival slower than 2 ms with its time, and the
// longest CPU stall the monitors saw while it was on its way, so a perf
// run shows whether an outlier was the machine's or the
// pipeline's. It returns the slowest arrival that no stall overlapped.
func logSlow(t *testing.T, name string, r *Receiver, stalls *stallMonitors) (unexplained time.Duration) {
	r.rec.mu.Lock()
	samples := append([]sample(nil), r.rec.samples...)
	first := r.rec.first
	r.rec.mu.Unlock()
	for i, s := range samples {
		lat := time.Duration(s.lat)
		if lat <= 2*time.Millisecond {
			continue
		}
		seen := "no CPU stall seen"
		if d, cpu := stalls.worstOverlap(s.at-s.lat, s.at); d > 0 {
			seen = fmt.Sprintf("overlaps a %v stall of CPU %d", d.Round(10*time.Microsecond), cpu)
		} else {
			unexplained = max(unexplained, lat)
		}
		t.Logf("%s: arrival #%d at +%.3f s (%s) took %.2f ms; %s", name, i, float64(s.at-first)/1e9,
			time.Unix(0, s.at).UTC().Format("15:04:05.000"), float64(s.lat)/1e6, seen)
	}
	return unexplained
}
