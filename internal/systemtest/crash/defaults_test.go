package crash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/thriftrpc"
)

// defaultsTimers is how long TestEveryComponentSurvivesItsDefaults lets
// the components' timers run, once with no event arriving and (in the long
// run) once under a steady trickle: past the 30 s timers of Flume's
// defaults (hdfs and file_roll rollInterval, the file channel's
// checkpointInterval, every health grace) by default; with SLUICE_LONG=1
// past every timer of the defaults up to 120 s (taildir's and the http
// source's idleTimeout). SLUICE_DEFAULTS_SECONDS sets it (620 passes the
// 600 s idle timeouts of the TCP sources' connections too).
func defaultsTimers() (quiet, steady time.Duration) {
	if n := testutil.EnvInt("SLUICE_DEFAULTS_SECONDS", 0); n > 0 {
		return time.Duration(n) * time.Second, time.Duration(n) * time.Second
	}
	if os.Getenv("SLUICE_LONG") != "" {
		return 130 * time.Second, 125 * time.Second
	}
	return 31 * time.Second, 0
}

// trickleEvery is the pace of every source's trickle of events.
const trickleEvery = 500 * time.Millisecond

// TestEveryComponentSurvivesItsDefaults runs every source, channel and sink
// type of internal/agent/components.go in the real agent, each with only
// the keys it requires (and its channel), under a trickle of events, for
// longer than its timers, then stops the agents with SIGTERM. Issue 29:
// the hdfs sink with Flume's default roll settings killed the agent 30 s
// after its tenth event; no timer may.
//
// The schedule: five events from every source (the hdfs sink's ten roll
// its file by rollCount), then nothing for longer than the timers
// (defaultsTimers), so that every timer runs over the state the events
// left; in the long run, then a steady trickle for as long again; then six
// more events from every source (leaving files open for the stop to
// close), and SIGTERM.
//
// Agent A runs everything but the spillable memory channel, whose defaults
// share the file channel's directories (as in Flume), in agent B. Each
// agent has a HOME of its own, where the defaults under ~/.flume go, and
// runs in a directory of its own (hdfs.stagingDir's default is relative).
// Routes (source -> channel -> sink -> downstream):
//
//	netcat -> memory -> tcp -> a line server; and -> memory -> logger
//	avro, kafka -> file -> avro -> an Avro server
//	thrift -> kafka channel -> thrift -> a Thrift server
//	http -> jdbc -> http -> an HTTP server
//	syslogtcp, multiport_syslogtcp (logger -T) -> memory -> elasticsearch -> VictoriaLogs;
//	                                           and -> memory -> null
//	syslogudp (logger -d), netcatudp -> memory -> kafka sink -> kfake
//	taildir, spooldir -> memory -> hdfs (local files, SequenceFile)
//	exec (a script printing a line every 0.5 s) -> memory -> file_roll
//	seq, stress -> memory -> tcp -> a line server reading 64 KiB at most every 0.1 s
//	avro (agent B) -> spillablememory -> tcp -> a line server
//
// The seq and stress sources have no pace of their own (Flume's defaults
// generate as fast as they can): the slow line server paces them through
// the full channel, so their refused puts and backoff timers run too.
// Every event acknowledged to a client (or sent, where nothing
// acknowledges) must reach its downstream, /healthz must be 200 before the
// stop, and both agents must exit 0 without an ERROR line.
//
// The long run (about 2.5 minutes):
//
//	SLUICE_LONG=1 go test -run TestEveryComponentSurvivesItsDefaults -v -count=1 ./internal/systemtest/crash/
func TestEveryComponentSurvivesItsDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent for 35 s")
	}
	quiet, steady := defaultsTimers()
	bin := testutil.AgentBinary(t)
	loggerBin := testutil.SystemTool(t, "logger", "bsdutils")
	root := t.TempDir()
	homeA, homeB := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{homeA, homeB, filepath.Join(root, "tail"), filepath.Join(root, "spool"), filepath.Join(root, "spool-in")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Downstreams.
	kc := kafkatest.New(t, 1, 1, "in")
	vl := startVL(t)
	tcpOut, slowOut, tcpOutB := newLineServer(t, 0), newLineServer(t, 100*time.Millisecond), newLineServer(t, 0)
	avroOut, thriftOut, httpOut := newCollector(), newCollector(), newCollector()
	avroAddr, avroRes := testutil.ServeConns(t, func(ctx context.Context, c net.Conn) error {
		return (&avrorpc.Server{Handler: avroCollect{avroOut}}).ServeConn(ctx, c)
	})
	thriftAddr, thriftRes := testutil.ServeConns(t, func(ctx context.Context, c net.Conn) error {
		return (&thriftrpc.Server{Handler: thriftCollect{thriftOut}}).ServeConn(ctx, c)
	})
	go discard(avroRes)
	go discard(thriftRes)
	httpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		httpOut.add(string(b))
	}))
	defer httpSrv.Close()

	// Inputs.
	// The exec source's command prints a line every 0.5 s while the file
	// "go" exists in its directory.
	script := filepath.Join(root, "trickle.sh")
	execGo := filepath.Join(root, "go")
	testutil.WriteFile(t, script, "#!/bin/sh\ni=0\nwhile :; do if [ -e "+execGo+" ]; then i=$((i+1)); printf 'exec-%06d\\n' \"$i\"; fi; sleep 0.5; done\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	port := map[string]int{}
	for _, k := range []string{"netcat", "avro", "thrift", "http", "syslogtcp", "multiport", "syslogudp", "netcatudp", "avroB", "httpA", "httpB"} {
		port[k] = testutil.FreePort(t)
	}
	hdfsDir, rollDir := filepath.Join(root, "hdfs"), filepath.Join(root, "roll")
	confA := filepath.Join(root, "a.properties")
	testutil.WriteFile(t, confA, fmt.Sprintf(`a1.sources = r_netcat r_avro r_kafka r_thrift r_http r_syslogtcp r_multiport r_syslogudp r_netcatudp r_taildir r_spooldir r_exec r_seq r_stress
a1.channels = c_mem c_log c_file c_kafka c_jdbc c_syslog c_null c_udp c_files c_exec c_gen
a1.sinks = k_tcp k_logger k_avro k_thrift k_http k_es k_null k_kafka k_hdfs k_roll k_slow

a1.sources.r_netcat.type = netcat
a1.sources.r_netcat.bind = 127.0.0.1
a1.sources.r_netcat.port = %[1]d
a1.sources.r_netcat.channels = c_mem c_log
a1.sources.r_avro.type = avro
a1.sources.r_avro.bind = 127.0.0.1
a1.sources.r_avro.port = %[2]d
a1.sources.r_avro.channels = c_file
a1.sources.r_kafka.type = org.apache.flume.source.kafka.KafkaSource
a1.sources.r_kafka.kafka.bootstrap.servers = %[3]s
a1.sources.r_kafka.kafka.topics = in
a1.sources.r_kafka.channels = c_file
a1.sources.r_thrift.type = thrift
a1.sources.r_thrift.bind = 127.0.0.1
a1.sources.r_thrift.port = %[4]d
a1.sources.r_thrift.channels = c_kafka
a1.sources.r_http.type = http
a1.sources.r_http.port = %[5]d
a1.sources.r_http.channels = c_jdbc
a1.sources.r_syslogtcp.type = syslogtcp
a1.sources.r_syslogtcp.port = %[6]d
a1.sources.r_syslogtcp.channels = c_syslog c_null
a1.sources.r_multiport.type = multiport_syslogtcp
a1.sources.r_multiport.ports = %[7]d
a1.sources.r_multiport.channels = c_syslog c_null
a1.sources.r_syslogudp.type = syslogudp
a1.sources.r_syslogudp.port = %[8]d
a1.sources.r_syslogudp.channels = c_udp
a1.sources.r_netcatudp.type = netcatudp
a1.sources.r_netcatudp.bind = 127.0.0.1
a1.sources.r_netcatudp.port = %[9]d
a1.sources.r_netcatudp.channels = c_udp
a1.sources.r_taildir.type = TAILDIR
a1.sources.r_taildir.filegroups = g1
a1.sources.r_taildir.filegroups.g1 = %[10]s/app.*\.log
a1.sources.r_taildir.channels = c_files
a1.sources.r_spooldir.type = spooldir
a1.sources.r_spooldir.spoolDir = %[11]s
a1.sources.r_spooldir.channels = c_files
a1.sources.r_exec.type = exec
a1.sources.r_exec.command = %[12]s
a1.sources.r_exec.channels = c_exec
a1.sources.r_seq.type = seq
a1.sources.r_seq.channels = c_gen
a1.sources.r_stress.type = org.apache.flume.source.StressSource
a1.sources.r_stress.channels = c_gen

a1.channels.c_mem.type = memory
a1.channels.c_log.type = memory
a1.channels.c_file.type = file
a1.channels.c_kafka.type = org.apache.flume.channel.kafka.KafkaChannel
a1.channels.c_kafka.kafka.bootstrap.servers = %[3]s
a1.channels.c_jdbc.type = jdbc
a1.channels.c_syslog.type = memory
a1.channels.c_null.type = memory
a1.channels.c_udp.type = memory
a1.channels.c_files.type = memory
a1.channels.c_exec.type = memory
a1.channels.c_gen.type = memory

a1.sinks.k_tcp.type = tcp
a1.sinks.k_tcp.hostname = 127.0.0.1
a1.sinks.k_tcp.port = %[13]d
a1.sinks.k_tcp.channel = c_mem
a1.sinks.k_logger.type = logger
a1.sinks.k_logger.channel = c_log
a1.sinks.k_avro.type = avro
a1.sinks.k_avro.hostname = 127.0.0.1
a1.sinks.k_avro.port = %[14]d
a1.sinks.k_avro.channel = c_file
a1.sinks.k_thrift.type = thrift
a1.sinks.k_thrift.hostname = 127.0.0.1
a1.sinks.k_thrift.port = %[15]d
a1.sinks.k_thrift.channel = c_kafka
a1.sinks.k_http.type = http
a1.sinks.k_http.endpoint = %[16]s
a1.sinks.k_http.channel = c_jdbc
a1.sinks.k_es.type = elasticsearch
a1.sinks.k_es.hostNames = %[17]s/insert/elasticsearch
a1.sinks.k_es.channel = c_syslog
a1.sinks.k_null.type = null
a1.sinks.k_null.channel = c_null
a1.sinks.k_kafka.type = org.apache.flume.sink.kafka.KafkaSink
a1.sinks.k_kafka.kafka.bootstrap.servers = %[3]s
a1.sinks.k_kafka.channel = c_udp
a1.sinks.k_hdfs.type = hdfs
a1.sinks.k_hdfs.hdfs.path = %[18]s
a1.sinks.k_hdfs.channel = c_files
a1.sinks.k_roll.type = file_roll
a1.sinks.k_roll.sink.directory = %[19]s
a1.sinks.k_roll.channel = c_exec
a1.sinks.k_slow.type = tcp
a1.sinks.k_slow.hostname = 127.0.0.1
a1.sinks.k_slow.port = %[20]d
a1.sinks.k_slow.channel = c_gen
`, port["netcat"], port["avro"], kc.Brokers(), port["thrift"], port["http"], port["syslogtcp"], port["multiport"],
		port["syslogudp"], port["netcatudp"], filepath.Join(root, "tail"), filepath.Join(root, "spool"), script,
		tcpOut.port(), portOf(avroAddr), portOf(thriftAddr), httpSrv.URL, vl, hdfsDir, rollDir, slowOut.port()))
	confB := filepath.Join(root, "b.properties")
	testutil.WriteFile(t, confB, fmt.Sprintf(`a1.sources = r_avro
a1.channels = c_spill
a1.sinks = k_tcp
a1.sources.r_avro.type = avro
a1.sources.r_avro.bind = 127.0.0.1
a1.sources.r_avro.port = %d
a1.sources.r_avro.channels = c_spill
a1.channels.c_spill.type = SPILLABLEMEMORY
a1.sinks.k_tcp.type = tcp
a1.sinks.k_tcp.hostname = 127.0.0.1
a1.sinks.k_tcp.port = %d
a1.sinks.k_tcp.channel = c_spill
`, port["avroB"], tcpOutB.port()))

	start := func(conf, home, httpAddr string) *testutil.AgentProcess {
		cmd := testutil.AgentCommand(bin, conf, "--log-format", "json", "--http", httpAddr)
		cmd.Dir = home
		cmd.Env = append(os.Environ(), "HOME="+home)
		return testutil.RunAgent(t, cmd)
	}
	httpA, httpB := "127.0.0.1:"+strconv.Itoa(port["httpA"]), "127.0.0.1:"+strconv.Itoa(port["httpB"])
	pA, pB := start(confA, homeA, httpA), start(confB, homeB, httpB)
	for _, k := range []string{"netcat", "avro", "thrift", "http", "syslogtcp", "multiport", "avroB"} {
		if err := testutil.WaitAccepting("127.0.0.1:"+strconv.Itoa(port[k]), 30*time.Second); err != nil {
			t.Fatalf("%s source: %v", k, err)
		}
	}
	// An idle connection to every TCP listener, for its idle timer.
	idle := map[string]net.Conn{}
	for _, k := range []string{"netcat", "avro", "thrift", "http", "syslogtcp", "multiport"} {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port[k]))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle[k] = c
	}

	// The trickles: one sender per source, an event every trickleEvery.
	tr := &trickles{}
	addr := func(k string) string { return "127.0.0.1:" + strconv.Itoa(port[k]) }
	tr.add("netcat", netcatTrickle(addr("netcat")))
	tr.add("avro", avroTrickle(addr("avro")))
	tr.add("avroB", avroTrickle(addr("avroB")))
	tr.add("thrift", thriftTrickle(addr("thrift")))
	tr.add("http", httpTrickle("http://"+addr("http")))
	tr.add("syslogtcp", loggerTrickle(loggerBin, "-T", port["syslogtcp"]))
	tr.add("multiport", loggerTrickle(loggerBin, "-T", port["multiport"]))
	tr.add("syslogudp", loggerTrickle(loggerBin, "-d", port["syslogudp"]))
	tr.add("netcatudp", udpTrickle(addr("netcatudp")))
	tr.add("taildir", appendTrickle(filepath.Join(root, "tail", "app.log")))
	tr.add("spooldir", spoolTrickle(filepath.Join(root, "spool-in"), filepath.Join(root, "spool")))
	tr.add("kafka", kafkaTrickle(kc))
	kafkaWarm := kafkaWarmUp(t, kc, httpA)
	alive := func(what string, d time.Duration) {
		t.Helper()
		for t0 := time.Now(); time.Since(t0) < d; time.Sleep(200 * time.Millisecond) {
			for name, p := range map[string]*testutil.AgentProcess{"A": pA, "B": pB} {
				select {
				case <-p.Done():
					t.Fatalf("agent %s exited %v into %s: %v", name, time.Since(t0).Round(time.Second), what, p.Err())
				default:
				}
			}
		}
	}
	execOn := func(on bool) {
		if on {
			testutil.WriteFile(t, execGo, "")
		} else {
			os.Remove(execGo)
		}
	}
	execOn(true)
	tr.send(5, 0)
	execOn(false)
	alive("the quiet time", quiet)
	if steady > 0 {
		execOn(true)
		tr.send(0, steady)
		alive("the steady trickle", 0)
	}
	execOn(true)
	tr.send(6, 0)
	execOn(false)
	tr.close(t)
	t.Logf("quiet %v, steady %v: sent or acknowledged %v", quiet, steady, tr.counts())

	// Every route delivers what it was given.
	deliver := func(what string, missing func() []string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			m := missing()
			if len(m) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d not delivered, such as %v", what, len(m), m[:min(5, len(m))])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	deliver("netcat -> tcp", func() []string { return tcpOut.missing(tr.sent("netcat")) })
	deliver("avro, kafka -> file channel -> avro sink", func() []string {
		return avroOut.missing(append(tr.sent("avro"), tr.sent("kafka")...))
	})
	deliver("thrift -> kafka channel -> thrift sink", func() []string { return thriftOut.missing(tr.sent("thrift")) })
	deliver("http -> jdbc -> http sink", func() []string { return httpOut.missing(tr.sent("http")) })
	deliver("avro -> spillablememory -> tcp (agent B)", func() []string { return tcpOutB.missing(tr.sent("avroB")) })
	udpSent, fromKafka, read := append(tr.sent("syslogudp"), tr.sent("netcatudp")...), newCollector(), 0
	kafkatest.ReadUntil(t, kc.Addrs, []string{"default-flume-topic"}, 30*time.Second, func(recs []*kgo.Record) bool {
		for _, r := range recs[read:] {
			fromKafka.add(string(r.Value))
		}
		read = len(recs)
		return len(fromKafka.missingIn(udpSent)) == 0
	})
	if m := fromKafka.missingIn(udpSent); len(m) > 0 {
		t.Fatalf("syslogudp, netcatudp -> kafka sink: %d not delivered, such as %v", len(m), m[:min(5, len(m))])
	}
	syslogSent := len(tr.sent("syslogtcp")) + len(tr.sent("multiport"))
	deliver("syslogtcp, multiport -> elasticsearch (VictoriaLogs)", func() []string {
		if n := vlCount(t, vl); n < syslogSent {
			return []string{fmt.Sprintf("%d of %d documents", n, syslogSent)}
		}
		return nil
	})
	deliver("syslogtcp, multiport -> null; netcat -> logger; kafka source", func() []string {
		var out []string
		m := metricsOf(t, httpA)
		if n := m["SINK.k_null"]["EventDrainSuccessCount"]; n != strconv.Itoa(syslogSent) {
			out = append(out, "null sink drained "+n+" of "+strconv.Itoa(syslogSent))
		}
		if n, want := m["SINK.k_logger"]["EventDrainSuccessCount"], m["SOURCE.r_netcat"]["EventAcceptedCount"]; n != want {
			out = append(out, "logger sink drained "+n+" of "+want)
		}
		if acc, _ := strconv.Atoi(m["SOURCE.r_kafka"]["EventAcceptedCount"]); acc-kafkaWarm != len(tr.sent("kafka")) {
			out = append(out, fmt.Sprintf("kafka source accepted %d after the warm-up, %d produced", acc-kafkaWarm, len(tr.sent("kafka"))))
		}
		return out
	})
	for _, a := range []string{httpA, httpB} {
		if code, body := healthz(t, a); code != 200 {
			t.Errorf("/healthz of %s before the stop: %d\n%s", a, code, body)
		}
	}
	if quiet+steady > 125*time.Second && !testutil.ClosedByServer(idle["http"], time.Second) {
		t.Errorf("the http source kept a connection idle for %v (idleTimeout 120 s)", quiet+steady)
	}
	// The slow route: seq's counter arrives without a gap, stress's bodies too.
	seqMax, stress := slowOut.seqAndStress()
	if seqMax < 10 || stress < 10 {
		t.Errorf("through the slow sink: seq up to %d without a gap, %d stress events; want both going", seqMax, stress)
	}

	pA.Signal(syscall.SIGTERM)
	pB.Signal(syscall.SIGTERM)
	for name, p := range map[string]*testutil.AgentProcess{"A": pA, "B": pB} {
		if code := p.Exit(60 * time.Second); code != 0 {
			t.Errorf("agent %s: exit %d after SIGTERM, want 0", name, code)
		}
		for _, rec := range p.Log.Records("") {
			if rec["level"] == "ERROR" {
				t.Errorf("agent %s logged an ERROR: %v", name, rec)
			}
		}
		if strings.Contains(p.Log.String(), "panic") {
			t.Errorf("agent %s: the log mentions a panic", name)
		}
	}
	// What the stop finished: hdfs and file_roll files, complete.
	hdfsBytes := filesBytes(t, hdfsDir, ".tmp")
	var lost []string
	for _, tok := range append(tr.sent("taildir"), tr.sent("spooldir")...) {
		if !bytes.Contains(hdfsBytes, []byte(tok)) {
			lost = append(lost, tok)
		}
	}
	if len(lost) > 0 {
		t.Errorf("taildir, spooldir -> hdfs: %d missing from the finished files, such as %v", len(lost), lost[:min(5, len(lost))])
	}
	if n, want := execRun(filesBytes(t, rollDir, "")), int((steady+5500*time.Millisecond)/trickleEvery); n < want/2 {
		t.Errorf("exec -> file_roll: exec-000001 to exec-%06d without a gap; want about %d", n, want)
	}
}

