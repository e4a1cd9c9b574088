package monitoring

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/status"
	"github.com/sluicehq/sluice/internal/testutil"
)

// tmux runs one tmux command on the test's own server (-L), so it never
// touches a person's sessions.
func tmux(t *testing.T, sock string, args ...string) string {
	t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// topRow finds the row of kind and name on a captured top screen and
// returns its IN/s and OUT/s cells.
func topRow(screen, kind, name string) (in, out string, ok bool) {
	re := regexp.MustCompile(`(?m)^\s*` + kind + `\s+` + regexp.QuoteMeta(name) + `\s+\S+\s+\S+\s+(\S+)\s+(\S+)`)
	m := re.FindStringSubmatch(screen)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

func rateValue(s string) float64 {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1
	}
	return v * mult
}

// TestTopInTerminal runs `sluice top` in a real terminal (tmux) against the
// agent under load: every component appears with moving rates, a key sorts
// the table, q quits.
func TestTopInTerminal(t *testing.T) {
	testutil.SystemTool(t, "tmux", "tmux")
	bin := testutil.AgentBinary(t)
	a := startAgent(t)
	lctx, stopLoad := context.WithCancel(context.Background())
	done, _ := load(t, lctx, a, 2000)
	defer func() { stopLoad(); <-done }()

	sock := fmt.Sprintf("sluice-top-%d", time.Now().UnixNano())
	tmux(t, sock, "new-session", "-d", "-s", "top", "-x", "180", "-y", "30",
		bin+" top --http "+a.HTTP+" --interval 0.5")
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", sock, "kill-server").Run() })

	capture := func() string { return tmux(t, sock, "capture-pane", "-p", "-t", "top") }
	rows := []struct{ kind, name string }{
		{"source", "web"}, {"source", "api"}, {"channel", "main"}, {"channel", "audit"},
		{"group", "out"}, {"sink", "files"}, {"sink", "spare"}, {"sink", "audit-null"},
	}
	moving := []struct{ kind, name string }{{"source", "web"}, {"channel", "main"}, {"sink", "files"}}
	var screen string
	var firstIn map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		screen = capture()
		ok := true
		firstIn = map[string]string{}
		for _, r := range rows {
			if _, _, found := topRow(screen, r.kind, r.name); !found {
				ok = false
			}
		}
		for _, r := range moving {
			in, out, _ := topRow(screen, r.kind, r.name)
			ok = ok && rateValue(in) > 0 && rateValue(out) > 0
			firstIn[r.name] = in
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top never showed every component with moving rates:\n%s", screen)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !strings.Contains(screen, "agent a1: running, healthy") {
		t.Errorf("top's headline does not say the agent is healthy:\n%s", screen)
	}
	changed := false
	for end := time.Now().Add(10 * time.Second); !changed && time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		s := capture()
		for _, r := range moving {
			if in, _, _ := topRow(s, r.kind, r.name); in != firstIn[r.name] && rateValue(in) > 0 {
				changed = true
			}
		}
	}
	if !changed {
		t.Fatalf("top's rates did not change in 10 s:\n%s", capture())
	}

	// n sorts by name: audit (channel) comes before web (source).
	tmux(t, sock, "send-keys", "-t", "top", "n")
	sorted := false
	for end := time.Now().Add(5 * time.Second); !sorted && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		s := capture()
		sorted = strings.Contains(s, "NAME▼") && strings.Index(s, "audit-null") < strings.Index(s, " web ")
	}
	if !sorted {
		t.Errorf("n did not sort by name:\n%s", capture())
	}
	tmux(t, sock, "send-keys", "-t", "top", "q")
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if exec.Command("tmux", "-L", sock, "has-session", "-t", "top").Run() != nil {
			break // top exited, and its session with it
		}
		if time.Now().After(end) {
			t.Fatalf("top did not quit on q:\n%s", capture())
		}
	}
}

// TestTapCommand: `sluice tap` prints the events sent, as text and as JSON
// lines, and stops at --limit; without --allow-tap it says why it cannot.
func TestTapCommand(t *testing.T) {
	bin := testutil.AgentBinary(t)
	a := startAgent(t, "--allow-tap")
	lctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()

	run := func(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.Command(bin, append([]string{"tap"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out, &errOut
	}
	jsonTap, jsonOut, jsonErr := run("web", "--http", a.HTTP, "--limit", "7", "--rate", "1000", "--format", "json")
	textTap, textOut, textErr := run("main", "--http", a.HTTP, "--limit", "4", "--rate", "1000")
	time.Sleep(500 * time.Millisecond) // both taps connected before the load starts
	done, _ := load(t, lctx, a, 2000)
	defer func() { stopLoad(); <-done }()

	wait := func(name string, cmd *exec.Cmd, stderr *bytes.Buffer) {
		ch := make(chan error, 1)
		go func() { ch <- cmd.Wait() }()
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, stderr)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s did not stop at its --limit within 20 s", name)
		}
	}
	wait("tap web --format json", jsonTap, jsonErr)
	wait("tap main", textTap, textErr)

	var events []status.TapLine
	sc := bufio.NewScanner(jsonOut)
	for sc.Scan() {
		var l status.TapLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("tap --format json printed %q: %v", sc.Bytes(), err)
		}
		events = append(events, l)
	}
	if len(events) != 7 {
		t.Fatalf("tap --limit 7 printed %d events:\n%s", len(events), jsonOut)
	}
	sentLine := regexp.MustCompile(`^line \d+$`)
	for _, e := range events {
		if e.Component != "web" || e.Kind != "source" || e.Body == nil || !sentLine.MatchString(*e.Body) ||
			e.Headers["timestamp"] == "" || e.Headers["host"] == "" {
			t.Errorf("tap web printed %+v: want a sent line with the interceptors' headers", e)
		}
	}
	lines := strings.Split(strings.TrimSpace(textOut.String()), "\n")
	textLine := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+ channel/main \{.*host=.*timestamp=\d+.*\} (line \d+|api \d+)$`)
	if len(lines) != 4 {
		t.Fatalf("tap main --limit 4 printed %d lines:\n%s", len(lines), textOut)
	}
	for _, l := range lines {
		if !textLine.MatchString(l) && !strings.Contains(l, "api ") {
			t.Errorf("tap main printed %q", l)
		}
	}

	// Tapping a sink says which channel to tap; an agent without
	// --allow-tap refuses, saying why.
	out, err := exec.Command(bin, "tap", "files", "--http", a.HTTP).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `tap its channel "main"`) {
		t.Errorf("tap of a sink: %v %s", err, out)
	}
	b := startAgent(t)
	out, err = exec.Command(bin, "tap", "web", "--http", b.HTTP, "--limit", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--allow-tap") {
		t.Errorf("tap of an agent without --allow-tap: %v %s", err, out)
	}
}
