package crash

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// avroToTCP is an avro source on srcPort, channel c1 (props are its
// properties after "a1.channels.c1."), and a tcp sink to sinkPort.
func avroToTCP(srcPort, sinkPort int, channel string) string {
	return fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = avro
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
%sa1.sinks.k1.type = tcp
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = %d
a1.sinks.k1.batchSize = 100
a1.sinks.k1.channel = c1
`, srcPort, channel, sinkPort)
}

func memoryChannel(capacity int) string {
	return fmt.Sprintf("a1.channels.c1.type = memory\na1.channels.c1.capacity = %d\na1.channels.c1.transactionCapacity = %d\n", capacity, min(capacity, 1000))
}

func fileChannel(dir string, capacity int) string {
	return fmt.Sprintf(`a1.channels.c1.type = file
a1.channels.c1.checkpointDir = %s
a1.channels.c1.dataDirs = %s
a1.channels.c1.capacity = %d
a1.channels.c1.minimumRequiredSpace = 0
`, filepath.Join(dir, "ck"), filepath.Join(dir, "data"), capacity)
}

func kafkaChannel(brokers string) string {
	return fmt.Sprintf(`a1.channels.c1.type = org.apache.flume.channel.kafka.KafkaChannel
a1.channels.c1.kafka.bootstrap.servers = %s
a1.channels.c1.kafka.topic = lifecycle
a1.channels.c1.kafka.consumer.group.id = lifecycle
`, brokers)
}

// TestStopUnderLoad sends to the real agent over Avro on two connections
// without pause, with the tcp sink's downstream slower than the load (or
// down), and stops the agent with SIGTERM (--shutdown-timeout 1) while the
// senders go on. For every channel type:
//   - no call sent after the signal (plus 500 ms for it to arrive) is
//     answered OK: intake stops at once, on open connections too;
//   - memory channel: exit status 3, one ERROR per channel with the events
//     it lost (no delivery had them: the downstream never got them) and one
//     with those in flight at the deadline (the batch the sink was
//     delivering, which the downstream may have in part), so that the
//     events received, lost and in flight account for every acknowledged
//     event;
//   - file and Kafka channels: exit status 0, an INFO with what the channel
//     keeps, and after a restart every acknowledged event arrives.
func TestStopUnderLoad(t *testing.T) {
	cases := []struct {
		name     string
		durable  bool
		deadSink bool // nothing listens on the sink's port
	}{
		{name: "memory"},
		{name: "memory, downstream down", deadSink: true},
		{name: "file", durable: true},
		{name: "kafka", durable: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var channel string
			switch tc.name {
			case "file":
				channel = fileChannel(dir, 1000000)
			case "kafka":
				channel = kafkaChannel(kafkatest.New(t, 1, 1, "lifecycle").Brokers())
			default:
				channel = memoryChannel(500000)
			}
			// Lines a second: well under what the agent takes in. The lines
			// are large (lineSize), so the kernel's socket buffers between the
			// sink and the receiver hold few of the backlog: most stays in the
			// channel.
			const drainRate = 2000
			rcv, err := listen(drainRate)
			if err != nil {
				t.Fatal(err)
			}
			defer rcv.close()
			sinkPort := rcv.port()
			if tc.deadSink {
				sinkPort = testutil.FreePort(t)
			}
			port := testutil.FreePort(t)
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			conf := filepath.Join(dir, "a.properties")
			testutil.WriteFile(t, conf, avroToTCP(port, sinkPort, channel))
			p := startAgent(t, conf, "--shutdown-timeout", "1")
			if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			snd := newAvroSender(addr, 2, 100, 0)
			defer snd.stop()
			testutil.WaitFor(t, 30*time.Second, "a backlog of 15000 acknowledged events", func() bool {
				return snd.ackedCount()-rcv.count() >= 15000
			})
			p.Signal(syscall.SIGTERM)
			snd.setCutoff(time.Now().Add(500 * time.Millisecond))
			code := p.Exit(30 * time.Second)
			acked := snd.stop()
			if n := snd.okAfter.Load(); n > 0 {
				t.Errorf("%d calls sent more than 500 ms after SIGTERM were answered OK", n)
			}
			if snd.refusedAfter.Load() == 0 {
				t.Errorf("the senders made no call after the cutoff: the test proves nothing about intake")
			}
			rcv.limit.Store(0)
			received := settle(rcv)
			missing := len(rcv.missing(acked))
			t.Logf("exit %d; acknowledged %d, received %d, missing %d; calls after the cutoff: %d refused, %d OK",
				code, len(acked), received, missing, snd.refusedAfter.Load(), snd.okAfter.Load())

			if !tc.durable {
				if code != 3 {
					t.Fatalf("exit status %d, want 3 (a memory channel still held events)", code)
				}
				// The stop report: lost (no delivery had them), and apart, in
				// flight (the sink's batch the deadline cut off, which the
				// downstream may or may not have).
				lost, inFlight := 0, 0
				for _, rec := range p.Log.Records("channel dropped events it still held: its sinks did not deliver them before the shutdown deadline") {
					if rec["level"] != "ERROR" || rec["component"] != "c1" {
						t.Errorf("loss record %v: want ERROR for c1", rec)
					}
					lost += num(rec, "events")
				}
				for _, rec := range p.Log.Records("channel dropped events its sinks were delivering when the shutdown deadline cut them off: the downstream may or may not have them (in flight, outcome unknown)") {
					if rec["level"] != "ERROR" || rec["component"] != "c1" {
						t.Errorf("in-flight record %v: want ERROR for c1", rec)
					}
					inFlight += num(rec, "events")
				}
				if rec := p.WaitLog("agent stopped", time.Second); num(rec, "dropped") != lost || num(rec, "in_flight_unknown") != inFlight || rec["level"] != "ERROR" {
					t.Errorf("final record %v: want ERROR with dropped=%d in_flight_unknown=%d", rec, lost, inFlight)
				}
				// Reconciled: every acknowledged event was received, lost or in
				// flight; the lost ones were never received, and in flight is
				// at most the sink's batch.
				t.Logf("reported lost %d, in flight %d; missing %d", lost, inFlight, missing)
				if missing == 0 || lost > missing || missing > lost+inFlight || inFlight > 100 {
					t.Fatalf("reported %d lost and %d in flight; %d acknowledged events never arrived (want lost <= missing <= lost + in flight, in flight <= 100)",
						lost, inFlight, missing)
				}
				if tc.deadSink && missing != lost+inFlight {
					t.Fatalf("downstream down: %d missing, want exactly lost + in flight = %d", missing, lost+inFlight)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit status %d, want 0 (a durable channel keeps its events)", code)
			}
			rec := p.WaitLog("channel keeps its events for the next start", time.Second)
			if rec["level"] != "INFO" || rec["component"] != "c1" {
				t.Errorf("kept record %v: want INFO for c1", rec)
			}
			if missing == 0 {
				t.Fatal("nothing was left in the channel at the stop: the test proves nothing")
			}
			// The next start delivers what the channel kept.
			p2 := startAgent(t, conf)
			testutil.WaitFor(t, 60*time.Second, "every acknowledged event arrives after the restart", func() bool {
				return len(rcv.missing(acked)) == 0
			})
			dups, _ := rcv.dups()
			t.Logf("after the restart: %d distinct received, %d duplicates", rcv.count(), dups)
			if dups > 100 {
				t.Errorf("%d duplicates: more than the sink batch rolled back at the stop", dups)
			}
			p2.Signal(syscall.SIGTERM)
			if code := p2.Exit(30 * time.Second); code != 0 {
				t.Errorf("second run: exit %d, want 0", code)
			}
		})
	}
}

// settle waits until the receiver has read everything that reached it (no
// new event for 300 ms) and returns the distinct count.
func settle(r *receiver) int {
	last, since := r.count(), time.Now()
	for time.Since(since) < 300*time.Millisecond {
		time.Sleep(50 * time.Millisecond)
		if n := r.count(); n != last {
			last, since = n, time.Now()
		}
	}
	return last
}

// TestSecondSignalStopsAtOnce: a stop waiting on a downstream that is down
// (--shutdown-timeout 60) ends at the second SIGTERM, at once, with exit
// status 4 and the count of events the memory channel drops.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	dir := t.TempDir()
	port := testutil.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := filepath.Join(dir, "a.properties")
	testutil.WriteFile(t, conf, avroToTCP(port, testutil.FreePort(t), memoryChannel(10000)))
	p := startAgent(t, conf, "--shutdown-timeout", "60")
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	snd := newAvroSender(addr, 1, 100, 0)
	testutil.WaitFor(t, 20*time.Second, "500 events acknowledged", func() bool { return snd.ackedCount() >= 500 })
	acked := len(snd.stop())
	p.Signal(syscall.SIGTERM)
	p.WaitLog("intake closed: sources refuse new events from now on", 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.Exit(5 * time.Second)
	t.Logf("exit %d %v after the second signal", code, time.Since(start).Round(time.Millisecond))
	if code != 4 {
		t.Fatalf("exit status %d, want 4", code)
	}
	rec := p.WaitLog("stopping at once: channel drops the events it holds", time.Second)
	if rec["level"] != "ERROR" || rec["component"] != "c1" || num(rec, "events")+num(rec, "in_flight_unknown") != acked {
		t.Fatalf("record %v: want ERROR for c1 with events + in_flight_unknown = %d (every acknowledged event: the downstream is down)", rec, acked)
	}
}
