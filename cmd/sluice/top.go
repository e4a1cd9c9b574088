package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/rivo/tview"

	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/status"
)

const topUsage = `usage: sluice top [options]

Shows every source, channel, sink group and sink of a running agent with its
rates, fill, latencies, errors and health, refreshed live. Keys: g graph order,
n name, i in rate, o out rate, f fill, l latency (P99), e errors, r reverse,
q or Esc quit; arrows and PgUp/PgDn scroll.

options:
  --interval SECONDS       refresh every SECONDS (default 1)
  --once                   print the table once, as plain text, and exit
` + clientUsage

// topColumns are the table's columns; the sort keys name some of them.
var topColumns = []string{"KIND", "NAME", "TYPE", "STATE", "IN/s", "OUT/s", "FILL", "P50", "P99", "E2E P99", "ERRORS", "REASON"}

// topSorts maps a key to the column it sorts by ("" is the graph's order).
var topSorts = map[rune]string{'g': "", 'n': "NAME", 'i': "IN/s", 'o': "OUT/s", 'f': "FILL", 'l': "P99", 'e': "ERRORS"}

// topRow is one component as top shows it: its cells, and the numbers it
// sorts by.
type topRow struct {
	cells   []string
	keys    map[string]float64
	name    string
	order   int
	problem bool
}

func topRows(s status.Snapshot) []topRow {
	var rows []topRow
	for i, n := range s.Nodes {
		if n.Kind == "selector" {
			continue
		}
		r := topRow{name: n.Name, order: i, keys: map[string]float64{}, problem: n.Reason != ""}
		state := n.State
		if n.Kind == "group" {
			state = "-"
		}
		// A generator source (seq, stress) has no input: only OUT/s.
		in, out := "-", "-"
		if n.In != nil {
			in = fmtRate(*n.In)
			r.keys["IN/s"] = *n.In
		}
		if n.Out != nil {
			out = fmtRate(*n.Out)
			r.keys["OUT/s"] = *n.Out
		}
		fill := "-"
		if f := n.Fill; f != nil {
			if f.Capacity > 0 {
				fill = fmt.Sprintf("%.1f%% (%d)", f.Percent, f.Events)
			} else {
				fill = strconv.FormatInt(f.Events, 10)
			}
			r.keys["FILL"] = f.Percent
		}
		p50, p99, e2e := "-", "-", "-"
		for j, l := range n.Latency {
			if l.Count == 0 {
				continue
			}
			switch {
			case l.Stage == "end_to_end":
				e2e = fmtDur(l.P99)
			case j == 0:
				p50, p99 = fmtDur(l.P50), fmtDur(l.P99)
				r.keys["P99"] = float64(l.P99)
			}
		}
		errs := strconv.FormatInt(n.Errors, 10)
		if n.ErrorRate > 0 {
			errs += " (+" + fmtRate(n.ErrorRate) + "/s)"
		}
		r.keys["ERRORS"] = float64(n.Errors)
		// What is wrong, then what a busy component does (a drain, with
		// the events left).
		reason := n.Reason
		if n.Note != "" && reason != "" {
			reason += "; "
		}
		reason = strings.ReplaceAll(reason+n.Note, "\n", " ")
		r.cells = []string{n.Kind, n.Name, n.Type, state, in, out, fill, p50, p99, e2e, errs, reason}
		rows = append(rows, r)
	}
	return rows
}

func sortRows(rows []topRow, by string, reverse bool) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		var less bool
		switch by {
		case "":
			less = a.order < b.order
		case "NAME":
			less = a.name < b.name || (a.name == b.name && a.order < b.order)
		default:
			// Numbers sort largest first, what a person looks for; ties
			// keep the graph's order.
			less = a.keys[by] > b.keys[by] || (a.keys[by] == b.keys[by] && a.order < b.order)
		}
		if reverse {
			return !less
		}
		return less
	})
}

func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case v >= 100 || math.Abs(v-math.Round(v)) < 0.05:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

