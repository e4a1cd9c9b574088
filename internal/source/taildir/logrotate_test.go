package taildirsource_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// These tests run the real logrotate over a file written at a steady pace,
// with a whole agent (taildir -> memory -> file_roll) tailing it and being
// restarted in between, and check that every line written is delivered
// exactly once. SLUICE_LONG=1 makes each a longer soak.

type rotation struct {
	name    string
	pattern string // file-name regex of the file group
	conf    string // logrotate directives
	reopen  bool   // the writer reopens the file after a rotation (postrotate HUP)
	// whileDown also rotates while the agent is stopped. Not with
	// copytruncate or compress without delaycompress: the unread lines are
	// then only in the copy or the .gz, which no tailer reads (see
	// docs/components.md).
	whileDown bool
}

var rotations = []rotation{
	// Rotated files keep matching the pattern: they must not be read again.
	{"rename_create", `app\.log(\.[0-9]+)?`, "create\nnocompress", true, true},
	// The copies must not match (they are new files holding old lines).
	{"copytruncate", `app\.log`, "copytruncate\nnocompress", false, false},
	// The renamed file is compressed at the next rotation; its tail is read
	// after a restart by inode.
	{"rename_compress", `app\.log`, "create\ncompress\ndelaycompress", true, true},
	// The renamed file is compressed and deleted at once, maybe before its
	// tail was read: the tail is read through the open descriptor.
	{"rename_compress_nodelay", `app\.log`, "create\ncompress", true, false},
}

func TestLogrotateExactlyOnce(t *testing.T) {
	bin := testutil.SystemTool(t, "logrotate", "logrotate")
	long := os.Getenv("SLUICE_LONG") != ""
	for _, r := range rotations {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			rounds, pace := 2, 100*time.Millisecond
			if long {
				rounds, pace = 40, 400*time.Millisecond
			}
			runRotation(t, bin, r, rounds, pace)
		})
	}
}