// trickles are the per-source senders; they record what each sent (and,
// where the source answers, what was acknowledged).
type trickles struct {
	names []string
	sends []func(token string) error
	mu    sync.Mutex
	ok    map[string][]string
	next  map[string]int
	errs  []string
}

// add adds a sender: send sends one event with the body token
// ("<name>-000001", ...) and reports whether the source took it (a failure
// is an error of the test: nothing should refuse a trickle).
func (tr *trickles) add(name string, send func(token string) error) {
	tr.names = append(tr.names, name)
	tr.sends = append(tr.sends, send)
}

// send has every sender send n events, or send for d, one every
// trickleEvery, all at once, and returns when they are done.
func (tr *trickles) send(n int, d time.Duration) {
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i, name := range tr.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; (n > 0 && k < n) || (n == 0 && time.Now().Before(end)); k++ {
				tr.mu.Lock()
				if tr.next == nil {
					tr.next, tr.ok = map[string]int{}, map[string][]string{}
				}
				tr.next[name]++
				tok := fmt.Sprintf("%s-%06d", name, tr.next[name])
				tr.mu.Unlock()
				err := tr.sends[i](tok)
				tr.mu.Lock()
				if err != nil {
					tr.errs = append(tr.errs, tok+": "+err.Error())
				} else {
					tr.ok[name] = append(tr.ok[name], tok)
				}
				tr.mu.Unlock()
				time.Sleep(trickleEvery)
			}
		}()
	}
	wg.Wait()
}

