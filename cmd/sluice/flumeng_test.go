package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestParseFlumeLaunch(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want *flumeLaunch
		err  string
	}{
		{args: []string{"agent", "--conf", "conf", "--conf-file", "f.conf", "--name", "a1", "-Dflume.root.logger=INFO,console"},
			want: &flumeLaunch{cmd: "agent", confDir: "conf", sys: [][2]string{{"flume.root.logger", "INFO,console"}},
				rest: []string{"--conf-file", "f.conf", "--name", "a1"}}},
		{args: []string{"agent", "-c", "conf", "-f", "f.conf", "-n", "a1", "-C", "/opt/x.jar", "-d", "--plugins-path", "/p",
			"-Xmx1g", "-XX:+UseG1GC", "-javaagent:/j.jar", "-Da=b=c"},
			want: &flumeLaunch{cmd: "agent", confDir: "conf", classpath: "/opt/x.jar", dryrun: true, pluginsPath: "/p",
				sys: [][2]string{{"a", "b=c"}}, jvm: []string{"-Xmx1g", "-XX:+UseG1GC", "-javaagent:/j.jar"},
				rest: []string{"-f", "f.conf", "-n", "a1"}}},
		{args: []string{"avro-client", "-H", "localhost", "-p", "41414", "-F", "x"},
			want: &flumeLaunch{cmd: "avro-client", rest: []string{"-H", "localhost", "-p", "41414", "-F", "x"}}},
		{args: []string{}, err: "unknown or unspecified command ''"},
		{args: []string{"start"}, err: "unknown or unspecified command 'start'"},
		{args: []string{"agent", "--conf"}, err: "option --conf requires an argument"},
	} {
		got, err := parseFlumeLaunch(tt.args)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", tt.args, got, err, tt.want)
		}
	}
}

