package monitoring

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// configNodes lists the node IDs the page must draw for the agent of
// testdata/status.properties, read from the file itself: every source
// with its selector, channel, sink group and sink.
func configNodes(t *testing.T) []string {
	t.Helper()
	cfg, err := config.Load("testdata/status.properties", "a1",
		map[string]string{"webPort": "1", "apiPort": "2", "outDir": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range cfg.Sources {
		ids = append(ids, "source/"+s.Name, "selector/"+s.Name)
	}
	for _, c := range cfg.Channels {
		ids = append(ids, "channel/"+c.Name)
	}
	for _, g := range cfg.SinkGroups {
		ids = append(ids, "group/"+g.Name)
	}
	for _, k := range cfg.Sinks {
		ids = append(ids, "sink/"+k.Name)
	}
	slices.Sort(ids)
	return ids
}

// browser starts Debian's chromium headless with the flags this machine
// needs (no sandbox as root, no background connections to the closed
// network) and returns a chromedp context for one tab.
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := testutil.SystemTool(t, "chromium", "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return ctx
}

// pageNode is a node card as the page shows it.
type pageNode struct {
	ID  string `json:"id"`
	In  string `json:"in"`
	Out string `json:"out"`
}

const readNodes = `Array.from(document.querySelectorAll('#graph .node')).map(e => ({id: e.dataset.id, in: e.dataset.in, out: e.dataset.out}))`

func nodeRates(t *testing.T, ctx context.Context) map[string]pageNode {
	t.Helper()
	nodes, err := chromedp.Run(ctx, chromedp.Evaluate[[]pageNode](readNodes))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]pageNode{}
	for _, n := range nodes {
		m[n.ID] = n
	}
	return m
}

func positive(s string) bool { return s != "" && s != "0" && !strings.HasPrefix(s, "-") }

// TestStatusPageInBrowser loads the status page of the real agent under
// load in headless chromium: the rates move, the graph's nodes are the
// configuration's, a click shows a node's counters and latency chart, and
// the page fits a phone's width. It saves a screenshot
// (SLUICE_UPDATE_DOCS=1 writes docs/status-page.png, which the README shows).
func TestStatusPageInBrowser(t *testing.T) {
	ctx := browser(t, 1680, 900)
	a := startAgent(t, "--allow-tap")
	lctx, stopLoad := context.WithCancel(context.Background())
	done, sent := load(t, lctx, a, 3000)
	defer func() { stopLoad(); <-done }()

	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate("http://"+a.HTTP+"/")); err != nil {
		t.Fatal(err)
	}

	// The rates move: every node on the path web -> main -> out -> files
	// shows events flowing, and the numbers change from one poll to the
	// next.
	flowing := []string{"source/web", "channel/main", "group/out", "sink/files", "channel/audit", "sink/audit-null"}
	var first map[string]pageNode
	deadline := time.Now().Add(30 * time.Second)
	for {
		first = nodeRates(t, tctx)
		ok := true
		for _, id := range flowing {
			ok = ok && positive(first[id].In) && positive(first[id].Out)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rates never moved on the page (sent %d lines): %+v", sent(), first)
		}
		time.Sleep(250 * time.Millisecond)
	}
	changed := false
	for end := time.Now().Add(10 * time.Second); !changed && time.Now().Before(end); {
		time.Sleep(time.Second)
		now := nodeRates(t, tctx)
		for _, id := range flowing {
			if now[id].In != first[id].In && positive(now[id].In) {
				changed = true
			}
		}
	}
	if !changed {
		t.Fatalf("the rates on the page did not change in 10 s: %+v", first)
	}

	// The nodes are the configuration's, and every edge is drawn.
	var ids []string
	for id := range nodeRates(t, tctx) {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if want := configNodes(t); !slices.Equal(ids, want) {
		t.Fatalf("page nodes %v\nconfig has %v", ids, want)
	}
	paths, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll('#edges path').length`))
	if err != nil {
		t.Fatal(err)
	}
	if want := len(a.snapshot(t).Edges); paths != want {
		t.Errorf("page draws %d edges, the graph has %d", paths, want)
	}
	if hidden, _ := chromedp.Run(tctx, chromedp.Evaluate[bool](`document.getElementById('error').hidden`)); !hidden {
		t.Error("the page shows an error")
	}

	// A click on a node shows its counters and, once two history points
	// exist, its latency chart.
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(`.node[data-id="channel/main"]`))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#detail`))); err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(`#d-title`)))
	if err != nil || !strings.Contains(title, "channel main") {
		t.Fatalf("detail title %q, %v", title, err)
	}
	counters, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(`#d-counters`)))
	if err != nil || !strings.Contains(counters, "EventTakeSuccessCount") || !strings.Contains(counters, "ChannelCapacity") {
		t.Fatalf("detail counters %q, %v", counters, err)
	}
	for end := time.Now().Add(25 * time.Second); ; {
		n, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll('#d-latency svg polyline').length`))
		if err != nil {
			t.Fatal(err)
		}
		if n >= 2 { // P50 and P99 of the channel stage
			break
		}
		if time.Now().After(end) {
			t.Fatal("the latency chart did not appear within 25 s")
		}
		time.Sleep(500 * time.Millisecond)
	}
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveShot(t, "status-page.png", shot)

	// On a phone's width the columns stack and nothing overflows sideways.
	if err := chromedp.Do(tctx, chromedp.EmulateViewport(412, 900)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	width, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	if err != nil || width > 412 {
		t.Errorf("on a 412 px wide screen the page is %d px wide (%v)", width, err)
	}
	cols, err := chromedp.Run(tctx, chromedp.Evaluate[string](`getComputedStyle(document.getElementById('graph')).gridTemplateColumns`))
	if err != nil || strings.Contains(cols, " ") {
		t.Errorf("on a phone the graph has columns %q, want one (%v)", cols, err)
	}
	phone, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveShot(t, "status-page-phone.png", phone)
}

// saveShot writes a screenshot to docs/ with SLUICE_UPDATE_DOCS=1, else to
// the test's temporary directory (kept with SLUICE_SHOTS=DIR).
func saveShot(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := os.Getenv("SLUICE_SHOTS")
	if os.Getenv("SLUICE_UPDATE_DOCS") == "1" {
		dir = "../../../docs"
	}
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// edgeCrossing is an arrow of the page that passes through a box that is
// not one of its ends.
type edgeCrossing struct {
	From    string   `json:"from"`
	To      string   `json:"to"`
	Crosses []string `json:"crosses"`
}

// readCrossings samples every arrow of the page every 2 px and returns the
// node boxes (shrunk by 2 px, so an arrow's own ends, which touch their
// boxes' sides, do not count) each passes through, and the number of arrows.
const readCrossings = `(() => {
  const g = document.getElementById('graph').getBoundingClientRect();
  const boxes = Array.from(document.querySelectorAll('#graph .node')).map((e) => {
    const r = e.getBoundingClientRect();
    return { id: e.dataset.id, l: r.left - g.left + 2, t: r.top - g.top + 2, r: r.right - g.left - 2, b: r.bottom - g.top - 2 };
  });
  const out = [];
  for (const p of document.querySelectorAll('#edges path')) {
    const hits = new Set();
    const len = p.getTotalLength();
    for (let s = 0; s <= len; s += 2) {
      const pt = p.getPointAtLength(s);
      for (const b of boxes) if (pt.x > b.l && pt.x < b.r && pt.y > b.t && pt.y < b.b) hits.add(b.id);
    }
    out.push({ from: p.dataset.from || "", to: p.dataset.to || "", crosses: [...hits] });
  }
  return out;
})()`

// TestStatusPageGroupLayout draws a failover group beside sinks in no
// group in headless chromium and reads the geometry back from the DOM: no
// arrow passes through a box it does not end at (an arrow from a channel to
// a sink in no group through a group's box reads channel -> group -> sink),
// on a desktop's width and on a phone's, where only group boxes are checked
// (wrapped rows of sinks are crossed by design there). The stress source
// shows what it generates and no input rate. The screenshots are kept in
// the system's temporary directory (or $SLUICE_SHOTS) for a person to look
// at.
func TestStatusPageGroupLayout(t *testing.T) {
	ctx := browser(t, 1680, 900)
	a := startAgentFile(t, "testdata/groups.properties")
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate("http://"+a.HTTP+"/")); err != nil {
		t.Fatal(err)
	}
	// Wait for the rates (the second sample) and the arrows.
	var gen pageNode
	for deadline := time.Now().Add(30 * time.Second); ; {
		gen = nodeRates(t, tctx)["source/gen"]
		if positive(gen.Out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stress source's rate never showed: %+v", gen)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // a poll or two more: the layout has settled

	shot := func(name string) {
		png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		dir := os.Getenv("SLUICE_SHOTS")
		if dir == "" {
			dir = os.TempDir()
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	check := func(layout string, only func(id string) bool) {
		t.Helper()
		edges, err := chromedp.Run(tctx, chromedp.Evaluate[[]edgeCrossing](readCrossings))
		if err != nil {
			t.Fatal(err)
		}
		if want := len(a.snapshot(t).Edges); len(edges) != want {
			t.Errorf("%s: the page draws %d arrows, the graph has %d", layout, len(edges), want)
		}
		for _, e := range edges {
			for _, id := range e.Crosses {
				if only(id) {
					t.Errorf("%s: the arrow %s -> %s crosses the box of %s", layout, e.From, e.To, id)
				}
			}
		}
	}
	shot("sluice-status-groups.png")
	check("desktop", func(string) bool { return true })

	// The stress source generates: it shows that rate, and no "in".
	text, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(`.node[data-id="source/gen"] .rates`)))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := strconv.ParseFloat(gen.Out, 64)
	t.Logf("stress source: %q (out %.1f/s)", text, out)
	if gen.In != "" || strings.Contains(text, "in ") || !strings.HasPrefix(text, "generates ") {
		t.Errorf("stress source shows %q (in %q): want what it generates and no input rate", text, gen.In)
	}
	if out < 100 || out > 1000 {
		t.Errorf("stress source generates %.1f events/s, configured for 500", out)
	}

	if err := chromedp.Do(tctx, chromedp.EmulateViewport(412, 900)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	shot("sluice-status-groups-phone.png")
	check("phone", func(id string) bool { return strings.HasPrefix(id, "group/") })
}
