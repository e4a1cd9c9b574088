package topology

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/agenttest"
)

// Three agents on loopback, as a Flume tier: a sender (Flume's RPC client
// role) → edge agent (avro source → memory → avro sinks k1, k2 in a sink
// group) → collectors c1 and c2 (avro source → memory → tcp sink) → one
// counting receiver per collector.
//
// What "kill" means here. Collector c1 is stopped abruptly mid-stream: its
// listener closes and every connection is closed within a millisecond,
// whatever call is in progress, so the edge sees calls die without a reply
// and connections refused. What c1 had already acknowledged is in its
// memory channel; c1's sinks deliver it while it goes down. A real crash of
// a collector loses its memory channel's contents (in Flume and in sluice:
// that is the memory channel's contract, and the file channel is the cure);
// these cases are about the hop, whose promise is that an event the edge
// took from its channel is committed there only after a collector
// acknowledged it. So: every event the sender got OK for from the edge is
// delivered by c1 or c2. A batch c1 committed but whose OK died with the connection is
// sent again to c2, so duplicates are allowed, counted, and bounded by one
// edge batch (the group's runner has one batch in flight).
//
// c1 is then started again on its port and the edge must return to it.
//
// The "crash" case gives the collectors file channels and kills c1 without
// letting it deliver anything more: sources torn down mid-call, no drain,
// what c1 acknowledged left in its channel on disk. c1 restarted from the
// same directories replays it and delivers it, so the same invariant holds
// for a collector that dies with events in it.

const edgeBatch = 100

func TestKillCollectorMidStream(t *testing.T) {
	cases := []struct {
		name, processor string
		primaryOnly     bool // before the kill, only c1 receives
		crash           bool // file channels; the kill does not drain c1
	}{
		{"failover", "type = failover\npriority.k1 = 10\npriority.k2 = 5\nmaxpenalty = 1000\n", true, false},
		{"load_balance", "type = load_balance\nselector = round_robin\n", false, false},
		{"load_balance backoff", "type = load_balance\nselector = random\nbackoff = true\nselector.maxTimeOut = 1000\n", false, false},
		{"crash with file channels", "type = load_balance\nselector = round_robin\n", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case spends most of its time in agents' 1 s drains
			r1, r2 := newReceiver(t), newReceiver(t)
			r2.start(t)
			if !tc.crash {
				r1.start(t)
			} // else c1's downstream is down until after the crash, so all c1 acknowledged is in its channel then
			p1, p2, pe := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
			ch1, ch2 := memoryChannel, memoryChannel
			kill := agent.Options{StopTimeout: time.Millisecond} // stopping c1 is the kill
			if tc.crash {
				ch1, ch2 = fileChannel(t), fileChannel(t)
				kill.ShutdownTimeout = time.Nanosecond
			}
			c1File := writeConf(t, "c1", collectorConf("c1", p1, r1.port(), ch1))
			c1 := startAgent(t, c1File, "c1", kill)
			startAgent(t, writeConf(t, "c2", collectorConf("c2", p2, r2.port(), ch2)), "c2", agent.Options{})
			edge := startAgent(t, writeConf(t, "edge", edgeConf(pe, p1, p2, tc.processor)), "edge", agent.Options{})

			ctx, stopSending := context.WithCancel(context.Background())
			defer stopSending()
			snd := &sender{addr: fmt.Sprintf("127.0.0.1:%d", pe)}
			sent := make(chan error, 1)
			go func() { sent <- snd.run(ctx) }()

			// Both collectors (or, failover, the primary alone) receive.
			testutil.WaitFor(t, 10*time.Second, "c1 receives", func() bool { return drained(edge, "k1") >= 1000 })
			if tc.primaryOnly {
				if n := r2.distinct(); n != 0 {
					t.Fatalf("failover: the lower-priority collector received %d events while the primary was up", n)
				}
			} else {
				testutil.WaitFor(t, 10*time.Second, "c2 receives", func() bool { return r2.distinct() >= 1000 })
			}

			// Kill c1 mid-stream; the stream moves to c2.
			ackedAtKill := snd.acked.Load()
			if err := c1.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			r1AtKill, r2AtKill, k1AtKill := r1.distinct(), r2.distinct(), drained(edge, "k1")
			testutil.WaitFor(t, 10*time.Second, "c2 takes the stream", func() bool { return r2.distinct() >= r2AtKill+2000 })
			if snd.acked.Load() <= ackedAtKill {
				t.Fatal("the sender got no OK after the kill")
			}
			if tc.crash && r1AtKill != 0 {
				t.Fatalf("c1 delivered %d events with its downstream down", r1AtKill)
			}

			// c1 comes back on its port; the edge returns to it.
			if tc.crash {
				r1.start(t)
			}
			startAgent(t, c1File, "c1", agent.Options{})
			if tc.crash {
				// All c1 acknowledged before the crash was only in its
				// file channel; the restarted c1 replays and delivers it.
				testutil.WaitFor(t, 10*time.Second, "c1 delivers what it held at the crash", func() bool { return r1.distinct() >= k1AtKill })
			}
			testutil.WaitFor(t, 15*time.Second, "the edge reconnects to c1", func() bool { return drained(edge, "k1") >= k1AtKill+500 })

			stopSending()
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			acked := snd.acked.Load()
			k1 := sinkCounters(edge, "k1")
			if k1["EventWriteFail"] == "0" {
				t.Errorf("the edge's sink to c1 never failed (counters %v): the kill did not hit the stream", k1)
			}
			// Stopping the edge drains its channel into the collectors;
			// then the collectors drain into the receivers.
			if err := edge.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			var missing []uint64
			testutil.Eventually(func() bool {
				missing = missingFrom(acked, r1.snapshot(), r2.snapshot())
				return len(missing) == 0
			}, 10*time.Second)
			if len(missing) > 0 {
				t.Fatalf("%d of %d acknowledged events never arrived at a collector, first %v", len(missing), acked, missing[:min(10, len(missing))])
			}
			dups := r1.dups() + r2.dups() + overlap(r1.snapshot(), r2.snapshot())
			t.Logf("acknowledged %d (%d at the kill); c1 acknowledged %d to the edge before the kill and delivered %d by then, %d in all; c2 delivered %d; duplicates %d; edge k1 counters %v",
				acked, ackedAtKill, k1AtKill, r1AtKill, r1.distinct(), r2.distinct(), dups, k1)
			if dups > edgeBatch {
				t.Errorf("%d duplicates; at most one edge batch (%d) can be in flight at the kill", dups, edgeBatch)
			}
			if r1.bad()+r2.bad() > 0 {
				t.Errorf("malformed lines: %d", r1.bad()+r2.bad())
			}
		})
	}
}

