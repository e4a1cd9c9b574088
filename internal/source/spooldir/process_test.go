package spooldirsource

// Tests of the spooldir source through the real agent binary (cmd/sluice,
// built here): SIGKILL in the middle of a file, and a file appended to while
// it is read followed by a clean restart. The agent runs spooldir -> file
// channel -> tcp sink -> a receiver in this test that counts every line it
// reads, so losses and duplicates are counted exactly.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// binary is the agent binary; the tests that run it skip with -short.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the agent binary")
	}
	return testutil.AgentBinary(t)
}

// receiver is the tcp sink's peer: it counts every line it reads. While
// paused it reads nothing, so the sink's writes, then the channel, then
// the source back up.
type receiver struct {
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	seen   map[string]int
	total  int
	paused bool
	wg     sync.WaitGroup
}

func newReceiver(t *testing.T, paused bool) *receiver {
	t.Helper()
	// A small receive buffer, so little sits in the kernel while paused.
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) // socket tuning, as in the other tests
		})
	}}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{ln: ln, seen: map[string]int{}, paused: paused}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			r.wg.Add(1)
			go r.read(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		r.paused = false
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *receiver) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

func (r *receiver) read(c net.Conn) {
	defer r.wg.Done()
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		for r.isPaused() {
			time.Sleep(5 * time.Millisecond)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		r.mu.Lock()
		r.seen[strings.TrimSuffix(line, "\n")]++
		r.total++
		r.mu.Unlock()
	}
}

func (r *receiver) isPaused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused
}

func (r *receiver) setPaused(p bool) {
	r.mu.Lock()
	r.paused = p
	r.mu.Unlock()
}

// counts returns how many distinct lines arrived and how many in all.
func (r *receiver) counts() (distinct, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen), r.total
}

func (r *receiver) count(line string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[line]
}

// startAgent runs the agent binary on conf with its output in log too,
// the log of all the test's runs.
func startAgent(t *testing.T, bin, conf string, log io.Writer, extra ...string) *testutil.AgentProcess {
	t.Helper()
	cmd := testutil.AgentCommand(bin, conf, extra...)
	cmd.Stdout = log
	return testutil.RunAgent(t, cmd)
}

// logFile is the agent's log, shared by its runs.
type logFile struct {
	t    *testing.T
	path string
	f    *os.File
}

