package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
)

// Machine describes where a run happened, for the report's header.
func Machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}

// WriteText prints the outcome as tables: one row per run and anchor, then
// each run's stage latencies.
func (o *Outcome) WriteText(w io.Writer) {
	if o.Preset != "" {
		fmt.Fprintf(w, "%s: %s\n", o.Preset, o.Title)
	} else if o.Title != "" {
		fmt.Fprintln(w, o.Title)
	}
	fmt.Fprintf(w, "%s, %s\n", o.Date.UTC().Format("2006-01-02 15:04 MST"), Machine())
	if len(o.Runs) > 0 {
		fmt.Fprintf(w, "load: %s\n", o.Runs[0].Load)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tsent\tdelivered\tlost\tdup\tevents/s\tMiB/s\tmean ms\tp50\tp90\tp99\tp99.9\tmax\t")
	for _, r := range o.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", o.label(r), r.Sent, r.Received, r.Lost, r.Duplicated,
			r.Throughput, r.MiBps(), fmtMs(r.Mean), fmtMs(r.P50), fmtMs(r.P90), fmtMs(r.P99), fmtMs(r.P999), fmtMs(r.Max))
	}
	opt := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmtMs(d)
	}
	for _, a := range o.Anchors {
		fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%.0f\t-\t%s\t%s\t-\t%s\t-\t%s\t\n", a.Label, a.Throughput, opt(a.Mean), opt(a.P50), opt(a.P99), opt(a.Max))
	}
	tw.Flush()
	for _, r := range o.Runs {
		var notes []string
		if r.Malformed > 0 {
			notes = append(notes, fmt.Sprintf("%d malformed", r.Malformed))
		}
		if r.Retries > 0 {
			notes = append(notes, fmt.Sprintf("%d calls refused by the source and sent again", r.Retries))
		}
		if iv := r.Load.interval(); iv > 0 && r.MaxLag > max(10*iv, 50*time.Millisecond) {
			notes = append(notes, fmt.Sprintf("the sender fell behind its schedule by up to %s ms, so the rate was not held throughout", fmtMs(r.MaxLag)))
		}
		if r.Err != nil {
			notes = append(notes, "ended early: "+r.Err.Error())
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "%s: %s\n", o.label(r), strings.Join(notes, "; "))
		}
	}
	o.writeProcess(w)
	for _, r := range o.Runs {
		if len(r.Stages) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nstages of %s (the agent's histograms; end_to_end is receipt by the source to the sink's delivery):\n", o.label(r))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "stage\tcomponent\tcount\tmean ms\tp50\tp90\tp99\tp99.9\tmax\t")
		for _, s := range r.Stages {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Stage, s.Component, s.Count,
				fmtMs(s.Mean), fmtMs(s.P50), fmtMs(s.P90), fmtMs(s.P99), fmtMs(s.P999), fmtMs(s.Max))
		}
		tw.Flush()
	}
}

// label is the run's label, with its round when the preset had several.
func (o *Outcome) label(r *Result) string {
	if o.Rounds > 1 && r.Round > 0 {
		return fmt.Sprintf("%s #%d", r.Label, r.Round)
	}
	return r.Label
}

// CPUPerEvent is the agent's CPU time per delivered event.
func (r *Result) CPUPerEvent() time.Duration {
	if r.Received == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Received)
}

