package monitoring

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/testutil"
)

// agentCPU returns the CPU time the process pid has used so far.
func agentCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	cpu, _, ok := procStat(pid)
	if !ok {
		t.Fatalf("no process %d", pid)
	}
	return cpu
}

// procStat returns the CPU time process pid has used and its parent.
func procStat(pid int) (cpu time.Duration, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): ppid is the 2nd, utime and stime the 12th and 13th, in
	// clock ticks.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, ppid, true // CLK_TCK is 100 on Linux
}

// treeCPU returns the CPU time process root and its living descendants
// have used so far (chromium: the browser, its renderers and helpers).
func treeCPU(root int) time.Duration {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	cpu := map[int]time.Duration{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c, pp, ok := procStat(pid); ok {
			parent[pid], cpu[pid] = pp, c
		}
	}
	var total time.Duration
	for pid, c := range cpu {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				total += c
				break
			}
		}
	}
	return total
}

// TestPerfStatusCost measures what watching costs the agent: W1 (netcat ->
// memory -> file_roll, 4 connections of 256-byte lines as fast as they
// go) through the real agent, in interleaved rounds of three kinds, in one
// run:
//
//	alone     nobody watches (the sampler runs, as it always does with --http)
//	page+tap  the status page open in headless chromium (polling every
//	          second) and `sluice tap r1` running (10 events a second)
//	poll+tap  the page's requests made by a plain client instead of chromium
//	          (chromium itself takes CPU on this 2-core machine), and the tap
//
// It reports, per kind, the median lines/s, the agent's CPU per line and
// chromium's CPU, and the ratios to alone. SLUICE_PERF=1 runs it;
// SLUICE_PERF_ROUNDS (5) and SLUICE_PERF_LINES (1,000,000 per round) size
// it; SLUICE_PERF_KINDS chooses the kinds ("alone page+tap poll+tap" by
// default; page, poll and tap alone too).
func TestPerfStatusCost(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.AgentBinary(t)
	rounds := testutil.EnvInt("SLUICE_PERF_ROUNDS", 5)
	const conns, size = 4, 256
	perConn := testutil.EnvInt("SLUICE_PERF_LINES", 1_000_000) / conns
	a := startAgentFile(t, "testdata/w1.properties", "--allow-tap")
	pid := a.Cmd.Process.Pid
	ctx := browser(t, 1400, 900)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}

	// watch starts what a kind runs beside the load, and returns its stop.
	watch := func(kind string) func() {
		if kind == "alone" {
			return func() {}
		}
		stopTap := func() {}
		if strings.Contains(kind, "tap") {
			tap := exec.Command(bin, "tap", "r1", "--http", a.HTTP)
			tap.Stdout, tap.Stderr = io.Discard, io.Discard
			if err := tap.Start(); err != nil {
				t.Fatal(err)
			}
			stopTap = func() { _ = tap.Process.Kill(); _ = tap.Wait() }
		}
		stopPage := func() {}
		switch {
		case kind == "tap":
		case strings.HasPrefix(kind, "page"):
			if err := chromedp.Do(ctx, chromedp.Navigate("http://"+a.HTTP+"/")); err != nil {
				t.Fatal(err)
			}
			// The page's detail panel polls the history too.
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.node[data-id="channel/c1"]`))); err != nil {
				t.Fatal(err)
			}
			stopPage = func() { _ = chromedp.Do(ctx, chromedp.Navigate("about:blank")) }
		default:
			pctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // what the page requests: status every second, history every 5
				defer wg.Done()
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for i := 0; ; i++ {
					for _, p := range []string{"/api/status", "/api/history?id=channel/c1"} {
						if p != "/api/status" && i%5 != 0 {
							continue
						}
						if resp, err := http.Get("http://" + a.HTTP + p); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
					select {
					case <-pctx.Done():
						return
					case <-tick.C:
					}
				}
			}()
			stopPage = func() { cancel(); wg.Wait() }
		}
		time.Sleep(time.Second) // let the watchers settle before the load
		return func() {
			stopPage()
			stopTap()
		}
	}

	browserPID := chromedp.FromContext(ctx).Browser.Process().Pid

	type result struct {
		rate, cpuPerLine, browserCores float64
	}
	results := map[string][]result{}
	kinds := []string{"alone", "page+tap", "poll+tap"}
	if k := os.Getenv("SLUICE_PERF_KINDS"); k != "" { // also: page, poll, tap alone
		kinds = strings.Fields(k)
	}
	var sent uint64
	for r := -1; r < rounds; r++ { // round -1 warms up (chromium's first page, the agent's buffers): not counted
		for i := range kinds {
			kind := kinds[(r+1+i)%len(kinds)] // each kind goes first, second and last in turn
			stop := watch(kind)
			before := dirBytes(t, a.OutDir)
			want := before + int64(conns*perConn)*(size+1)
			cpu0, browser0 := agentCPU(t, pid), treeCPU(browserPID)
			start := time.Now()
			errs := make(chan error, conns)
			for c := range conns {
				first := sent + uint64(c*perConn)
				go func() {
					s, err := bench.Dial(a.Netcat)
					if err != nil {
						errs <- err
						return
					}
					if err := s.Flood(first, perConn, size); err != nil {
						errs <- err
						return
					}
					errs <- s.Close()
				}()
			}
			sent += uint64(conns * perConn)
			got := before
			for deadline := time.Now().Add(5 * time.Minute); got < want && time.Now().Before(deadline); {
				time.Sleep(2 * time.Millisecond)
				got = dirBytes(t, a.OutDir)
			}
			elapsed := time.Since(start)
			cpu := agentCPU(t, pid) - cpu0
			browserCPU := treeCPU(browserPID) - browser0
			for range conns {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			stop()
			if got != want {
				t.Fatalf("round %d %s: file_roll holds %d bytes, want %d", r, kind, got, want)
			}
			lines := float64(conns * perConn)
			res := result{rate: lines / elapsed.Seconds(), cpuPerLine: float64(cpu.Nanoseconds()) / 1e3 / lines,
				browserCores: browserCPU.Seconds() / elapsed.Seconds()}
			if r >= 0 {
				results[kind] = append(results[kind], res)
			}
			t.Logf("round %d %-9s %9.0f lines/s  agent CPU %.3f µs/line  chromium %.3f cores", r, kind, res.rate, res.cpuPerLine, res.browserCores)
		}
	}
	median := func(kind string, f func(result) float64) float64 {
		var v []float64
		for _, r := range results[kind] {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	rate := func(r result) float64 { return r.rate }
	cpu := func(r result) float64 { return r.cpuPerLine }
	browserCores := func(r result) float64 { return r.browserCores }
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("medians of %d rounds of %d lines of %d B over %d connections (load average at the end: %s)",
		rounds, conns*perConn, size, conns, strings.TrimSpace(string(load)))
	// Rounds drift with the machine's other load, so each kind is also
	// compared with alone in the same round (they ran seconds apart): the
	// median of those ratios, and their range.
	paired := func(kind string, f func(result) float64) (med, lo, hi float64) {
		var v []float64
		for i, r := range results[kind] {
			v = append(v, f(r)/f(results["alone"][i]))
		}
		slices.Sort(v)
		return v[len(v)/2], v[0], v[len(v)-1]
	}
	for _, k := range kinds {
		pr, prLo, prHi := paired(k, rate)
		pc, pcLo, pcHi := paired(k, cpu)
		t.Logf("%-9s %9.0f lines/s (%.3f of alone; in-round %.3f, %.3f-%.3f)  agent CPU %.3f µs/line (%.3f; in-round %.3f, %.3f-%.3f)  chromium %.3f cores",
			k, median(k, rate), median(k, rate)/median("alone", rate), pr, prLo, prHi,
			median(k, cpu), median(k, cpu)/median("alone", cpu), pc, pcLo, pcHi, median(k, browserCores))
	}
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}