// close releases what the senders hold and fails the test if any event
// was refused.
func (tr *trickles) close(t *testing.T) {
	t.Helper()
	for _, send := range tr.sends {
		_ = send("")
	}
	if len(tr.errs) > 0 {
		t.Errorf("%d events refused or failed, such as %v", len(tr.errs), tr.errs[:min(5, len(tr.errs))])
	}
}

func (tr *trickles) sent(name string) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.ok[name])
}

func (tr *trickles) counts() map[string]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string]int{}
	for k, v := range tr.ok {
		out[k] = len(v)
	}
	return out
}

// Each trickle's send is called with "" once at the end to release what it
// holds.

func netcatTrickle(addr string) func(string) error {
	var c net.Conn
	var r *bufio.Reader
	return func(tok string) error {
		if tok == "" {
			if c != nil {
				c.Close()
			}
			return nil
		}
		if c == nil {
			var err error
			if c, err = net.Dial("tcp", addr); err != nil {
				return err
			}
			r = bufio.NewReader(c)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, tok+"\n"); err != nil {
			c = nil
			return err
		}
		if l, err := r.ReadString('\n'); err != nil || l != "OK\n" {
			c.Close()
			c = nil
			return fmt.Errorf("answer %q, %v", l, err)
		}
		return nil
	}
}

