package crash

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
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

	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/testutil"
)

// plan is one run of the crash test.
type plan struct {
	kills     int           // SIGKILLs, each followed by a restart on the same dirs
	maxUptime time.Duration // a kill comes at a random moment up to this long after the agent accepts
	conns     int           // sender connections
	rate      int           // events per second per connection
	sinkBatch int           // the tcp sink's batchSize: what one kill can duplicate
	drain     float64       // the receiver reads this fraction of the send rate while the kills go on
}

// TestCrashKill9 runs the real agent (cmd/sluice, built here) with a file
// channel on two data dirs between a netcat source and a tcp sink, under
// steady load, and kills it with SIGKILL at random moments, restarting it
// each time on the same dirs. Every event the sender saw acknowledged (its
// "OK" arrived) must reach the receiver at least once, and the duplicates
// must stay within the sink batches in flight at the kills.
//
// The default run kills 3 times; the full run (20 kills) is
//
//	SLUICE_LONG=1 go test -run=CrashKill9 -v -count=1 ./internal/systemtest/crash/
//
// or scripts/crash-test.sh.
func TestCrashKill9(t *testing.T) {
	p := plan{kills: 3, maxUptime: 800 * time.Millisecond, conns: 2, rate: 4000, sinkBatch: 100, drain: 0.3}
	if os.Getenv("SLUICE_LONG") != "" {
		p.kills, p.maxUptime, p.conns, p.rate = 20, 1500*time.Millisecond, 4, 3000
	}
	p.kills = testutil.EnvInt("SLUICE_CRASH_KILLS", p.kills)
	runCrash(t, p)
}

