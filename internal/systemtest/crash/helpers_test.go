package crash

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/bench"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// startAgent runs the agent binary on conf with a JSON log
// (testutil.StartAgent); its log is shown when the test fails, or always
// with SLUICE_TEST_LOG set.
func startAgent(t *testing.T, conf string, args ...string) *testutil.AgentProcess {
	t.Helper()
	return startAgentBin(t, testutil.AgentBinary(t), conf, args...)
}

// startAgentBin is startAgent with the binary bin.
func startAgentBin(t *testing.T, bin, conf string, args ...string) *testutil.AgentProcess {
	t.Helper()
	return testutil.StartAgent(t, bin, conf, append([]string{"--log-format", "json"}, args...)...)
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