// rpcTrickle sends each token as a batch of one over Flume's RPC, in a
// session dial makes, dialled again after a failure; "" closes it.
func rpcTrickle(dial func(context.Context) (sourcetest.Session, error)) func(string) error {
	var s sourcetest.Session
	return func(tok string) error {
		if tok == "" {
			if s != nil {
				_ = s.Close()
			}
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if s == nil {
			var err error
			if s, err = dial(ctx); err != nil {
				return err
			}
		}
		if err := s.Send(ctx, []string{tok}); err != nil {
			_ = s.Close()
			s = nil
			return err
		}
		return nil
	}
}

func avroTrickle(addr string) func(string) error {
	return rpcTrickle(func(ctx context.Context) (sourcetest.Session, error) {
		c, err := avrorpc.Dial(ctx, addr, avrorpc.ClientConfig{ConnectTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second})
		if err != nil {
			return nil, err
		}
		return sourcetest.RPCSession(c, avrorpc.OK), nil
	})
}

func thriftTrickle(addr string) func(string) error {
	return rpcTrickle(func(ctx context.Context) (sourcetest.Session, error) {
		c, err := thriftrpc.Dial(ctx, addr, thriftrpc.ClientConfig{ConnectTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second})
		if err != nil {
			return nil, err
		}
		return sourcetest.RPCSession(c, thriftrpc.OK), nil
	})
}

func httpTrickle(u string) func(string) error {
	return func(tok string) error {
		if tok == "" {
			http.DefaultClient.CloseIdleConnections()
			return nil
		}
		resp, err := http.Post(u, "application/json", strings.NewReader(`[{"headers":{},"body":"`+tok+`"}]`))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}
}

// loggerTrickle sends each token with util-linux's logger over TCP (-T)
// or UDP (-d), RFC 3164.
func loggerTrickle(bin, proto string, port int) func(string) error {
	return func(tok string) error {
		if tok == "" {
			return nil
		}
		out, err := exec.Command(bin, proto, "-n", "127.0.0.1", "-P", strconv.Itoa(port), "--rfc3164", "-t", "trickle", tok).CombinedOutput()
		if err != nil {
			return fmt.Errorf("logger: %v: %s", err, out)
		}
		return nil
	}
}

func udpTrickle(addr string) func(string) error {
	return func(tok string) error {
		if tok == "" {
			return nil
		}
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.WriteString(c, tok+"\n")
		return err
	}
}

func appendTrickle(file string) func(string) error {
	return func(tok string) error {
		if tok == "" {
			return nil
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		_, err = io.WriteString(f, tok+"\n")
		return errors.Join(err, f.Close())
	}
}

// spoolTrickle writes each token as a file of its own, complete, into the
// spool directory (written in staging, then renamed in).
func spoolTrickle(staging, spool string) func(string) error {
	return func(tok string) error {
		if tok == "" {
			return nil
		}
		p := filepath.Join(staging, tok)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o644); err != nil {
			return err
		}
		return os.Rename(p, filepath.Join(spool, tok+".log"))
	}
}

// kafkaWarmUp produces to topic "in" until the kafka source, which starts
// at the latest offset (Kafka's default), has joined and accepted a
// record; it returns how many it accepted so far.
func kafkaWarmUp(t *testing.T, kc *kafkatest.Cluster, httpAddr string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		kafkatest.Produce(t, kc.Addrs, &kgo.Record{Topic: "in", Value: []byte(fmt.Sprintf("kafka-warm-%06d", i))})
		time.Sleep(200 * time.Millisecond)
		if n, _ := strconv.Atoi(metricsOf(t, httpAddr)["SOURCE.r_kafka"]["EventAcceptedCount"]); n > 0 {
			time.Sleep(time.Second) // what is in flight arrives
			n, _ = strconv.Atoi(metricsOf(t, httpAddr)["SOURCE.r_kafka"]["EventAcceptedCount"])
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("the kafka source accepted nothing in 30 s")
		}
	}
}

