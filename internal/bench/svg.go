package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The chart: two panels in one SVG file. The upper plots latency over the
// run (per time slice: P50 dashed, P99 solid, max dotted), the lower the
// latency distribution (latency at each percentile, on a scale that gives
// each "nine" the same width, so the tail is as visible as the median).
// Latency is on a log scale in both. Each measured row has its colour;
// anchors are drawn as marks on the distribution.

const (
	svgW      = 960
	panelH    = 330
	marginL   = 70
	marginR   = 200
	marginTop = 40
	plotH     = panelH - marginTop - 40
	plotW     = svgW - marginL - marginR
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// WriteSVG draws the outcome's latency over time and its latency
// distribution.
func (o *Outcome) WriteSVG(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgW, 2*panelH, svgW, 2*panelH)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	title := o.Title
	if o.Preset != "" {
		title = o.Preset + ": " + title
	}

	// Latency range over everything drawn, in ms.
	lo, hi := math.Inf(1), 0.0
	see := func(v float64) {
		if v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	type prepared struct {
		r      *Result
		sorted []int64
		slices []slice
	}
	var runs []prepared
	for _, r := range o.Runs {
		if len(r.series) == 0 {
			continue
		}
		p := prepared{r: r, slices: timeSlices(r.series, r.start, 200)}
		p.sorted = make([]int64, len(r.series))
		for i, s := range r.series {
			p.sorted[i] = s.lat
		}
		slices.Sort(p.sorted)
		see(float64(p.sorted[0]) / 1e6)
		see(float64(p.sorted[len(p.sorted)-1]) / 1e6)
		runs = append(runs, p)
	}
	for _, a := range o.Anchors {
		for _, d := range []time.Duration{a.P50, a.P99, a.Max} {
			see(ms(d))
		}
	}
	if len(runs) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s: no event was delivered</text></svg>`+"\n", marginL, marginTop, html.EscapeString(title))
		_, err := io.WriteString(w, b.String())
		return err
	}
	decLo, decHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if decHi <= decLo {
		decHi = decLo + 1
	}
	yOf := func(top int, v float64) float64 {
		if v <= 0 {
			v = lo
		}
		f := (math.Log10(v) - decLo) / (decHi - decLo)
		return float64(top+plotH) - f*plotH
	}
	yAxis := func(top int) {
		for d := decLo; d <= decHi; d++ {
			y := yOf(top, math.Pow(10, d))
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, y, marginL+plotW, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dy="4">%s</text>`+"\n", marginL-6, y, strconv.FormatFloat(math.Pow(10, d), 'g', -1, 64))
		}
		fmt.Fprintf(&b, `<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">latency (ms, log)</text>`+"\n", top+plotH/2)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", marginL, top, plotW, plotH)
	}
	polyline := func(pts []string, color, dash string, width float64) {
		if len(pts) == 0 {
			return
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-dasharray="%s" points="%s"/>`+"\n",
			color, width, dash, strings.Join(pts, " "))
	}

	// Panel 1: latency over time.
	top := marginTop
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="%d">latency over time (per slice: P50 dashed, P99 solid, max dotted)</text>`+"\n", marginL, top-6)
	yAxis(top)
	var span float64
	for _, p := range runs {
		last := p.slices[len(p.slices)-1]
		span = max(span, last.end)
	}
	if span <= 0 {
		span = 1
	}
	xOfT := func(t float64) float64 { return marginL + t/span*plotW }
	for i := 0; i <= 5; i++ {
		t := span * float64(i) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xOfT(t), top+plotH+16, strconv.FormatFloat(t, 'f', 1, 64))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">seconds since the first send</text>`+"\n", marginL+plotW/2, top+plotH+32)
	for i, p := range runs {
		c := palette[i%len(palette)]
		var p50, p99, mx []string
		for _, s := range p.slices {
			x := xOfT((s.start + s.end) / 2)
			p50 = append(p50, fmt.Sprintf("%.1f,%.1f", x, yOf(top, s.p50)))
			p99 = append(p99, fmt.Sprintf("%.1f,%.1f", x, yOf(top, s.p99)))
			mx = append(mx, fmt.Sprintf("%.1f,%.1f", x, yOf(top, s.max)))
		}
		polyline(p50, c, "5,3", 1)
		polyline(p99, c, "", 1.6)
		polyline(mx, c, "1,2", 1)
	}

	// Panel 2: distribution.
	top = panelH + marginTop
	fmt.Fprintf(&b, `<text x="%d" y="%d">latency distribution (latency at each percentile)</text>`+"\n", marginL, top-6)
	yAxis(top)
	maxNines := 1.0
	for _, p := range runs {
		maxNines = max(maxNines, math.Log10(float64(len(p.sorted))))
	}
	maxNines = math.Min(math.Ceil(maxNines), 6)
	xOfN := func(n float64) float64 { return marginL + n/maxNines*plotW }
	nineX := func(q float64) float64 { return math.Min(-math.Log10(1-q), maxNines) }
	for n := 0.0; n <= maxNines; n++ {
		q := 100 * (1 - math.Pow(10, -n))
		x := xOfN(n)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, top, x, top+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">P%s</text>`+"\n", x, top+plotH+16, strconv.FormatFloat(q, 'f', -1, 64))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">percentile (each nine the same width)</text>`+"\n", marginL+plotW/2, top+plotH+32)
	for i, p := range runs {
		c := palette[i%len(palette)]
		var pts []string
		n := len(p.sorted)
		for x := 0.0; x <= maxNines+1e-9; x += maxNines / 400 {
			q := 1 - math.Pow(10, -x)
			rank := int(math.Ceil(q*float64(n) - 1e-9))
			v := float64(p.sorted[min(n-1, max(0, rank-1))]) / 1e6
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOfN(x), yOf(top, v)))
		}
		polyline(pts, c, "", 1.6)
	}
	for i, a := range o.Anchors {
		c := palette[(len(runs)+i)%len(palette)]
		for _, m := range []struct {
			q float64
			d time.Duration
		}{{0.5, a.P50}, {0.99, a.P99}, {1, a.Max}} {
			if m.d == 0 {
				continue
			}
			x, y := xOfN(nineX(m.q)), yOf(top, ms(m.d))
			fmt.Fprintf(&b, `<path d="M%.1f,%.1f l5,5 l-5,5 l-5,-5 z" fill="%s"/>`+"\n", x, y-5, c)
		}
		if a.Mean > 0 {
			y := yOf(top, ms(a.Mean))
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="2,4"/>`+"\n", marginL, y, marginL+plotW, y, c)
		}
	}

	// Legend.
	ly := marginTop + 10
	for i, p := range runs {
		c := palette[i%len(palette)]
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", svgW-marginR+12, ly, svgW-marginR+36, ly, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dy="4">%s</text>`+"\n", svgW-marginR+42, ly, html.EscapeString(p.r.Label))
		ly += 18
	}
	for i, a := range o.Anchors {
		c := palette[(len(runs)+i)%len(palette)]
		fmt.Fprintf(&b, `<path d="M%d,%d l5,5 l-5,5 l-5,-5 z" fill="%s"/>`+"\n", svgW-marginR+24, ly-5, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dy="4">%s</text>`+"\n", svgW-marginR+42, ly, html.EscapeString(a.Label))
		ly += 18
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// slice is the latency of the events that arrived in one slice of the run,
// in ms; start and end are seconds since the run's start.
type slice struct {
	start, end    float64
	p50, p99, max float64
}

// timeSlices cuts samples (in arrival order) into at most n slices of equal
// time and summarises each.
func timeSlices(samples []sample, start time.Time, n int) []slice {
	if len(samples) == 0 {
		return nil
	}
	t0 := start.UnixNano()
	if t0 == 0 || t0 > samples[0].at {
		t0 = samples[0].at
	}
	span := samples[len(samples)-1].at - t0
	n = max(1, min(n, len(samples)/5))
	width := max(span/int64(n), 1)
	var out []slice
	var lat []int64
	flush := func(k int64) {
		if len(lat) == 0 {
			return
		}
		slices.Sort(lat)
		q := func(p float64) float64 {
			rank := int(math.Ceil(p*float64(len(lat)) - 1e-9))
			return float64(lat[min(len(lat)-1, max(0, rank-1))]) / 1e6
		}
		out = append(out, slice{
			start: float64(k*width) / 1e9, end: float64((k+1)*width) / 1e9,
			p50: q(0.5), p99: q(0.99), max: float64(lat[len(lat)-1]) / 1e6,
		})
		lat = lat[:0]
	}
	cur := int64(0)
	for _, s := range samples {
		k := min((s.at-t0)/width, int64(n-1))
		if k != cur {
			flush(cur)
			cur = k
		}
		lat = append(lat, s.lat)
	}
	flush(cur)
	return out
}
