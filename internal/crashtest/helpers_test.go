package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// agentProc is one run of the agent binary, with its JSON log.
type agentProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{}
	err  error
}

// startAgent runs `sluice agent -f conf -n a1 --log-format json` plus args.
// Its log is shown when the test fails, or always with SLUICE_TEST_LOG set.
func startAgent(t *testing.T, conf string, args ...string) *agentProc {
	t.Helper()
	return startAgentBin(t, testutil.AgentBinary(t), conf, args...)
}

// startAgentBin is startAgent with the binary bin.
func startAgentBin(t *testing.T, bin, conf string, args ...string) *agentProc {
	t.Helper()
	return runAgent(t, agentCmd(bin, conf, args...))
}

// agentCmd is the command startAgentBin runs.
func agentCmd(bin, conf string, args ...string) *exec.Cmd {
	return exec.Command(bin, append([]string{"agent", "-f", conf, "-n", "a1", "--log-format", "json", "--no-reload-conf"}, args...)...)
}

// runAgent starts cmd (from agentCmd, its directory or environment set as
// a test needs) with its output in the agentProc's log.
func runAgent(t *testing.T, cmd *exec.Cmd) *agentProc {
	t.Helper()
	p := &agentProc{t: t, log: &logBuffer{}, done: make(chan struct{}), cmd: cmd}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() || os.Getenv("SLUICE_TEST_LOG") != "" {
			t.Logf("agent log:\n%s", p.log.tail(12000))
		}
	})
	return p
}

func (p *agentProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// exit waits up to d for the process to end and returns its exit code.
func (p *agentProc) exit(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("the agent did not exit within %v", d)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatal(p.err)
	}
	return 0
}

// waitLog waits up to d for a log record with message msg and returns it.
func (p *agentProc) waitLog(msg string, d time.Duration) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if recs := p.log.records(msg); len(recs) > 0 {
			return recs[0]
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no log record %q within %v", msg, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logBuffer collects the agent's output; safe for concurrent use.
type logBuffer struct{ testutil.LogBuffer }

func (l *logBuffer) tail(n int) string {
	s := l.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// records returns the JSON log records whose msg is msg (every record
// when msg is "").
func (l *logBuffer) records(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if msg == "" || rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// avroSender sends numbered events in appendBatch calls on conns
// connections, reconnecting whenever a connection breaks, until stopped. It
// records every event answered OK, and how the calls sent after a cutoff
// were answered: after a stop was asked, no call may be answered OK.
type avroSender struct {
	addr  string
	batch int
	pause time.Duration // between calls on one connection

	next   atomic.Uint64
	cutoff atomic.Int64 // Unix nanos; 0: none yet

	// Calls sent after the cutoff, by answer; refusedAfter counts FAILED,
	// broken connections and refused dials.
	okAfter, refusedAfter atomic.Int64
	failed                atomic.Int64 // FAILED answers
	calls                 atomic.Int64

	mu    sync.Mutex
	acked []uint64

	quit chan struct{}
	wg   sync.WaitGroup
}

func newAvroSender(addr string, conns, batch int, pause time.Duration) *avroSender {
	s := &avroSender{addr: addr, batch: batch, pause: pause, quit: make(chan struct{})}
	for range conns {
		s.wg.Add(1)
		go s.run()
	}
	return s
}

func (s *avroSender) setCutoff(t time.Time) { s.cutoff.Store(t.UnixNano()) }

func (s *avroSender) stopping() bool {
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
}

// stop ends the sender and returns the acknowledged sequence numbers.
func (s *avroSender) stop() []uint64 {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.acked...)
}

func (s *avroSender) ackedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

func (s *avroSender) run() {
	defer s.wg.Done()
	var buf []byte
	events := make([]event.Event, s.batch)
	for !s.stopping() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := avrorpc.Dial(ctx, s.addr, avrorpc.ClientConfig{ConnectTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second})
		cancel()
		if err != nil {
			if cut := s.cutoff.Load(); cut != 0 && time.Now().UnixNano() > cut {
				s.refusedAfter.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for !s.stopping() {
			first := s.next.Add(uint64(s.batch)) - uint64(s.batch)
			sent := time.Now()
			buf = buf[:0]
			for i := range events {
				start := len(buf)
				buf = bench.AppendLine(buf, first+uint64(i), sent, lineSize)
				events[i].Body = buf[start : len(buf)-1 : len(buf)-1]
			}
			off := 0 // buf may have moved while it grew
			for i := range events {
				n := len(events[i].Body)
				events[i].Body = buf[off : off+n : off+n]
				off += n + 1
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			st, err := c.AppendBatch(ctx, events)
			cancel()
			s.calls.Add(1)
			cut := s.cutoff.Load()
			after := cut != 0 && sent.UnixNano() > cut
			if err == nil && st == avrorpc.OK {
				s.mu.Lock()
				for i := range s.batch {
					s.acked = append(s.acked, first+uint64(i))
				}
				s.mu.Unlock()
				if after {
					s.okAfter.Add(1)
				}
			} else if after {
				s.refusedAfter.Add(1)
			}
			if err != nil {
				break
			}
			if st != avrorpc.OK {
				s.failed.Add(1)
			}
			if s.pause > 0 {
				time.Sleep(s.pause)
			}
		}
		c.Close()
	}
}

// healthz returns /healthz's status code and body.
func healthz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitUntil polls cond every 20 ms until it holds, or fails after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// num reads a JSON log attribute as an int (-1 when absent).
func num(rec map[string]any, key string) int {
	if f, ok := rec[key].(float64); ok {
		return int(f)
	}
	return -1
}

// sendOK dials addr and sends one event with appendBatch; it reports the answer.
func sendOne(addr string, seq uint64) (avrorpc.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := avrorpc.Dial(ctx, addr, avrorpc.ClientConfig{ConnectTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second})
	if err != nil {
		return avrorpc.Unknown, err
	}
	defer c.Close()
	line := bench.AppendLine(nil, seq, time.Now(), 100)
	return c.AppendBatch(ctx, []event.Event{{Body: line[:len(line)-1]}})
}

var _ = net.Dial