func runRotation(t *testing.T, bin string, r rotation, rounds int, pace time.Duration) {
	base := t.TempDir()
	logs, out, state := filepath.Join(base, "logs"), filepath.Join(base, "out"), filepath.Join(base, "state")
	for _, d := range []string{logs, out, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logFile := filepath.Join(logs, "app.log")
	rotConf := filepath.Join(state, "logrotate.conf")
	testutil.WriteFile(t, rotConf, fmt.Sprintf("%s {\n  rotate 1000\n  missingok\n  %s\n}\n", logFile, strings.ReplaceAll(r.conf, "\n", "\n  ")))
	agentConf := filepath.Join(state, "agent.properties")
	testutil.WriteFile(t, agentConf, fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = taildir
a1.sources.r1.channels = c1
a1.sources.r1.filegroups = g1
a1.sources.r1.filegroups.g1 = %s/%s
a1.sources.r1.positionFile = %s/taildir_position.json
a1.sources.r1.idleTimeout = 2000
a1.sources.r1.pollInterval = 100
a1.channels.c1.type = memory
a1.channels.c1.capacity = 100000
a1.channels.c1.transactionCapacity = 1000
a1.sinks.k1.type = file_roll
a1.sinks.k1.channel = c1
a1.sinks.k1.sink.directory = %s
a1.sinks.k1.sink.rollInterval = 0
`, logs, r.pattern, state, out))

	w := startWriter(t, logFile)
	a := agenttest.Start(t, agent.Options{File: agentConf, Logger: testLogger()})
	rotations := 0
	rotate := func() {
		rotations++
		cmd := exec.Command(bin, "-s", filepath.Join(state, "logrotate.status"), "-f", rotConf)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("logrotate: %v\n%s", err, msg)
		}
		if r.reopen {
			// Lines keep going to the renamed file for a moment, as they do
			// until an application handles its postrotate signal.
			time.Sleep(pace / 10)
			w.reopen()
		}
	}
	for i := 0; i < rounds; i++ {
		time.Sleep(pace)
		rotate()
		if i%2 == 1 {
			// Restart the agent, with a rotation while it is down.
			if err := a.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(pace / 2)
			if r.whileDown {
				rotate()
			}
			a = agenttest.Start(t, agent.Options{File: agentConf, Logger: testLogger()})
		}
	}
	time.Sleep(pace)
	written := w.stop()

	onDisk := diskLines(t, logs)
	var got map[int]int
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = delivered(t, out)
		if covered(got, onDisk) && (r.name == "copytruncate" || len(got) >= written) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = delivered(t, out)

	var dups, lost, lostByLogrotate []int
	for seq, n := range got {
		if n > 1 {
			dups = append(dups, seq)
		}
		if seq < 0 || seq >= written {
			t.Errorf("delivered line %d was never written", seq)
		}
	}
	for seq := 0; seq < written; seq++ {
		if got[seq] > 0 {
			continue
		}
		if r.name == "copytruncate" && onDisk[seq] == 0 {
			// Written between logrotate's copy and its truncate: logrotate
			// dropped it before anyone could read it.
			lostByLogrotate = append(lostByLogrotate, seq)
			continue
		}
		lost = append(lost, seq)
	}
	t.Logf("%s: %d lines written, %d delivered, %d rotations, %d restarts; %d lines lost by logrotate's copytruncate window",
		r.name, written, len(got), rotations, rounds/2, len(lostByLogrotate))
	if len(dups) > 0 {
		t.Errorf("%d lines delivered more than once, such as %v", len(dups), head(dups))
	}
	if len(lost) > 0 {
		t.Errorf("%d lines never delivered: %s", len(lost), ranges(lost))
	}
}

func head(s []int) []int { return s[:min(len(s), 10)] }

func covered(got, want map[int]int) bool {
	for seq := range want {
		if got[seq] == 0 {
			return false
		}
	}
	return true
}

// writer appends numbered lines to a log file at a steady pace.
type writer struct {
	t       *testing.T
	path    string
	f       *os.File
	next    int
	reopenC chan struct{}
	quit    chan struct{}
	done    chan struct{}
}

func startWriter(t *testing.T, path string) *writer {
	w := &writer{t: t, path: path, reopenC: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	w.open()
	go w.run()
	return w
}

func (w *writer) open() {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		w.t.Error(err)
		return
	}
	w.f = f
}

func (w *writer) run() {
	defer close(w.done)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	pad := strings.Repeat("x", 100)
	var buf []byte
	for {
		select {
		case <-w.quit:
			return
		case <-w.reopenC:
			w.f.Close()
			w.open()
			w.reopenC <- struct{}{}
		case <-tick.C:
			buf = buf[:0]
			for i := 0; i < 5; i++ {
				buf = fmt.Appendf(buf, "seq=%d %s\n", w.next, pad)
				w.next++
			}
			if _, err := w.f.Write(buf); err != nil {
				w.t.Error(err)
				return
			}
		}
	}
}

// reopen makes the writer close its file and open the path again.
func (w *writer) reopen() {
	w.reopenC <- struct{}{}
	<-w.reopenC
}

// stop stops writing and returns how many lines were written.
func (w *writer) stop() int {
	close(w.quit)
	<-w.done
	w.f.Close()
	return w.next
}

// diskLines counts the numbered lines in every file of dir, gzipped or not.
func diskLines(t *testing.T, dir string) map[int]int {
	t.Helper()
	out := map[int]int{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		countLines(data, out)
	}
	return out
}

// delivered counts the numbered lines the file_roll sink wrote.
func delivered(t *testing.T, dir string) map[int]int {
	t.Helper()
	out := map[int]int{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		countLines(data, out)
	}
	return out
}

func countLines(data []byte, out map[int]int) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "seq=") {
			continue
		}
		// A line cut in two (copytruncate racing the writer) is not a number.
		if n, err := strconv.Atoi(strings.TrimPrefix(f[0], "seq=")); err == nil && len(f) == 2 && len(f[1]) == 100 {
			out[n]++
		}
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("SLUICE_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// ranges renders sorted numbers as "a-b c d-e".
func ranges(s []int) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		} else {
			fmt.Fprintf(&b, "%d", s[i])
		}
		i = j + 1
	}
	return b.String()
}