func kafkaTrickle(kc *kafkatest.Cluster) func(string) error {
	var cl *kgo.Client
	return func(tok string) error {
		if tok == "" {
			if cl != nil {
				cl.Close()
			}
			return nil
		}
		if cl == nil {
			var err error
			if cl, err = kgo.NewClient(kgo.SeedBrokers(kc.Addrs...)); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: []byte(tok)}).FirstErr()
	}
}

// collector holds the bodies a downstream received, with their counts.
type collector struct {
	mu sync.Mutex
	n  map[string]int
}

func newCollector() *collector { return &collector{n: map[string]int{}} }

func (c *collector) add(body string) {
	c.mu.Lock()
	c.n[body]++
	c.mu.Unlock()
}

// missing returns the tokens no body equals.
func (c *collector) missing(tokens []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, tok := range tokens {
		if c.n[tok] == 0 {
			out = append(out, tok)
		}
	}
	return out
}

// missingIn returns the tokens no body contains (syslog bodies carry a
// tag before the message).
func (c *collector) missingIn(tokens []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all strings.Builder
	for b := range c.n {
		all.WriteString(b)
		all.WriteByte('\n')
	}
	var out []string
	for _, tok := range tokens {
		if !strings.Contains(all.String(), tok) {
			out = append(out, tok)
		}
	}
	return out
}