const memoryChannel = "type = memory\ncapacity = 100000\ntransactionCapacity = 1000\n"

// fileChannel is a file channel's properties, in a directory of its own
// that outlives the agent (a restart finds what it held). The directory is
// in memory: these cases are about the hop, and a kill keeps what the page
// cache holds; on a CI disk whose fsyncs took seconds, the collectors'
// commits outlasted the edge's request timeout and the test timed out.
func fileChannel(t *testing.T) string {
	dir := testutil.MemoryDir(t)
	return fmt.Sprintf("type = file\ncheckpointDir = %s\ndataDirs = %s\ncapacity = 100000\ntransactionCapacity = 1000\nminimumRequiredSpace = 1048576\n",
		filepath.Join(dir, "checkpoint"), filepath.Join(dir, "data"))
}

func collectorConf(name string, port, recvPort int, channel string) string {
	return fmt.Sprintf(`%[1]s.sources = r1
%[1]s.channels = ch
%[1]s.sinks = out
%[1]s.sources.r1.type = avro
%[1]s.sources.r1.bind = 127.0.0.1
%[1]s.sources.r1.port = %[2]d
%[1]s.sources.r1.channels = ch
%[1]s.sinks.out.type = tcp
%[1]s.sinks.out.hostname = 127.0.0.1
%[1]s.sinks.out.port = %[3]d
%[1]s.sinks.out.channel = ch
`, name, port, recvPort) + prefixed(name+".channels.ch.", channel)
}

func prefixed(prefix, props string) string {
	out := ""
	for _, line := range bytes.Split([]byte(props), []byte("\n")) {
		if len(line) > 0 {
			out += prefix + string(line) + "\n"
		}
	}
	return out
}

func edgeConf(port, p1, p2 int, processor string) string {
	conf := fmt.Sprintf(`edge.sources = r1
edge.channels = ch
edge.sinks = k1 k2
edge.sinkgroups = g1
edge.sources.r1.type = avro
edge.sources.r1.bind = 127.0.0.1
edge.sources.r1.port = %d
edge.sources.r1.channels = ch
edge.channels.ch.type = memory
edge.channels.ch.capacity = 1000000
edge.channels.ch.transactionCapacity = 1000
edge.sinkgroups.g1.sinks = k1 k2
`, port)
	for i, p := range []int{p1, p2} {
		conf += fmt.Sprintf(`edge.sinks.k%[1]d.type = avro
edge.sinks.k%[1]d.hostname = 127.0.0.1
edge.sinks.k%[1]d.port = %[2]d
edge.sinks.k%[1]d.batch-size = %[3]d
edge.sinks.k%[1]d.connect-timeout = 2000
edge.sinks.k%[1]d.request-timeout = 2000
edge.sinks.k%[1]d.channel = ch
`, i+1, p, edgeBatch)
	}
	return conf + prefixed("edge.sinkgroups.g1.processor.", processor)
}

