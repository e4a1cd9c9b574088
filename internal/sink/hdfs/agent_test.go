package hdfssink

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestAgentWithFlumeRollDefaults runs the real agent with three hdfs sinks
// that keep Flume's roll defaults (rollCount 10, rollSize 1024, SequenceFile)
// with a shorter timer: rollInterval 2 s on local files and on S3
// (VersityGW), and idleTimeout 1 s. Ten events roll each file by count; the
// timers then tick over the rolled buckets (issue 29: the agent died there
// with a nil pointer dereference, exit status 2); three more events open new
// files, which the timers roll. Every event is in a finished file and
// SIGTERM exits 0.
func TestAgentWithFlumeRollDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent binary for several seconds")
	}
	v := startVersity(t)
	bin := testutil.AgentBinary(t)
	base := t.TempDir()
	port := testutil.FreePort(t)
	conf := fmt.Sprintf(`a1.sources = r1
a1.channels = c1 c2 c3
a1.sinks = k1 k2 k3
a1.sources.r1.type = netcat
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1 c2 c3
a1.channels.c1.type = memory
a1.channels.c2.type = memory
a1.channels.c3.type = memory
a1.sinks.k1.type = hdfs
a1.sinks.k1.channel = c1
a1.sinks.k1.hdfs.path = file://%[2]s/local
a1.sinks.k1.hdfs.rollInterval = 2
a1.sinks.k2.type = hdfs
a1.sinks.k2.channel = c2
a1.sinks.k2.hdfs.path = s3a://%[3]s/defaults
a1.sinks.k2.hdfs.rollInterval = 2
a1.sinks.k2.fs.s3a.endpoint = %[4]s
a1.sinks.k2.fs.s3a.access.key = %[5]s
a1.sinks.k2.fs.s3a.secret.key = %[6]s
a1.sinks.k2.fs.s3a.path.style.access = true
a1.sinks.k3.type = hdfs
a1.sinks.k3.channel = c3
a1.sinks.k3.hdfs.path = %[2]s/idle
a1.sinks.k3.hdfs.idleTimeout = 1
`, port, base, s3Bucket, v.endpoint, s3Access, s3Secret)
	confPath := filepath.Join(base, "agent.properties")
	testutil.WriteFile(t, confPath, conf)
	cmd := testutil.AgentCommand(bin, confPath)
	cmd.Dir = base // the default hdfs.stagingDir is relative to it
	p := testutil.RunAgent(t, cmd)
	log := p.Log
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nagent log:\n%s", append(args, log.String())...)
	}
	running := func(after string) {
		t.Helper()
		if !p.Running() {
			fail("the agent exited %s: %v", after, p.Err())
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		fail("%v", err)
	}
	sendLines(t, addr, "a", 10) // rolls each sink's file by rollCount
	time.Sleep(3500 * time.Millisecond)
	running("after its roll timers ticked over files rolled by count")
	sendLines(t, addr, "b", 3) // new files, rolled by the timers
	want := []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2"}
	local := func(dir string) func() ([]string, int) {
		return func() ([]string, int) {
			contents := map[string][]byte{}
			for _, n := range files(t, dir) {
				if strings.HasSuffix(n, ".tmp") {
					return nil, 0
				}
				b, _ := os.ReadFile(filepath.Join(dir, n))
				contents[n] = b
			}
			return seqBodies(t, contents), len(contents)
		}
	}
	for _, tc := range []struct {
		sink     string
		finished func() ([]string, int)
	}{
		{"k1 (local, rollInterval)", local(filepath.Join(base, "local"))},
		{"k2 (S3, rollInterval)", func() ([]string, int) { o := v.objects("defaults/"); return seqBodies(t, o), len(o) }},
		{"k3 (local, idleTimeout)", local(filepath.Join(base, "idle"))},
	} {
		deadline := time.Now().Add(15 * time.Second)
		for {
			got, n := tc.finished()
			if n == 2 && strings.Join(got, " ") == strings.Join(want, " ") {
				break
			}
			running("before its files rolled")
			if time.Now().After(deadline) {
				fail("%s: %d finished files holding %v; want 2 holding %v", tc.sink, n, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	p.Stop(30 * time.Second)
	if strings.Contains(log.String(), "panic") {
		fail("the log mentions a panic")
	}
}

// sendLines sends n lines prefix0, prefix1, ... to a netcat source and
// waits for each one's OK.
func sendLines(t *testing.T, addr, prefix string, n int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		fmt.Fprintf(c, "%s%d\n", prefix, i)
	}
	r := bufio.NewReader(c)
	for i := range n {
		if l, err := r.ReadString('\n'); err != nil || l != "OK\n" {
			t.Fatalf("line %d: answer %q, %v", i, l, err)
		}
	}
}

// seqBodies returns the values of every record of the SequenceFiles,
// sorted.
func seqBodies(t *testing.T, contents map[string][]byte) []string {
	t.Helper()
	var out []string
	for name, b := range contents {
		f, err := readSeqFile(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, r := range f.records {
			out = append(out, string(r.value))
		}
	}
	sort.Strings(out)
	return out
}
