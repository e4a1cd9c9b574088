package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestCrashMixed runs the real agent with a file channel between a netcat
// source and a tcp sink under steady load and, at random moments, does one
// of three things to it: SIGKILL (then a restart), SIGTERM (exit status 0
// expected within --shutdown-timeout 1 plus a few seconds; then a
// restart), or SIGHUP after changing the file channel's capacity (the
// channel is replaced: the old one releases its files, the new one replays
// them). Every event the sender saw acknowledged must reach the receiver;
// duplicates stay within one sink batch per action.
//
// The default run does 6 actions (two of each); the full run (30 random
// actions) is
//
//	SLUICE_LONG=1 go test -run=CrashMixed -v -count=1 ./internal/systemtest/crash/
//
// or scripts/crash-test.sh mixed.
func TestCrashMixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	actions := []string{"hup", "kill", "term", "hup", "term", "kill"}
	rng.Shuffle(len(actions), func(i, j int) { actions[i], actions[j] = actions[j], actions[i] })
	maxUptime := 800 * time.Millisecond
	if os.Getenv("SLUICE_LONG") != "" {
		actions = actions[:0]
		for range testutil.EnvInt("SLUICE_CRASH_ACTIONS", 30) {
			actions = append(actions, []string{"hup", "kill", "term"}[rng.IntN(3)])
		}
		maxUptime = 1500 * time.Millisecond
	}
	runMixed(t, actions, maxUptime, rng)
}

func runMixed(t *testing.T, actions []string, maxUptime time.Duration, rng *rand.Rand) {
	base := t.TempDir()
	const conns, rate, sinkBatch = 2, 3000, 100
	rcv, err := listen(int64(0.3 * conns * rate))
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.close()
	port := testutil.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := filepath.Join(base, "agent.properties")
	capacity := 1000000
	writeConfig := func() {
		c := agentConfig(base, port, rcv.port(), sinkBatch)
		c = strings.Replace(c, "a1.channels.c1.type = file\n", fmt.Sprintf("a1.channels.c1.type = file\na1.channels.c1.capacity = %d\n", capacity), 1)
		testutil.WriteFile(t, conf, c)
	}
	writeConfig()
	start := func() *testutil.AgentProcess { return startAgent(t, conf, "--shutdown-timeout", "1") }

	snd := newSender(addr, conns, rate)
	defer snd.stop(0)
	p := start()
	var done []string
	for i, act := range actions {
		if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
			t.Fatalf("action %d: %v", i, err)
		}
		time.Sleep(100*time.Millisecond + time.Duration(rng.Int64N(int64(maxUptime-100*time.Millisecond))))
		ackedBefore := snd.acked.Load()
		switch act {
		case "kill":
			p.Signal(syscall.SIGKILL)
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("no exit after SIGKILL")
			}
			p = start()
		case "term":
			p.Signal(syscall.SIGTERM)
			if code := p.Exit(20 * time.Second); code != 0 {
				t.Fatalf("action %d: exit status %d after SIGTERM with a file channel, want 0", i, code)
			}
			if len(p.Log.Records("channel dropped events it still held: its sinks did not deliver them before the shutdown deadline")) > 0 {
				t.Fatalf("action %d: a file channel reported dropped events", i)
			}
			p = start()
		case "hup":
			capacity = map[bool]int{true: 900000, false: 1000000}[capacity == 1000000]
			writeConfig()
			before := len(p.Log.Records("configuration reloaded"))
			p.Signal(syscall.SIGHUP)
			testutil.WaitFor(t, 30*time.Second, "the reload", func() bool { return len(p.Log.Records("configuration reloaded")) > before })
			if n := len(p.Log.Records("component failed to start; retrying")); n > 0 {
				t.Fatalf("action %d: a component failed to start after the reload", i)
			}
		}
		done = append(done, fmt.Sprintf("%s(acked %d)", act, ackedBefore))
	}
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // some load on the last run too
	acked := snd.stop(10 * time.Second)
	rcv.limit.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var missing []uint64
	for {
		missing = rcv.missing(acked)
		if len(missing) == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.Signal(syscall.SIGTERM)
	code := p.Exit(30 * time.Second)
	dups, _ := rcv.dups()
	bound := len(actions) * sinkBatch
	t.Logf("%d actions: %s", len(actions), strings.Join(done, " "))
	t.Logf("sent %d, acknowledged %d, refused %d, received %d distinct, %d duplicates (bound %d = %d actions x sink batch %d), %d acknowledged missing; last exit %d",
		snd.sent.Load(), len(acked), snd.failed.Load(), rcv.count(), dups, bound, len(actions), sinkBatch, len(missing), code)
	if len(missing) > 0 {
		t.Fatalf("%d acknowledged events never arrived, e.g. %v", len(missing), missing[:min(10, len(missing))])
	}
	if code != 0 {
		t.Fatalf("last SIGTERM: exit status %d, want 0", code)
	}
	if dups > bound {
		t.Fatalf("%d duplicates: more than one sink batch per action (%d)", dups, bound)
	}
	if len(acked) < 100*(len(actions)+1) {
		t.Fatalf("only %d events acknowledged: the load did not get through", len(acked))
	}
}