type avroCollect struct{ c *collector }

func (h avroCollect) Append(_ context.Context, e event.Event) avrorpc.Status {
	h.c.add(string(e.Body))
	return avrorpc.OK
}

func (h avroCollect) AppendBatch(_ context.Context, evs []event.Event) avrorpc.Status {
	for _, e := range evs {
		h.c.add(string(e.Body))
	}
	return avrorpc.OK
}

type thriftCollect struct{ c *collector }

func (h thriftCollect) Append(_ context.Context, e event.Event) thriftrpc.Status {
	h.c.add(string(e.Body))
	return thriftrpc.OK
}

func (h thriftCollect) AppendBatch(_ context.Context, evs []event.Event) thriftrpc.Status {
	for _, e := range evs {
		h.c.add(string(e.Body))
	}
	return thriftrpc.OK
}

// lineServer collects the lines tcp sinks send it; with pace, it sleeps
// that long after each read.
type lineServer struct {
	*collector
	addr string
}

func newLineServer(t *testing.T, pace time.Duration) *lineServer {
	s := &lineServer{collector: newCollector()}
	var lc net.ListenConfig
	if pace > 0 {
		// A small receive buffer from the handshake on, so that the
		// backlog of a slow reader stays in the channel rather than in
		// the kernel.
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
			})
			return errors.Join(err, serr)
		}
	}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReaderSize(c, 64<<10)
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					s.add(strings.TrimSuffix(l, "\n"))
					if pace > 0 && br.Buffered() == 0 {
						time.Sleep(pace) // after each read of up to 64 KiB
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *lineServer) port() int { return portOf(s.addr) }