func newLogFile(t *testing.T) *logFile {
	path := filepath.Join(t.TempDir(), "agent.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &logFile{t: t, path: path, f: f}
}

func (l *logFile) String() string {
	b, _ := os.ReadFile(l.path)
	return string(b)
}

func (l *logFile) show() {
	s := l.String()
	if len(s) > 12000 {
		s = s[len(s)-12000:]
	}
	l.t.Logf("agent log (tail):\n%s", s)
}

func processConfig(spool, base string, sinkPort, capacity int) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = spooldir
a1.sources.r1.spoolDir = %s
a1.sources.r1.pollDelay = 50
a1.sources.r1.batchSize = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = file
a1.channels.c1.checkpointDir = %s
a1.channels.c1.dataDirs = %s
a1.channels.c1.capacity = %d
a1.channels.c1.transactionCapacity = 100
a1.channels.c1.keep-alive = 1
a1.channels.c1.minimumRequiredSpace = 0
a1.sinks.k1.type = tcp
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = %d
a1.sinks.k1.batchSize = %d
a1.sinks.k1.channel = c1
`, spool, sourceBatch, filepath.Join(base, "ck"), filepath.Join(base, "data"), capacity, sinkPort, sinkBatch)
}

const (
	sourceBatch = 100 // what a kill can repeat on the source side
	sinkBatch   = 100 // what a kill can repeat on the sink side
)

// spoolFile writes lines into a file aside and moves it into dir (files
// must arrive complete), with the given modification time.
func spoolFile(t *testing.T, dir, name string, lines []string, mtime time.Time) string {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(dir), name+".tmp")
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestProcessKill9MidFile is issue 12's row "spooldir: SIGKILL mid-file (3
// times, 20 files of 20,000 lines)": every line arrives, and each kill
// repeats at most the batches in flight (one source batch committed to the
// channel but not yet recorded as progress, one sink batch written but not
// yet committed as taken), never the file in progress from its start.
// SLUICE_LONG=1 runs the row's full size; the default run has files of
// 5,000 lines.
func TestProcessKill9MidFile(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	const files, kills = 20, 3
	perFile := 5000
	if os.Getenv("SLUICE_LONG") != "" {
		perFile = 20000
	}
	base := t.TempDir()
	spool := filepath.Join(base, "spool")
	if err := os.Mkdir(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	for f := range files {
		lines := make([]string, perFile)
		for i := range lines {
			lines[i] = fmt.Sprintf("f%02d-%06d", f, i)
		}
		spoolFile(t, spool, fmt.Sprintf("f%02d.log", f), lines, t0.Add(time.Duration(f)*time.Second))
	}
	rcv := newReceiver(t, false)
	conf := filepath.Join(base, "agent.properties")
	// A small channel keeps the source close behind what the receiver got,
	// so a kill at half a file's worth of lines is a kill in mid-file.
	if err := os.WriteFile(conf, []byte(processConfig(spool, base, rcv.port(), 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	log := newLogFile(t)
	all := files * perFile
	for k := range kills {
		a := startAgent(t, bin, conf, log.f)
		at := (2*k+1)*all/(2*kills) + perFile/2 // the middle of a file
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d lines before kill %d", at, k+1), func() bool {
			d, _ := rcv.counts()
			return d >= at
		})
		a.Signal(syscall.SIGKILL)
		<-a.Done()
		prog, _ := os.ReadFile(filepath.Join(spool, ".flumespool", progressName))
		d, n := rcv.counts()
		t.Logf("kill %d at %d distinct lines (%d received); progress file: %s", k+1, d, n, prog)
		fmt.Fprintf(log.f, "==== killed (%d)\n", k+1)
	}
	a := startAgent(t, bin, conf, log.f)
	testutil.WaitFor(t, 60*time.Second, "every line", func() bool {
		d, _ := rcv.counts()
		return d >= all
	})
	testutil.WaitFor(t, 10*time.Second, "every file marked done", func() bool {
		m, _ := filepath.Glob(filepath.Join(spool, "*.COMPLETED"))
		return len(m) == files
	})
	a.Stop(30 * time.Second)
	time.Sleep(100 * time.Millisecond) // the receiver reads what is left on the connection
	d, n := rcv.counts()
	bound := kills * (sourceBatch + sinkBatch)
	t.Logf("%d files of %d lines, %d SIGKILLs: %d distinct lines, %d duplicates (bound %d)", files, perFile, kills, d, n-d, bound)
	if d != all {
		log.show()
		t.Fatalf("%d of %d lines arrived", d, all)
	}
	if n-d > bound {
		log.show()
		t.Fatalf("%d duplicates after %d kills: more than the %d batches in flight allow", n-d, kills, bound)
	}
}

// TestProcessAppendWhileReading is issue 12's row "spooldir: a line
// appended to a file while it is read, then a clean restart": the change is
// reported once (a WARN naming the file), what was committed stays
// committed, the file is left in place, and after a clean stop and start
// the source continues after the last committed line: no line twice, the
// appended line once, and then the file is done.
func TestProcessAppendWhileReading(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	const n = 100000
	base := t.TempDir()
	spool := filepath.Join(base, "spool")
	if err := os.Mkdir(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	lines := make([]string, n)
	pad := strings.Repeat("x", 90)
	for i := range lines {
		lines[i] = fmt.Sprintf("l%07d %s", i, pad)
	}
	path := spoolFile(t, spool, "big.log", lines, time.Now().Add(-time.Minute))
	rcv := newReceiver(t, true) // paused: the source blocks in the file
	conf := filepath.Join(base, "agent.properties")
	if err := os.WriteFile(conf, []byte(processConfig(spool, base, rcv.port(), 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	httpPort := testutil.FreePort(t)
	httpAddr := "127.0.0.1:" + strconv.Itoa(httpPort)
	log := newLogFile(t)
	a := startAgent(t, bin, conf, log.f, "--http", httpAddr)

	// Wait until the source is stuck behind the full channel.
	var accepted int64
	stable := 0
	testutil.WaitFor(t, 30*time.Second, "the source to block on the full channel", func() bool {
		got := sourceAccepted(httpAddr)
		if got > 0 && got == accepted {
			stable++
		} else {
			stable = 0
		}
		accepted = got
		time.Sleep(20 * time.Millisecond)
		return stable >= 15
	})
	if accepted >= n || !exists(path) {
		t.Fatalf("the source read the whole file (%d lines accepted) before the test could append to it", accepted)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("appended\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rcv.setPaused(false)

	warned := func() bool {
		return strings.Contains(log.String(), "big.log") && strings.Contains(log.String(), "changed")
	}
	testutil.WaitFor(t, 30*time.Second, "the change to be reported", warned)
	// Let the channel drain, then stop cleanly.
	testutil.WaitFor(t, 30*time.Second, "the committed lines to arrive", func() bool {
		d, _ := rcv.counts()
		return int64(d) >= sourceAccepted(httpAddr)
	})
	time.Sleep(200 * time.Millisecond)
	a.Stop(30 * time.Second)
	firstRun := log.String()
	committed, _ := rcv.counts()
	var reports []string
	for _, l := range strings.Split(firstRun, "\n") {
		if strings.Contains(l, "big.log") && strings.Contains(l, "changed") {
			reports = append(reports, l)
		}
	}
	if len(reports) != 1 || !strings.Contains(reports[0], "level=WARN") {
		t.Errorf("the change was reported %d times, want once at WARN naming the file: %q", len(reports), reports)
	}
	if !exists(path) || exists(path+".COMPLETED") {
		t.Fatal("the changed file was not left in place")
	}
	// The change is found where the file's first size ends: every line of
	// it was delivered, the appended one not yet.
	if committed != n || rcv.count("appended") != 0 {
		t.Fatalf("%d lines delivered before the restart (appended line %d times), want the %d lines the file had when reading began",
			committed, rcv.count("appended"), n)
	}

	fmt.Fprintln(log.f, "==== clean restart")
	a = startAgent(t, bin, conf, log.f, "--http", httpAddr)
	testutil.WaitFor(t, 30*time.Second, "the rest of the file and the file marked done", func() bool {
		d, _ := rcv.counts()
		return d >= n+1 && exists(path+".COMPLETED")
	})
	testutil.WaitFor(t, 10*time.Second, "the channel to drain", func() bool {
		return sourceAccepted(httpAddr) >= 0 && channelSize(httpAddr) == 0
	})
	a.Stop(30 * time.Second)
	time.Sleep(100 * time.Millisecond)
	d, total := rcv.counts()
	t.Logf("%d lines, %d delivered before the restart; after it: %d distinct, %d duplicates, appended line %d times",
		n, committed, d, total-d, rcv.count("appended"))
	if d != n+1 || rcv.count("appended") != 1 {
		log.show()
		t.Fatalf("%d distinct lines arrived, want %d (every line and the appended one)", d, n+1)
	}
	if total != d {
		log.show()
		t.Fatalf("%d duplicates after a clean restart, want 0", total-d)
	}
}

// metric reads one attribute of one component from the agent's /metrics,
// or -1 when it cannot.
func metric(addr, component, name string) int64 {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var m map[string]map[string]string
	if json.NewDecoder(resp.Body).Decode(&m) != nil {
		return -1
	}
	v, err := strconv.ParseInt(m[component][name], 10, 64)
	if err != nil {
		return -1
	}
	return v
}

func sourceAccepted(addr string) int64 { return metric(addr, "SOURCE.r1", "EventAcceptedCount") }
func channelSize(addr string) int64    { return metric(addr, "CHANNEL.c1", "ChannelSize") }