func runCrash(t *testing.T, p plan) {
	base := t.TempDir()
	bin := testutil.AgentBinary(t)
	t0 := time.Now()

	// The receiver reads slower than the sender sends, so the channel holds
	// a backlog at every kill: that is what a kill must not lose.
	rcv, err := listen(int64(p.drain * float64(p.conns*p.rate)))
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.close()
	port := testutil.FreePort(t)
	conf := filepath.Join(base, "agent.properties")
	if err := os.WriteFile(conf, []byte(agentConfig(base, port, rcv.port(), p.sinkBatch)), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(base, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	showLog := func() {
		b, _ := os.ReadFile(logPath)
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("agent log (tail):\n%s", b)
	}

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	snd := newSender(addr, p.conns, p.rate)
	defer snd.stop(0)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	var acksAtKill []int64
	var rcvdAtKill []int
	var cmd *exec.Cmd
	for round := 0; round <= p.kills; round++ {
		fmt.Fprintf(logf, "==== start %d\n", round)
		rcv.run.Store(int32(round))
		cmd = exec.Command(bin, "agent", "-f", conf, "-n", "a1", "--no-reload-conf")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if round == p.kills {
			break
		}
		var wait time.Duration
		if round%5 == 4 {
			// Now and then, kill it while it starts: during replay.
			wait = time.Duration(rng.Int64N(int64(100 * time.Millisecond)))
		} else {
			if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
				showLog()
				t.Fatalf("start %d: %v", round, err)
			}
			wait = 100*time.Millisecond + time.Duration(rng.Int64N(int64(p.maxUptime-100*time.Millisecond)))
		}
		time.Sleep(wait)
		acksAtKill = append(acksAtKill, snd.acked.Load())
		rcvdAtKill = append(rcvdAtKill, rcv.count())
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
	}
	defer cmd.Process.Kill()
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		showLog()
		t.Fatalf("last start: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // some load on the last run too
	t.Logf("kills done: %v", time.Since(t0).Round(time.Millisecond))
	acked := snd.stop(10 * time.Second)
	t.Logf("sender stopped: %v", time.Since(t0).Round(time.Millisecond))
	backlog := len(acked) - rcv.count()
	rcv.limit.Store(0) // now drain at full speed

	// Every acknowledged event must arrive.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var missing []uint64
	for {
		missing = rcv.missing(acked)
		if len(missing) == 0 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("backlog delivered: %v", time.Since(t0).Round(time.Millisecond))
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("agent did not exit after SIGTERM")
		cmd.Process.Kill()
	}

	sent, failed := snd.sent.Load(), snd.failed.Load()
	dups, byRun := rcv.dups()
	var perRun []string
	for run := 1; run <= p.kills; run++ {
		perRun = append(perRun, strconv.Itoa(byRun[run]))
	}
	// A kill can leave one sink transaction taken, delivered and not
	// committed: its events come again after the restart.
	bound := p.kills * p.sinkBatch
	t.Logf("%d SIGKILLs; sent %d, acknowledged %d, refused %d, received %d distinct, %d duplicates (bound %d = %d kills x sink batch %d; delivered again by each restarted run: %s), %d acknowledged missing",
		p.kills, sent, len(acked), failed, rcv.count(), dups, bound, p.kills, p.sinkBatch, strings.Join(perRun, " "), len(missing))
	t.Logf("at each kill: acknowledged %v, received %v; backlog when the load stopped: %d events; duplicates by the run of the later copy %v, with both copies from one run %v",
		acksAtKill, rcvdAtKill, backlog, byRun, rcv.sameRunDups())
	if len(missing) > 0 {
		showLog()
		t.Fatalf("%d acknowledged events never arrived, e.g. %v", len(missing), missing[:min(10, len(missing))])
	}
	// Before the first kill nothing can be delivered twice: both copies
	// of a duplicate in run 0 would be a sink resending without a kill.
	if same := rcv.sameRunDups()[0]; dups > bound || same > 0 {
		showLog()
		t.Fatalf("%d duplicates (%d with both copies before any kill): more than the batches in flight (%d per kill)", dups, same, p.sinkBatch)
	}
	if len(acked) < 100*(p.kills+1) {
		showLog()
		t.Fatalf("only %d events acknowledged over %d runs: the load did not get through", len(acked), p.kills+1)
	}
}

func agentConfig(base string, port, sinkPort, sinkBatch int) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.max-line-length = 1024
a1.sources.r1.channels = c1
a1.channels.c1.type = file
a1.channels.c1.checkpointDir = %s
a1.channels.c1.dataDirs = %s,%s
a1.channels.c1.checkpointInterval = 700
a1.channels.c1.maxFileSize = 2097152
a1.channels.c1.minimumRequiredSpace = 0
a1.sinks.k1.type = tcp
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = %d
a1.sinks.k1.batchSize = %d
a1.sinks.k1.channel = c1
`, port, filepath.Join(base, "ck"), filepath.Join(base, "data1"), filepath.Join(base, "data2"), sinkPort, sinkBatch)
}

// sender keeps conns netcat connections busy with numbered lines
// (bench.AppendLine), each at rate lines per second, reconnecting after
// every kill. A line is acknowledged when its "OK" arrives (netcat answers
// in order, after the commit); lines in flight at a kill are not, and are
// not sent again.
type sender struct {
	addr   string
	next   atomic.Uint64
	sent   atomic.Int64
	acked  atomic.Int64
	failed atomic.Int64

	mu     sync.Mutex
	ackSet []uint64

	quit     chan struct{} // closed: send no more lines
	hardQuit chan struct{} // closed: drop the connections
	wg       sync.WaitGroup
}

const lineSize = 1000 // large enough that kernel socket buffers (4 MiB) hold few lines

func newSender(addr string, conns, rate int) *sender {
	s := &sender{addr: addr, quit: make(chan struct{}), hardQuit: make(chan struct{})}
	for range conns {
		s.wg.Add(1)
		go s.run(rate)
	}
	return s
}

// stop stops sending, waits up to grace for the answers to lines in
// flight, and returns every acknowledged sequence number.
func (s *sender) stop(grace time.Duration) []uint64 {
	select {
	case <-s.quit:
	default:
		close(s.quit)
		t := time.AfterFunc(grace, func() { close(s.hardQuit) })
		s.wg.Wait()
		t.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackSet
}

func (s *sender) stopping() bool {
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
}

func (s *sender) run(rate int) {
	defer s.wg.Done()
	for !s.stopping() {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		s.session(c, rate)
	}
}

// session sends on one connection until it breaks or the sender stops.
func (s *sender) session(c net.Conn, rate int) {
	defer c.Close()
	var mu sync.Mutex
	var inflight []uint64 // sent, not yet answered, in order
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer c.Close() // a broken read breaks the writes too
		br := bufio.NewReader(c)
		var acked []uint64
		defer func() {
			s.mu.Lock()
			s.ackSet = append(s.ackSet, acked...)
			s.mu.Unlock()
		}()
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			mu.Lock()
			if len(inflight) == 0 {
				mu.Unlock()
				return // an answer to nothing: give up on this connection
			}
			seq := inflight[0]
			inflight = inflight[1:]
			left := len(inflight)
			mu.Unlock()
			if bytes.Equal(line, []byte("OK\n")) {
				acked = append(acked, seq)
				s.acked.Add(1)
			} else {
				s.failed.Add(1)
			}
			if left == 0 && s.stopping() {
				return
			}
		}
	}()
	const tick = 10 * time.Millisecond
	perTick := max(1, rate/100)
	t := time.NewTicker(tick)
	defer t.Stop()
	var buf []byte
	for !s.stopping() {
		select {
		case <-t.C:
		case <-readerDone:
			return
		}
		mu.Lock()
		if len(inflight) > 50*perTick { // the agent is not keeping up: wait
			mu.Unlock()
			continue
		}
		buf = buf[:0]
		now := time.Now()
		for range perTick {
			seq := s.next.Add(1) - 1
			inflight = append(inflight, seq)
			buf = bench.AppendLine(buf, seq, now, lineSize)
		}
		mu.Unlock()
		s.sent.Add(int64(perTick))
		if _, err := c.Write(buf); err != nil {
			c.Close()
			<-readerDone
			return
		}
	}
	// Stopping: wait for the answers to what is in flight.
	mu.Lock()
	empty := len(inflight) == 0
	mu.Unlock()
	if empty {
		c.Close()
	}
	select {
	case <-readerDone:
	case <-s.hardQuit:
		c.Close()
		<-readerDone
	}
}

// receiver is the downstream peer of the tcp sink: it counts every
// numbered line it reads, by sequence number, reading at most limit lines
// per second (0: no limit) through a small socket buffer.
type receiver struct {
	ln    net.Listener
	limit atomic.Int64
	run   atomic.Int32 // the agent run that connections accepted now belong to
	mu    sync.Mutex
	n     map[uint64]int
	first map[uint64]int // the run whose connection brought an event first
	d     int
	byRun map[int]int // duplicates by the run whose connection brought them
	// sameRun counts duplicates whose copies both came on connections of
	// that run: not the work of a kill. A copy a killed run's kernel still
	// sent after the restart, read after the restarted run's own copy, is
	// a kill's work and counts in byRun of the killed run only.
	sameRun map[int]int
	wg      sync.WaitGroup

	pmu    sync.Mutex
	tokens float64
	last   time.Time
}

func listen(limit int64) (*receiver, error) { return listenOn("127.0.0.1:0", limit) }

// listenOn is listen on addr.
func listenOn(addr string, limit int64) (*receiver, error) {
	// A small receive buffer set on the listener, so it holds from the
	// handshake on: the backlog must sit in the channel, not in the kernel.
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &receiver{ln: ln, n: map[uint64]int{}, first: map[uint64]int{}, byRun: map[int]int{}, sameRun: map[int]int{}, last: time.Now()}
	r.limit.Store(limit)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			run := int(r.run.Load())
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer c.Close()
				br := bufio.NewReaderSize(c, 4<<10)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					r.pace()
					seq, _, err := bench.ParseLine(line)
					if err != nil {
						continue
					}
					r.mu.Lock()
					if r.n[seq]++; r.n[seq] > 1 {
						r.d++
						r.byRun[run]++
						if r.first[seq] == run {
							r.sameRun[run]++
						}
					} else {
						r.first[seq] = run
					}
					r.mu.Unlock()
				}
			}()
		}
	}()
	return r, nil
}

// pace waits as a token bucket of limit lines per second says.
func (r *receiver) pace() {
	lim := float64(r.limit.Load())
	if lim == 0 {
		return
	}
	r.pmu.Lock()
	defer r.pmu.Unlock()
	now := time.Now()
	r.tokens = min(r.tokens+now.Sub(r.last).Seconds()*lim, lim/50)
	r.last = now
	r.tokens--
	if r.tokens < 0 {
		time.Sleep(time.Duration(-r.tokens / lim * float64(time.Second)))
	}
}

func (r *receiver) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

func (r *receiver) close() {
	r.ln.Close()
	// Connections end when the agent closes them.
}

func (r *receiver) dups() (int, map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d, maps.Clone(r.byRun)
}

// sameRunDups is how many duplicates had both copies from one run, by run.
func (r *receiver) sameRunDups() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.sameRun)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.n)
}

func (r *receiver) missing(acked []uint64) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for _, s := range acked {
		if r.n[s] == 0 {
			out = append(out, s)
		}
	}
	return out
}