// TestFlumeEnvAndPlan: flume-ng's conf dir's flume-env.sh is sourced with
// bash; JAVA_OPTS' -D properties apply (the command line's win), -Xmx
// becomes the Go memory limit, exported variables reach the agent, and
// every JVM or classpath setting that does not apply is one note.
func TestFlumeEnvAndPlan(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	dir := t.TempDir()
	env := `# as Flume's template has it
export JAVA_OPTS="-Xms100m -Xmx2000m -Dcom.sun.management.jmxremote"
export JAVA_OPTS="$JAVA_OPTS -Dorg.apache.flume.log.rawdata=true -Dport=1"
FLUME_CLASSPATH="/opt/lib/custom.jar"
export SLUICE_TEST_EXPORTED=yes
NOT_EXPORTED=no
echo "flume-env.sh says hello"
`
	if err := os.WriteFile(filepath.Join(dir, "flume-env.sh"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log4j2.xml"), []byte("<Configuration/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	fe, err := readFlumeEnv(filepath.Join(dir, "flume-env.sh"), &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "flume-env.sh says hello") {
		t.Errorf("the script's output: %q", out.String())
	}
	wantOpts := []string{"-Xms100m", "-Xmx2000m", "-Dcom.sun.management.jmxremote", "-Dorg.apache.flume.log.rawdata=true", "-Dport=1"}
	if !reflect.DeepEqual(fe.javaOpts, wantOpts) || fe.classpath != "/opt/lib/custom.jar" ||
		fe.exported["SLUICE_TEST_EXPORTED"] != "yes" || fe.exported["NOT_EXPORTED"] != "" {
		t.Fatalf("flume-env.sh read as %+v", fe)
	}
	l, err := parseFlumeLaunch([]string{"agent", "-c", dir, "-f", "f.conf", "-n", "a1", "-Dport=2", "-C", "/x.jar",
		"-Dflume.root.logger=DEBUG,LOGFILE", "-Dflume.log.dir=/var/log/flume"})
	if err != nil {
		t.Fatal(err)
	}
	p := planFlumeAgent(l, fe)
	wantArgs := []string{"agent", "-f", "f.conf", "-n", "a1", "-Dcom.sun.management.jmxremote=", "-Dorg.apache.flume.log.rawdata=true",
		"-Dport=2", "-Dflume.root.logger=DEBUG,LOGFILE", "-Dflume.log.dir=/var/log/flume"}
	if !reflect.DeepEqual(p.args, wantArgs) {
		t.Errorf("args\n got %q\nwant %q", p.args, wantArgs)
	}
	if p.memLimit != 2000<<20 || p.logFile != "/var/log/flume/flume.log" || p.env["SLUICE_TEST_EXPORTED"] != "yes" {
		t.Errorf("plan %+v", p)
	}
	notes := strings.Join(p.notes, "\n")
	for _, want := range []string{
		"FLUME_CLASSPATH from flume-env.sh is ignored",
		"JVM option -Xms100m is ignored",
		"-Dcom.sun.management.jmxremote is ignored: sluice serves no JMX",
		"-Xmx sets the Go heap's soft limit to 2000 MiB",
		"--classpath /x.jar is ignored",
		"log4j2.xml is not read",
		"logging to /var/log/flume/flume.log (Flume's LOGFILE appender)",
	} {
		if strings.Count(notes, want) != 1 {
			t.Errorf("notes lack (once) %q:\n%s", want, notes)
		}
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	if p := planFlumeAgent(l, fe); p.memLimit != 0 || !strings.Contains(strings.Join(p.notes, "\n"), "GOMEMLIMIT=1GiB is set and wins") {
		t.Errorf("GOMEMLIMIT set: %+v", p)
	}
}

func TestJavaSize(t *testing.T) {
	for in, want := range map[string]int64{"2g": 2 << 30, "512m": 512 << 20, "64K": 64 << 10, "1048576": 1 << 20, "x": 0, "": 0, "-1m": 0} {
		if got, _ := javaSize(in); got != want {
			t.Errorf("javaSize(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestFlumeNgCommands(t *testing.T) {
	if code, out, _ := runCLI("flume-ng", "help"); code != 0 || !strings.HasPrefix(out, "Usage: flume-ng <command>") {
		t.Errorf("help: %d %q", code, out)
	}
	if code, out, _ := runCLI("flume-ng", "version"); code != 0 || !strings.HasPrefix(out, "sluice ") || !strings.Contains(out, "Flume") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, _, errOut := runCLI("flume-ng", "frobnicate"); code != 1 || !strings.Contains(errOut, "Error: unknown or unspecified command 'frobnicate'") {
		t.Errorf("unknown command: %d %q", code, errOut)
	}
	if code, _, errOut := runCLI("flume-ng", "tool", "FCINTEGRITYTOOL"); code != 1 || !strings.Contains(errOut, "no sluice equivalent") {
		t.Errorf("tool: %d %q", code, errOut)
	}
	code, out, errOut := runCLI("flume-ng", "agent", "-d", "-f", "my conf.properties", "-n", "a1", "-Xss1m")
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "agent -f 'my conf.properties' -n a1") ||
		!strings.Contains(errOut, "JVM option -Xss1m is ignored") || !strings.Contains(errOut, "no configuration directory set") {
		t.Errorf("dry run: %d %q %q", code, out, errOut)
	}
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"-H", "localhost"}, "either --rpcProps or both --host and --port must be specified"},
		{[]string{"-H", "localhost", "-p", "x"}, `--port "x" is not a port number`},
		{[]string{"-H", "h", "-p", "1", "-F", "a", "--dirname", "d"}, "cannot be used simultaneously"},
		{[]string{"-H", "h", "-p", "1", "--bogus"}, `unknown option "--bogus"`},
	} {
		code, _, errOut := runCLI(append([]string{"flume-ng", "avro-client"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tt.err) {
			t.Errorf("avro-client %q: %d %q, want %q", tt.args, code, errOut, tt.err)
		}
	}
}

// TestAvroClientRPCProps: an RPC client properties file gives the hosts
// (in order), the batch size and the timeouts; its problems are FILE:LINE.
func TestAvroClientRPCProps(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "rpc.properties")
	if err := os.WriteFile(props, []byte("client.type = default_failover\nhosts = h1 h2\nhosts.h1 = 127.0.0.1:4141\n"+
		"hosts.h2 = localhost:4242\nbatch-size = 50\nrequest-timeout = 3000\nmaxIoWorkers = 4\nbatchsize = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	headers := filepath.Join(dir, "headers")
	if err := os.WriteFile(headers, []byte("# a comment\nhost=web01\ndc : eu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	c, err := parseAvroClient([]string{"-P", props, "-R", headers}, nil, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.hosts, []string{"127.0.0.1:4141", "localhost:4242"}) || c.batch != 50 ||
		c.cfg.RequestTimeout != 3*time.Second || !reflect.DeepEqual(c.headers, map[string]string{"host": "web01", "dc": "eu"}) {
		t.Errorf("client %+v", c)
	}
	if !strings.Contains(warn.String(), props+":7: maxIoWorkers: not used by avro-client") ||
		!strings.Contains(warn.String(), props+":8: batchsize: ignored") {
		t.Errorf("warnings:\n%s", warn.String())
	}
	if err := os.WriteFile(props, []byte("hosts = h1\nclient.type = thrift\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = parseAvroClient([]string{"-P", props}, nil, &warn)
	if err == nil || !strings.Contains(err.Error(), props+":2: client.type:") || !strings.Contains(err.Error(), props+": hosts.h1: missing required property") {
		t.Errorf("bad props: %v", err)
	}
}

// flumeFixture is a Flume installation's layout around the sluice binary:
// bin/flume-ng a link to it, conf/ with flume.conf and flume-env.sh.
type flumeFixture struct {
	home, conf, state, out string
	launcher               string
	port, monPort          int
	env                    []string
}

func newFlumeFixture(t *testing.T) *flumeFixture {
	t.Helper()
	bin := testutil.AgentBinary(t)
	root := t.TempDir()
	f := &flumeFixture{home: root, conf: filepath.Join(root, "conf"), state: filepath.Join(root, "state"),
		out: filepath.Join(root, "out"), launcher: filepath.Join(root, "bin", "flume-ng"),
		port: testutil.FreePort(t), monPort: testutil.FreePort(t)}
	for _, d := range []string{f.conf, f.out, filepath.Dir(f.launcher)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(bin, f.launcher); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("testdata/flume/flume.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.conf, "flume.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	// The variables the configuration reads come from flume-env.sh, with
	// the JVM options operators put there.
	env := fmt.Sprintf("export JAVA_OPTS=\"-Xms100m -Xmx512m\"\nexport AVRO_PORT=%d STATE_DIR=%s OUT_DIR=%s\n", f.port, f.state, f.out)
	if err := os.WriteFile(filepath.Join(f.conf, "flume-env.sh"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			f.env = append(f.env, kv)
		}
	}
	return f
}

// avroClient runs flume-ng avro-client against the fixture's source.
func (f *flumeFixture) avroClient(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(f.launcher, append([]string{"avro-client", "-c", f.conf, "-H", "localhost", "-p", strconv.Itoa(f.port)}, args...)...)
	cmd.Env, cmd.Stdin = f.env, strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("avro-client %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// delivered is what the file_roll sink wrote: header_and_text lines.
func (f *flumeFixture) delivered(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir(f.out)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(f.out, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return string(all)
}

// TestFlumeNgAgentAndAvroClient: `flume-ng agent -c conf -f FILE -n NAME
// -Dflume.root.logger=INFO,console` runs a Flume configuration through the
// flume-ng link, and `flume-ng avro-client` delivers a file (with headers
// from -R) and standard input through it, line by line; SIGTERM stops it
// with exit 0 and everything delivered.
func TestFlumeNgAgentAndAvroClient(t *testing.T) {
	f := newFlumeFixture(t)
	cmd := exec.Command(f.launcher, "agent", "-c", f.conf, "-f", filepath.Join(f.conf, "flume.conf"), "-n", "agent",
		"-Dflume.root.logger=INFO,console", "-Dflume.monitoring.type=http", "-Dflume.monitoring.port="+strconv.Itoa(f.monPort))
	cmd.Env = f.env
	agent := testutil.RunAgent(t, cmd)
	logs := agent.Log
	agent.WaitHealthy("127.0.0.1:"+strconv.Itoa(f.monPort), 30*time.Second)

	file := filepath.Join(f.home, "lines.txt")
	if err := os.WriteFile(file, []byte("one\ntwo\r\nthree\n\nfive without newline"), 0o644); err != nil {
		t.Fatal(err)
	}
	headers := filepath.Join(f.home, "headers")
	if err := os.WriteFile(headers, []byte("host = web01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := f.avroClient(t, "", "-F", file, "-R", headers); !strings.Contains(out, "5 events sent") {
		t.Errorf("avro-client -F: %s", out)
	}
	// sluice flume-ng ... is the same launcher; standard input by default.
	cmd = exec.Command(testutil.AgentBinary(t), "flume-ng", "avro-client", "-H", "127.0.0.1", "-p", strconv.Itoa(f.port))
	cmd.Stdin = strings.NewReader("from stdin\n")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "1 events sent") {
		t.Fatalf("sluice flume-ng avro-client: %v\n%s", err, out)
	}
	agent.Stop(30 * time.Second)
	got := f.delivered(t)
	want := "{host=web01} one\n{host=web01} two\n{host=web01} three\n{host=web01} \n{host=web01} five without newline\n{} from stdin\n"
	if got != want {
		t.Errorf("delivered:\n%q\nwant:\n%q", got, want)
	}
	for _, note := range []string{"flume-ng: reading " + filepath.Join(f.conf, "flume-env.sh"), "JVM option -Xms100m is ignored",
		"-Xmx sets the Go heap's soft limit to 512 MiB", "agent started"} {
		if logs.Count(note) != 1 {
			t.Errorf("log lacks (once) %q:\n%s", note, logs.String())
		}
	}
}

// TestFlumeInitScript: a Flume init script's exact start line (Bigtop's
// argument list, LOGFILE logging, monitoring on a port) runs sluice through
// the flume-ng link unchanged; its stop (SIGTERM, wait) stops it cleanly.
func TestFlumeInitScript(t *testing.T) {
	f := newFlumeFixture(t)
	logDir, runDir := filepath.Join(f.home, "log"), filepath.Join(f.home, "run")
	defaults := filepath.Join(f.home, "flume-agent.default")
	if err := os.WriteFile(defaults, []byte(fmt.Sprintf("FLUME_HOME=%s\nFLUME_CONF_DIR=%s\nFLUME_LOG_DIR=%s\nFLUME_RUN_DIR=%s\nFLUME_MONITORING_PORT=%d\n",
		f.home, f.conf, logDir, runDir, f.monPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("testdata/flume/flume-agent.init")
	if err != nil {
		t.Fatal(err)
	}
	initd := func(action string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", script, action)
		cmd.Env = append(f.env, "FLUME_DEFAULTS="+defaults)
		out, err := cmd.CombinedOutput()
		if err != nil && action != "status" {
			t.Fatalf("init script %s: %v\n%s", action, err, out)
		}
		return string(out)
	}
	initd("start")
	pidFile := filepath.Join(runDir, "flume-agent-agent.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	testutil.WaitFor(t, 30*time.Second, "the agent healthy", func() bool { return testutil.Healthy("127.0.0.1:" + strconv.Itoa(f.monPort)) })
	if out := initd("status"); !strings.Contains(out, "is running") {
		t.Errorf("status: %s", out)
	}
	f.avroClient(t, "a\nb\n")
	if out := initd("stop"); !strings.Contains(out, "Stopped Flume agent agent") {
		t.Fatalf("stop: %s", out)
	}
	if got := f.delivered(t); got != "{} a\n{} b\n" {
		t.Errorf("delivered %q", got)
	}
	log, err := os.ReadFile(filepath.Join(logDir, "flume.log"))
	if err != nil {
		t.Fatalf("LOGFILE: %v", err)
	}
	if !strings.Contains(string(log), "agent started") || !strings.Contains(string(log), "agent stopped") {
		t.Errorf("flume.log:\n%s", log)
	}
	outFile, _ := os.ReadFile(filepath.Join(logDir, "flume-agent-agent.out"))
	if !strings.Contains(string(outFile), "logging to "+filepath.Join(logDir, "flume.log")) {
		t.Errorf("the launcher's notes go to the .out file:\n%s", outFile)
	}
}