// writeProcess prints the agents' own CPU time and peak memory (agents run
// as processes), then each row's ratios to its base row in the same round
// and their medians over the rounds.
func (o *Outcome) writeProcess(w io.Writer) {
	procs := false
	for _, r := range o.Runs {
		procs = procs || r.CPU > 0 || r.PeakRSS > 0
	}
	if !procs {
		return
	}
	fmt.Fprintf(w, "\nagent processes (CPU: user+system seconds from the first send to the last delivery; switches: its threads' "+
		"context switches over the same span; peak RSS: VmHWM, since the process started, the executable's pages included; "+
		"peak anon: RssAnon, heap and stacks, sampled every 20 ms during the run):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tCPU s\tCPU µs/event\tcores\tswitches/event\tpeak RSS MiB\tpeak anon MiB\t")
	for _, r := range o.Runs {
		cores := 0.0
		if r.Elapsed > 0 {
			cores = r.CPU.Seconds() / r.Elapsed.Seconds()
		}
		perEvent := 0.0
		if r.Received > 0 {
			perEvent = float64(r.Switches) / float64(r.Received)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.3f\t%.1f\t%.1f\t\n", o.label(r), r.CPU.Seconds(), float64(r.CPUPerEvent())/1e3, cores,
			perEvent, float64(r.PeakRSS)/(1<<20), float64(r.PeakAnon)/(1<<20))
	}
	tw.Flush()
	type ratio struct{ thr, cpuEv, cpu, rss []float64 }
	ratios := map[string]*ratio{}
	var order []string
	for _, r := range o.Runs {
		if r.Base == "" {
			continue
		}
		var base *Result
		for _, b := range o.Runs {
			if b.Label == r.Base && b.Round == r.Round {
				base = b
			}
		}
		if base == nil || base.Throughput == 0 || base.CPU == 0 || base.PeakRSS == 0 {
			continue
		}
		k := r.Label + " / " + r.Base
		if ratios[k] == nil {
			ratios[k] = &ratio{}
			order = append(order, k)
		}
		q := ratios[k]
		q.thr = append(q.thr, r.Throughput/base.Throughput)
		q.cpuEv = append(q.cpuEv, float64(r.CPUPerEvent())/float64(max(base.CPUPerEvent(), 1)))
		q.cpu = append(q.cpu, r.CPU.Seconds()/base.CPU.Seconds())
		q.rss = append(q.rss, float64(r.PeakRSS)/float64(base.PeakRSS))
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintf(w, "\nratios in each round (the median over the rounds in brackets):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rows\tthroughput\tCPU per event\tCPU\tpeak RSS\t")
	list := func(v []float64) string {
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
		}
		s := strings.Join(parts, ", ")
		if len(v) > 1 {
			s += fmt.Sprintf(" (%.2f)", median(v))
		}
		return s
	}
	for _, k := range order {
		q := ratios[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", k, list(q.thr), list(q.cpuEv), list(q.cpu), list(q.rss))
	}
	tw.Flush()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// MiBps is the delivered body bytes per second (lines count their
// newline), in MiB.
func (r *Result) MiBps() float64 {
	size := r.Load.Size
	if r.Load.Transport == SendNetcat || r.Load.Transport == SendSyslog {
		size++
	}
	return r.Throughput * float64(size) / (1 << 20)
}

func (l Load) String() string {
	rate := "as fast as it goes"
	if l.Rate > 0 {
		rate = strconv.FormatFloat(l.Rate, 'f', -1, 64) + " events/s"
	}
	limit := ""
	switch {
	case l.Count > 0:
		limit = fmt.Sprintf(", %d events", l.Count)
	case l.Duration > 0:
		limit = fmt.Sprintf(", for %v", l.Duration)
	}
	return fmt.Sprintf("%s, %s, %d-byte events, %d connection(s), batches of %d%s", l.Transport, rate, l.Size, l.Conns, l.Batch, limit)
}

func (l Load) interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / l.Rate)
}

