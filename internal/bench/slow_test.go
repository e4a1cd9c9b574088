package bench

import "testing"

// logSlow logs every arrival slower than 2 ms with its time into the run, so
// a perf run shows whether the agent's outliers fall at the same moments as
// the floor's (the machine stalled) or apart from them (the pipeline did).
func logSlow(t *testing.T, name string, r *Receiver) {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	for i, s := range r.rec.samples {
		if s.lat > 2_000_000 {
			t.Logf("%s: arrival #%d at +%.3f s took %.2f ms", name, i, float64(s.at-r.rec.first)/1e9, float64(s.lat)/1e6)
		}
	}
}