// seqAndStress returns the highest n such that the seq source's bodies 0
// to n all arrived, and how many of the stress source's bodies did.
func (s *lineServer) seqAndStress() (seqMax, stress int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stressBody := strings.Repeat("\x7f", 500)
	for seqMax = -1; s.n[strconv.Itoa(seqMax+1)] > 0; seqMax++ {
	}
	return seqMax, s.n[stressBody]
}

func discard(ch <-chan error) {
	for range ch {
	}
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// metricsOf reads an agent's /metrics.
func metricsOf(t *testing.T, httpAddr string) map[string]map[string]string {
	t.Helper()
	var m map[string]map[string]string
	if err := getJSON("http://"+httpAddr+"/metrics", &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// filesBytes concatenates the files under dir; a file named with the
// in-use suffix (when not "") fails the test.
func filesBytes(t *testing.T, dir, inUse string) []byte {
	t.Helper()
	var all []byte
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if inUse != "" && strings.HasSuffix(p, inUse) {
			t.Errorf("%s is still in use after the stop", p)
		}
		b, err := os.ReadFile(p)
		all = append(all, b...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

var execLine = regexp.MustCompile(`exec-(\d{6})`)

// execRun returns the highest n such that exec-000001 to exec-n all occur.
func execRun(b []byte) int {
	seen := map[int]bool{}
	for _, m := range execLine.FindAllSubmatch(b, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		seen[n] = true
	}
	n := 0
	for seen[n+1] {
		n++
	}
	return n
}

// startVL runs VictoriaLogs, the elasticsearch sink's real peer, and
// returns its base URL.
func startVL(t *testing.T) string {
	t.Helper()
	bin := testutil.PeerBinary(t, "victoria-logs", "SLUICE_VICTORIALOGS",
		"go install github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@v1.52.1")
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	cmd := exec.Command(bin, "-httpListenAddr="+addr, "-storageDataPath="+filepath.Join(t.TempDir(), "vl"), "-retentionPeriod=1y")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exited atomic.Bool
	done := make(chan struct{})
	go func() { cmd.Wait(); exited.Store(true); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	base := "http://" + addr
	testutil.WaitFor(t, 20*time.Second, "VictoriaLogs answers", func() bool {
		if exited.Load() {
			t.Fatal("victoria-logs exited")
		}
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base
}

// vlCount flushes VictoriaLogs and counts every document it holds.
func vlCount(t *testing.T, base string) int {
	t.Helper()
	if resp, err := http.Get(base + "/internal/force_flush"); err == nil {
		resp.Body.Close()
	}
	resp, err := http.PostForm(base+"/select/logsql/query", url.Values{"query": {"* | stats count() n"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var row map[string]string
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(bytes.TrimSpace(b), &row); err != nil {
		return 0 // nothing yet
	}
	n, _ := strconv.Atoi(row["n"])
	return n
}