// JSON shapes: latencies in milliseconds.
type (
	jsonLatency struct {
		Mean float64 `json:"mean"`
		P50  float64 `json:"p50"`
		P90  float64 `json:"p90,omitempty"`
		P99  float64 `json:"p99"`
		P999 float64 `json:"p999,omitempty"`
		Max  float64 `json:"max"`
	}
	jsonStage struct {
		Stage     string      `json:"stage"`
		Component string      `json:"component"`
		Count     uint64      `json:"count"`
		LatencyMs jsonLatency `json:"latency_ms"`
	}
	jsonLoad struct {
		Transport string  `json:"transport"`
		Rate      float64 `json:"rate"`
		Size      int     `json:"size"`
		Conns     int     `json:"conns"`
		Count     int     `json:"count,omitempty"`
		DurationS float64 `json:"duration_s,omitempty"`
		Batch     int     `json:"batch"`
	}
	jsonRun struct {
		Label        string      `json:"label"`
		Config       string      `json:"config,omitempty"`
		Load         jsonLoad    `json:"load"`
		Sent         int         `json:"sent"`
		Delivered    int         `json:"delivered"`
		Lost         int         `json:"lost"`
		Duplicated   int         `json:"duplicated"`
		Malformed    int         `json:"malformed"`
		Retries      int         `json:"retries"`
		ElapsedS     float64     `json:"elapsed_s"`
		Throughput   float64     `json:"throughput_eps"`
		MiBps        float64     `json:"throughput_mibps"`
		MaxSendLagMs float64     `json:"max_send_lag_ms"`
		Round        int         `json:"round,omitempty"`
		CPUSeconds   float64     `json:"cpu_s,omitempty"`
		PeakRSSBytes int64       `json:"peak_rss_bytes,omitempty"`
		PeakAnon     int64       `json:"peak_anon_bytes,omitempty"`
		Switches     int64       `json:"context_switches,omitempty"`
		LatencyMs    jsonLatency `json:"latency_ms"`
		Stages       []jsonStage `json:"stages,omitempty"`
		Error        string      `json:"error,omitempty"`
	}
	jsonAnchor struct {
		Label      string      `json:"label"`
		Throughput float64     `json:"throughput_eps,omitempty"`
		LatencyMs  jsonLatency `json:"latency_ms"`
		Note       string      `json:"note,omitempty"`
	}
	jsonOutcome struct {
		Preset  string       `json:"preset,omitempty"`
		Title   string       `json:"title,omitempty"`
		Date    time.Time    `json:"date"`
		Machine string       `json:"machine"`
		Runs    []jsonRun    `json:"runs"`
		Anchors []jsonAnchor `json:"anchors,omitempty"`
	}
)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func stageJSON(s metrics.StageLatency) jsonStage {
	return jsonStage{Stage: string(s.Stage), Component: s.Component, Count: s.Count,
		LatencyMs: jsonLatency{ms(s.Mean), ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999), ms(s.Max)}}
}

// WriteJSON prints the outcome as one JSON document.
func (o *Outcome) WriteJSON(w io.Writer) error {
	doc := jsonOutcome{Preset: o.Preset, Title: o.Title, Date: o.Date.UTC(), Machine: Machine(), Runs: []jsonRun{}}
	for _, r := range o.Runs {
		jr := jsonRun{
			Label: r.Label, Config: r.Config,
			Load: jsonLoad{Transport: r.Load.Transport, Rate: r.Load.Rate, Size: r.Load.Size, Conns: r.Load.Conns,
				Count: r.Load.Count, DurationS: r.Load.Duration.Seconds(), Batch: r.Load.Batch},
			Sent: r.Sent, Delivered: r.Received, Lost: r.Lost, Duplicated: r.Duplicated, Malformed: r.Malformed,
			Retries: r.Retries, Round: r.Round, CPUSeconds: r.CPU.Seconds(), PeakRSSBytes: r.PeakRSS, PeakAnon: r.PeakAnon, Switches: r.Switches, ElapsedS: r.Elapsed.Seconds(), Throughput: r.Throughput, MiBps: r.MiBps(), MaxSendLagMs: ms(r.MaxLag),
			LatencyMs: jsonLatency{ms(r.Mean), ms(r.P50), ms(r.P90), ms(r.P99), ms(r.P999), ms(r.Max)},
		}
		for _, s := range r.Stages {
			jr.Stages = append(jr.Stages, stageJSON(s))
		}
		if r.Err != nil {
			jr.Error = r.Err.Error()
		}
		doc.Runs = append(doc.Runs, jr)
	}
	for _, a := range o.Anchors {
		doc.Anchors = append(doc.Anchors, jsonAnchor{Label: a.Label, Throughput: a.Throughput, Note: a.Note,
			LatencyMs: jsonLatency{Mean: ms(a.Mean), P50: ms(a.P50), P99: ms(a.P99), Max: ms(a.Max)}})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