func writeConf(t *testing.T, name, conf string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".properties")
	testutil.WriteFile(t, file, conf)
	return file
}

// startAgent runs the agent name of file until the test ends (or the test
// stops it), with opt's timeouts: a StopTimeout of a millisecond makes Stop
// tear connections down mid-call, and a ShutdownTimeout of a nanosecond makes
// it leave the channels as they are.
func startAgent(t *testing.T, file, name string, opt agent.Options) *agent.Agent {
	t.Helper()
	opt.File, opt.Name = file, name
	opt.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("agent", name)
	return agenttest.Start(t, opt)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// drained is how many events sink name of agent a delivered.
func drained(a *agent.Agent, name string) int {
	n, _ := strconv.Atoi(sinkCounters(a, name)["EventDrainSuccessCount"])
	return n
}

func sinkCounters(a *agent.Agent, name string) map[string]string {
	out := map[string]string{}
	for _, s := range a.Metrics().Sets() {
		if s.Kind == "SINK" && s.Name == name {
			s.Each(func(k, v string) {
				switch k {
				case "ConnectionCreatedCount", "ConnectionFailedCount", "EventWriteFail", "EventDrainSuccessCount":
					out[k] = v
				}
			})
		}
	}
	return out
}

// sender plays a Flume RPC client: batches of generated lines, numbered
// from 0, each batch sent again until the edge answers OK, so the events
// acknowledged are exactly 0..acked-1.
type sender struct {
	addr  string
	acked atomic.Uint64
}

func (s *sender) run(ctx context.Context) error {
	const batch, every = 50, 2 * time.Millisecond
	var c *avrorpc.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	events := make([]event.Event, batch)
	fill := func(first uint64) {
		for i := range events {
			events[i] = event.Event{Body: body(first + uint64(i))}
		}
	}
	next := uint64(0)
	fill(next)
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if c == nil {
			var err error
			if c, err = avrorpc.Dial(ctx, s.addr, avrorpc.ClientConfig{ConnectTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second}); err != nil {
				c = nil
				if failures++; failures > 100 {
					return fmt.Errorf("sender: %w", err)
				}
				continue
			}
		}
		st, err := c.AppendBatch(ctx, events)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			c.Close()
			c = nil
			if failures++; failures > 100 {
				return fmt.Errorf("sender: %w", err)
			}
		case st == avrorpc.OK:
			next += batch
			s.acked.Store(next)
			fill(next)
		}
	}
}

// body is event seq's body: its number and padding to 64 bytes.
func body(seq uint64) []byte {
	b := strconv.AppendUint(make([]byte, 0, 64), seq, 10)
	b = append(b, ' ')
	for len(b) < 64 {
		b = append(b, 'x')
	}
	return b
}

func parseBody(line []byte) (uint64, error) {
	num, pad, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte(" "))
	if !ok || len(num)+1+len(pad) != 64 || len(bytes.Trim(pad, "x")) != 0 {
		return 0, fmt.Errorf("malformed line %.80q", line)
	}
	return strconv.ParseUint(string(num), 10, 64)
}

// receiver counts the generated lines that arrive, by sequence number.
type receiver struct {
	addr  string
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	seen  map[uint64]int
	nbad  int
	conns map[net.Conn]bool
}

// newReceiver returns a receiver on a free port; it listens from start on.
func newReceiver(t *testing.T) *receiver {
	return &receiver{addr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), seen: map[uint64]int{}, conns: map[net.Conn]bool{}}
}

func (r *receiver) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	r.ln = ln
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
}

func (r *receiver) port() int {
	_, port, _ := net.SplitHostPort(r.addr)
	n, _ := strconv.Atoi(port)
	return n
}

func (r *receiver) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = true
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.read(c)
		}()
	}
}

func (r *receiver) read(c net.Conn) {
	defer func() {
		c.Close()
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err != io.EOF && len(line) > 0 {
				r.mu.Lock()
				r.nbad++
				r.mu.Unlock()
			}
			return
		}
		seq, perr := parseBody(line)
		r.mu.Lock()
		if perr != nil {
			r.nbad++
		} else {
			r.seen[seq]++
		}
		r.mu.Unlock()
	}
}

func (r *receiver) close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *receiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *receiver) dups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.seen {
		n += c - 1
	}
	return n
}

func (r *receiver) bad() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nbad
}

func (r *receiver) snapshot() map[uint64]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint64]int, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

// missingFrom lists the sequence numbers below n that neither a nor b holds.
func missingFrom(n uint64, a, b map[uint64]int) []uint64 {
	var out []uint64
	for i := uint64(0); i < n; i++ {
		if a[i] == 0 && b[i] == 0 {
			out = append(out, i)
		}
	}
	return out
}

// overlap counts the events both collectors delivered.
func overlap(a, b map[uint64]int) int {
	n := 0
	for k := range a {
		if b[k] > 0 {
			n++
		}
	}
	return n
}
