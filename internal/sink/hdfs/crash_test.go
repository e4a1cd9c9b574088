package hdfssink

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// lineSender sends numbered lines ("event-N" padded to 1000 bytes) to a
// netcat source over one connection at a time, reconnecting after each
// kill. netcat answers "OK" per line, in order, after the channel commit:
// a line is acknowledged when its answer arrives.
type lineSender struct {
	addr  string
	next  atomic.Int64
	mu    sync.Mutex
	acked []int64
	quit  chan struct{}
	wg    sync.WaitGroup
}

func newLineSender(addr string, conns int) *lineSender {
	s := &lineSender{addr: addr, quit: make(chan struct{})}
	for range conns {
		s.wg.Add(1)
		go s.run()
	}
	return s
}

func (s *lineSender) stop() []int64 {
	close(s.quit)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

func (s *lineSender) run() {
	defer s.wg.Done()
	for {
		select {
		case <-s.quit:
			return
		default:
		}
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		s.session(c)
	}
}

func (s *lineSender) session(c net.Conn) {
	defer c.Close()
	inflight := make(chan int64, 256) // sent, unanswered, in order
	done := make(chan struct{})
	go func() {
		defer close(done)
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			n := <-inflight
			if strings.TrimSpace(line) == "OK" {
				s.mu.Lock()
				s.acked = append(s.acked, n)
				s.mu.Unlock()
			}
		}
	}()
	bw := bufio.NewWriter(c)
	pad := strings.Repeat("x", 980)
	start, sent := time.Now(), 0
	for {
		select {
		case <-s.quit:
			// Let the answers to what is in flight arrive.
			c.SetDeadline(time.Now().Add(5 * time.Second))
			_ = bw.Flush() // a failure shows as answers missing below
			for len(inflight) > 0 {
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			return
		case <-done:
			return
		default:
		}
		n := s.next.Add(1) - 1
		select {
		case inflight <- n:
		case <-done: // the connection broke (a kill): n was never sent
			return
		}
		fmt.Fprintf(bw, "event-%d %s\n", n, pad)
		if len(inflight) > 100 || rand.IntN(4) == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
		if len(inflight) > 200 {
			time.Sleep(time.Millisecond)
		}
		// At most senderRate lines a second per connection.
		if sent++; sent%50 == 0 {
			if ahead := time.Duration(sent)*time.Second/senderRate - time.Since(start); ahead > 0 {
				_ = bw.Flush() // a failure shows at the next write
				time.Sleep(ahead)
			}
		}
	}
}

// senderRate is the lines per second of each sender connection: 2 x 3000
// x 1 KB keeps the channel holding a backlog at each kill without making
// the drain at the end long.
const senderRate = 3000

// crashRun kills the agent kills times under load and checks what ended
// up in the store (read by finished, which must see no in-use files).
func crashRun(t *testing.T, kills int, sinkProps string, finished func() (bodies map[string]int, inUse []string)) {
	bin := testutil.AgentBinary(t)
	base := t.TempDir()
	port := testutil.FreePort(t)
	conf := fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.max-line-length = 2048
a1.sources.r1.channels = c1
a1.channels.c1.type = file
a1.channels.c1.checkpointDir = %s/ck
a1.channels.c1.dataDirs = %s/data
a1.channels.c1.minimumRequiredSpace = 0
a1.sinks.k1.type = hdfs
a1.sinks.k1.channel = c1
a1.sinks.k1.hdfs.stagingDir = %s/staging
a1.sinks.k1.hdfs.batchSize = 100
a1.sinks.k1.hdfs.fileType = DataStream
%s`, port, base, base, base, sinkProps)
	confPath := filepath.Join(base, "agent.properties")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, _ := os.Create(filepath.Join(base, "agent.log"))
	defer logf.Close()
	showLog := func() {
		b, _ := os.ReadFile(filepath.Join(base, "agent.log"))
		t.Logf("agent log (tail):\n%s", b[max(0, len(b)-6000):])
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	httpAddr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	metricsNow := func() string {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	snd := newLineSender(addr, 2)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var cmd *exec.Cmd
	for round := 0; round <= kills; round++ {
		fmt.Fprintf(logf, "==== start %d\n", round)
		cmd = exec.Command(bin, "agent", "-f", confPath, "-n", "a1", "--no-reload-conf", "--http", httpAddr)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if round == kills {
			break
		}
		if round%5 == 4 {
			time.Sleep(time.Duration(rng.Int64N(int64(150 * time.Millisecond)))) // during recovery
		} else {
			if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
				showLog()
				t.Fatalf("start %d: %v", round, err)
			}
			time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second))))
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		showLog()
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	acked := snd.stop()
	// Let the sink drain the channel (files roll every second or two, so
	// the finished ones fill up), then stop the agent: it closes and
	// finishes every file.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		bodies, _ := finished()
		if len(bodies) >= len(acked) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("metrics before SIGTERM: %s", metricsNow())
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			showLog()
			t.Fatalf("agent exit after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		showLog()
		t.Fatal("agent did not exit after SIGTERM")
	}
	bodies, inUse := finished()
	for _, sub := range []string{"open", "data"} {
		for _, n := range files(t, filepath.Join(base, "staging", sub)) {
			inUse = append(inUse, "staging/"+sub+"/"+n)
		}
	}
	if len(inUse) > 0 {
		showLog()
		t.Fatalf("left in use or staged: %v", inUse)
	}
	var missing []int64
	for _, n := range acked {
		if bodies["event-"+strconv.FormatInt(n, 10)] == 0 {
			missing = append(missing, n)
		}
	}
	dups := 0
	for _, c := range bodies {
		dups += c - 1
	}
	// A kill can repeat two sink batches: the one in flight, and the one
	// before it, whose take record the file channel syncs with the next
	// take's commit (internal/channel/file).
	bound := kills * 2 * 100
	t.Logf("%d SIGKILLs: %d acknowledged, %d distinct events stored, %d duplicates (bound %d), %d acknowledged missing",
		kills, len(acked), len(bodies), dups, bound, len(missing))
	if len(missing) > 0 {
		showLog()
		t.Fatalf("%d acknowledged events missing, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if dups > bound {
		showLog()
		t.Fatalf("%d duplicates, more than two sink batches per kill (%d)", dups, bound)
	}
	if len(acked) < 100*(kills+1) {
		t.Fatalf("only %d acknowledged: the load did not get through", len(acked))
	}
}

// countLines counts each event in DataStream text and reports partial
// lines as damage.
func countLines(t *testing.T, b []byte, into map[string]int) {
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		name, _, ok := bytes.Cut(l, []byte(" "))
		if !ok || len(l) != len(name)+1+980 {
			t.Fatalf("damaged line %.60q", l)
		}
		into[string(name)]++
	}
}

func crashKills() int {
	if os.Getenv("SLUICE_LONG") != "" {
		return 20
	}
	return 3
}

// TestCrashLocalFiles SIGKILLs the real agent (netcat -> file channel ->
// hdfs sink on local files) under load: every acknowledged event ends in
// exactly one finished file (duplicates within one sink batch per kill),
// no ".tmp" file is left. 3 kills by default, 20 with SLUICE_LONG=1:
//
//	SLUICE_LONG=1 go test -run 'TestCrash' -v -count=1 ./internal/sink/hdfs/
func TestCrashLocalFiles(t *testing.T) {
	out := t.TempDir()
	crashRun(t, crashKills(), fmt.Sprintf("a1.sinks.k1.hdfs.path = %s/%%{missing}logs\na1.sinks.k1.hdfs.rollCount = 700\na1.sinks.k1.hdfs.rollSize = 0\na1.sinks.k1.hdfs.rollInterval = 1\n", out),
		func() (map[string]int, []string) {
			bodies := map[string]int{}
			var inUse []string
			for _, n := range files(t, out) {
				if strings.HasSuffix(n, ".tmp") {
					inUse = append(inUse, n)
					continue
				}
				b, _ := os.ReadFile(filepath.Join(out, n))
				countLines(t, b, bodies)
			}
			return bodies, inUse
		})
}

// TestCrashS3 is the same against VersityGW, with files large enough that
// some go up as multipart uploads: afterwards no staging file and no
// multipart upload is left.
func TestCrashS3(t *testing.T) {
	v := startVersity(t)
	props := fmt.Sprintf(`a1.sinks.k1.hdfs.path = s3a://%s/crash
a1.sinks.k1.fs.s3a.endpoint = %s
a1.sinks.k1.fs.s3a.access.key = %s
a1.sinks.k1.fs.s3a.secret.key = %s
a1.sinks.k1.fs.s3a.path.style.access = true
a1.sinks.k1.fs.s3a.multipart.size = 5M
a1.sinks.k1.fs.s3a.multipart.threshold = 5M
a1.sinks.k1.hdfs.rollCount = 0
a1.sinks.k1.hdfs.rollSize = 6000000
a1.sinks.k1.hdfs.rollInterval = 2
`, s3Bucket, v.endpoint, s3Access, s3Secret)
	crashRun(t, crashKills(), props, func() (map[string]int, []string) {
		bodies := map[string]int{}
		for _, b := range v.objects("crash/") {
			countLines(t, b, bodies)
		}
		var left []string
		if u := v.uploads(); u > 0 {
			left = append(left, fmt.Sprintf("%d multipart uploads", u))
		}
		return bodies, left
	})
}
