package hostile

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func requireLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the agent's peak RSS from /proc")
	}
}

// measure runs row with the agent's peak RSS reset first, and records the
// peak it reached.
func measure(a *agent, row func() result) result {
	reset := a.resetPeak()
	r := row()
	r.peak = a.peakRSS()
	if !reset {
		r.response += " (peak since the agent started: this kernel does not reset VmHWM)"
	}
	return r
}

// check fails t for each problem of r and for a peak over the bound.
func check(t *testing.T, r result) {
	t.Helper()
	for _, p := range r.problems {
		t.Errorf("%s: %s", r.input, p)
	}
	if r.peak > BoundRSS {
		t.Errorf("%s: peak RSS %s, over the bound %s", r.input, mib(r.peak), mib(BoundRSS))
	}
	if strings.HasPrefix(r.honest, "no") {
		t.Errorf("%s: the honest client was not served", r.input)
	}
}

// TestHostileMemory is the default run's share of the table: the memory
// rows, on a smaller scale, at once, through the real agent. Before the
// limits, these two took the agent to about 800 MiB.
func TestHostileMemory(t *testing.T) {
	requireLinux(t)
	a := startAgent(t)
	var rs [2]result
	var wg sync.WaitGroup
	wg.Add(2)
	reset := a.resetPeak()
	go func() { defer wg.Done(); rs[0] = rowHTTPTiny(t, a, 3) }()
	go func() { defer wg.Done(); rs[1] = rowAvroFrames(t, a, 5, 30_000_000) }()
	wg.Wait()
	peak := a.peakRSS()
	for _, r := range rs {
		t.Logf("%s: %s; honest client served: %s", r.input, r.response, r.honest)
		r.peak = peak
		check(t, r)
	}
	t.Logf("peak RSS of both at once: %s (bound %s, reset %v)", mib(peak), mib(BoundRSS), reset)
}

// TestHostileTable runs the whole table of issue 13 (but taildir's and the
// config's rows, which other packages test), each row against a fresh agent
// (so each peak is its own), then all rows at once against one, and prints
// it. It takes a few minutes:
//
//	scripts/hostile.sh
func TestHostileTable(t *testing.T) {
	if os.Getenv("SLUICE_HOSTILE") == "" && os.Getenv("SLUICE_LONG") == "" {
		t.Skip("set SLUICE_HOSTILE=1 (or run scripts/hostile.sh) to run the whole table")
	}
	requireLinux(t)
	raiseFileLimit(t, 8000)
	type row func(*agent) result
	rows := []row{
		func(a *agent) result { return rowHTTPTiny(t, a, 1) },
		func(a *agent) result { return rowHTTPTiny(t, a, 3) },
		func(a *agent) result { return rowHTTPTiny(t, a, 6) },
		func(a *agent) result { return rowAvroFrames(t, a, 10, 60_000_000) },
		func(a *agent) result { return rowAvroFrames(t, a, 10, 30_000_000) },
		func(a *agent) result { return rowAvroIdle(t, a, 1100) },
		func(a *agent) result { return rowAvroTrickle(t, a, 1100, 25*time.Second) },
		func(a *agent) result { return rowNetcatOverlong(t, a, 500) },
		func(a *agent) result { return rowHTTP4xx(t, a, 200) },
		func(a *agent) result { return rowSyslogHostile(t, a, 3) },
		func(a *agent) result { return rowSyslogUDPBursts(t, a, 5, 1000) },
	}
	var results []result
	var idle int64
	for _, rw := range rows {
		a := startAgent(t)
		idle = max(idle, a.peakRSS())
		r := measure(a, func() result { return rw(a) })
		check(t, r)
		results = append(results, r)
		a.Stop(30 * time.Second)
	}
	a := startAgent(t)
	all := measure(a, func() result {
		var mu sync.Mutex
		var parts []result
		var wg sync.WaitGroup
		for _, rw := range []row{rows[2], rows[3], rows[4], rows[5], rows[7], rows[9], rows[10]} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rw(a)
				mu.Lock()
				parts = append(parts, r)
				mu.Unlock()
			}()
		}
		wg.Wait()
		r := result{input: "all of the above at once (but the trickle and the 4xx rows)", response: "as above", honest: "yes"}
		for _, p := range parts {
			if strings.HasPrefix(p.honest, "no") {
				r.honest = "no (" + p.input + ")"
			}
		}
		return r
	})
	check(t, all)
	results = append(results, all)

	var b strings.Builder
	fmt.Fprintf(&b, "\nagent idle: %s RSS; bound with default limits: %s\n\n", mib(idle), mib(BoundRSS))
	fmt.Fprintf(&b, "| input | response | peak RSS | honest client served |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.input, r.response, mib(r.peak), r.honest)
	}
	if p := os.Getenv("SLUICE_HOSTILE_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	} else {
		t.Log(b.String())
	}
}