func fmtDur(ns int64) string {
	if ns <= 0 {
		return "-"
	}
	d := time.Duration(ns)
	switch {
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

func topHeadline(s status.Snapshot) string {
	health := "healthy"
	if !s.Healthy {
		health = fmt.Sprintf("UNHEALTHY (%d problems)", len(s.Problems))
	}
	return fmt.Sprintf("agent %s: %s, %s · %s", s.Agent, s.State, health, time.UnixMilli(s.Time).Format("15:04:05"))
}

func topMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	interval := time.Second
	once := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "-h" || arg == "--help" || arg == "-help" {
			fmt.Fprint(stdout, topUsage)
			return 0
		}
		n, err := f.flag(args, i)
		if n == 0 && err == nil {
			name, val, hasVal := strings.Cut(arg, "=")
			switch name {
			case "--once", "-once":
				once, n = true, 1
			case "--interval", "-interval":
				if !hasVal {
					if i+1 >= len(args) {
						err = fmt.Errorf("%s needs a value", name)
						break
					}
					val, n = args[i+1], 2
				} else {
					n = 1
				}
				if s, perr := strconv.ParseFloat(val, 64); perr != nil || !(s >= 0.1 && s <= 3600) {
					err = fmt.Errorf("--interval %q: want seconds from 0.1 to 3600", val)
				} else {
					interval = time.Duration(s * float64(time.Second))
				}
			default:
				err = fmt.Errorf("unexpected argument %q", arg)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "sluice top: %v\n\n%s", err, topUsage)
			return exitUsage
		}
		i += n - 1
	}
	c, err := f.client()
	if err != nil {
		fmt.Fprintf(stderr, "sluice top: %v\n", err)
		return exitUsage
	}
	var snap status.Snapshot
	if err := c.getJSON(ctx, "api/status", &snap); err != nil {
		fmt.Fprintf(stderr, "sluice top: %v\n", err)
		return exitFailed
	}
	if once {
		printTop(stdout, snap)
		return exitOK
	}
	if err := runTop(ctx, c, snap, interval); err != nil {
		fmt.Fprintf(stderr, "sluice top: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// printTop prints the table once, as plain text.
func printTop(w io.Writer, s status.Snapshot) {
	fmt.Fprintln(w, topHeadline(s))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(topColumns, "\t"))
	for _, r := range topRows(s) {
		fmt.Fprintln(tw, strings.Join(r.cells, "\t"))
	}
	_ = tw.Flush()
	for _, p := range s.Problems {
		fmt.Fprintln(w, "problem: "+p)
	}
}

// runTop runs the live table until q, Esc, Ctrl-C or ctx ends.
func runTop(ctx context.Context, c *agentClient, first status.Snapshot, interval time.Duration) error {
	app := tview.NewApplication()
	head := tview.NewTextView().SetDynamicColors(true)
	table := tview.NewTable().SetFixed(1, 2).SetSelectable(true, false)
	foot := tview.NewTextView().SetDynamicColors(true)
	layout := tview.NewFlex().SetDirection(tview.FlexRow).
		AddItem(head, 1, 0, false).
		AddItem(table, 0, 1, true).
		AddItem(foot, 3, 0, false)

	var mu sync.Mutex // guards the fields below, shared with the poller
	snap, sortBy, reverse, lastErr := first, "", false, ""

	draw := func() { // on the UI goroutine
		mu.Lock()
		s, by, rev, errText := snap, sortBy, reverse, lastErr
		mu.Unlock()
		head.SetText(tview.Escape(topHeadline(s)))
		rows := topRows(s)
		sortRows(rows, by, rev)
		table.Clear()
		for col, name := range topColumns {
			label := name
			if name == by || (by == "" && name == "KIND") {
				label += map[bool]string{false: "▼", true: "▲"}[rev]
			}
			table.SetCell(0, col, tview.NewTableCell(label).SetSelectable(false).
				SetTextColor(tcell.ColorYellow).SetAttributes(tcell.AttrBold))
		}
		for i, r := range rows {
			for col, v := range r.cells {
				cell := tview.NewTableCell(tview.Escape(v))
				if col >= 4 && col <= 10 {
					cell.SetAlign(tview.AlignRight)
				}
				if col == len(r.cells)-1 {
					cell.SetExpansion(1).SetMaxWidth(80)
				}
				if r.problem {
					cell.SetTextColor(tcell.ColorRed)
				}
				table.SetCell(i+1, col, cell)
			}
		}
		var b strings.Builder
		for _, p := range s.Problems {
			b.WriteString("[red]" + tview.Escape(p) + "[-]\n")
		}
		if errText != "" {
			b.WriteString("[red]" + tview.Escape(errText) + "[-]\n")
		}
		b.WriteString("sort: g graph  n name  i in  o out  f fill  l latency  e errors  r reverse  q quit")
		foot.SetText(b.String())
	}
	table.SetInputCapture(func(ev *tcell.EventKey) *tcell.EventKey {
		if ev.Key() == tcell.KeyEscape || ev.Rune() == 'q' {
			app.Stop()
			return nil
		}
		if by, ok := topSorts[ev.Rune()]; ok {
			mu.Lock()
			sortBy = by
			mu.Unlock()
			draw()
			return nil
		}
		if ev.Rune() == 'r' {
			mu.Lock()
			reverse = !reverse
			mu.Unlock()
			draw()
			return nil
		}
		return ev
	})
	draw()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the poller: owned by runTop, ends with ctx
		defer panics.Guard("top: poller")
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				app.Stop()
				return
			case <-t.C:
			}
			var s status.Snapshot
			err := c.getJSON(ctx, "api/status", &s)
			mu.Lock()
			if err == nil {
				snap, lastErr = s, ""
			} else if ctx.Err() == nil {
				lastErr = err.Error() + " (retrying)"
			}
			mu.Unlock()
			app.QueueUpdateDraw(draw)
		}
	}()
	err := app.SetRoot(layout, true).Run()
	cancel()
	wg.Wait()
	return err
}
