package filechannel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
)

// mountTmpfs mounts a tmpfs of the given size (mount(8)'s syntax, "20m")
// for the test and unmounts it at the end; it skips the test where
// mounting is not allowed (not root, no CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func resizeTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("grow the tmpfs: %v: %s", err, out)
	}
}

// copyDir copies the regular files of src into dst: a picture of the
// directory as a crash at this moment would leave it.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if rel == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A file channel on a real 20 MB filesystem with minimumRequiredSpace 0
// runs into ENOSPC: puts fail (pushed back as a full channel) and keep
// failing fast, /healthz's reason says the disk is full, takes and their
// commits go on. When the filesystem grows to 200 MB the channel takes
// puts again by itself, without a restart. Every acknowledged event is
// taken exactly once, no refused event ever appears, and the log as a
// crash would leave it replays cleanly to exactly the events not taken.
func TestDiskFullOnRealFilesystem(t *testing.T) {
	mnt := mountTmpfs(t, "20m")
	d := dirs{ck: filepath.Join(mnt, "ck"), data: filepath.Join(mnt, "data")}
	props := map[string]string{"minimumRequiredSpace": "0", "checkpointInterval": "600000",
		"capacity": "100000", "transactionCapacity": "1000", "maxFileSize": "4194304", "keep-alive": "0"}
	c, reg := build(t, d, props)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)

	body := strings.Repeat("x", 4000)
	acked := map[string]bool{}
	var refused []string
	put := func(prefix string, tx int) error {
		evs := testutil.Events(prefix, 50)
		for i := range evs {
			evs[i].Body = fmt.Appendf(nil, "%s-%d-%d-%s", prefix, tx, i, body)
		}
		err := testutil.PutCommit(c, evs)
		for _, e := range evs {
			if err == nil {
				acked[string(e.Body)] = true
			} else {
				refused = append(refused, string(e.Body))
			}
		}
		return err
	}
	var err error
	tx := 0
	for ; tx < 1000; tx++ { // 20 MB is about 100 transactions of 200 KB
		if err = put("fill", tx); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("put %d on a full disk: %v, want ENOSPC pushed back as a full channel", tx, err)
	}
	t.Logf("disk full after %d acknowledged transactions", tx)
	for i := range 3 {
		t0 := time.Now()
		if err := put("refused", i); !errors.Is(err, flow.ErrChannelFull) {
			t.Fatalf("put while full: %v", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("a refused put took %v", d)
		}
	}
	if h := c.Health(); h == nil || !strings.Contains(h.Error(), "out of disk space") || !strings.Contains(h.Error(), d.data) {
		t.Fatalf("Health while the disk is full: %v", h)
	}
	if m := metricsOf(reg); m["Unhealthy"] != "1" {
		t.Fatalf("Unhealthy = %s while the disk is full", m["Unhealthy"])
	}
	taken := map[string]int{}
	take := func(n int) {
		t.Helper()
		for _, e := range testutil.TakeAll(t, c, n, 100, 100*time.Millisecond) {
			taken[string(e.Body)]++
		}
	}
	take(1000) // the take commits cannot be written now; they must not fail

	resizeTmpfs(t, mnt, "200m")
	testutil.WaitFor(t, 10*time.Second, "the channel healthy after the disk grew", func() bool { return c.Health() == nil })
	for i := range 20 {
		if err := put("after", i); err != nil {
			t.Fatalf("put after space returned: %v", err)
		}
	}
	take(500)
	// The log as a crash now would leave it.
	crashed := dirs{ck: filepath.Join(t.TempDir(), "ck"), data: filepath.Join(t.TempDir(), "data")}
	copyDir(t, d.data, crashed.data)
	copyDir(t, d.ck, crashed.ck)

	take(len(acked))
	for k := range acked {
		if taken[k] != 1 {
			t.Fatalf("acknowledged event %.20s... taken %d times", k, taken[k])
		}
	}
	for _, k := range refused {
		if taken[k] != 0 {
			t.Fatalf("refused event %.20s... was taken", k)
		}
	}
	if len(taken) != len(acked) {
		t.Fatalf("%d distinct events taken, %d acknowledged", len(taken), len(acked))
	}

	// Replay of the crash picture, without its checkpoint: exactly the
	// events not taken by then (plus the newest takesInFlight takes, which
	// may repeat), and no damage.
	os.RemoveAll(crashed.ck)
	c2, reg2 := build(t, crashed, props)
	if err := c2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c2)
	got := testutil.TakeAll(t, c2, len(acked), 1000, 100*time.Millisecond)
	m := metricsOf(reg2)
	if m["RecoveryLostEventCount"] != "0" || m["LogDamagedRegionCount"] != "0" {
		t.Fatalf("replay after the outage: RecoveryLostEventCount %s LogDamagedRegionCount %s",
			m["RecoveryLostEventCount"], m["LogDamagedRegionCount"])
	}
	left := len(acked) - 1500
	if len(got) < left || len(got) > left+takesInFlight*100 {
		t.Fatalf("replay gave back %d events, want the %d not taken (and at most the newest %d takes of 100 again)", len(got), left, takesInFlight)
	}
	for _, e := range got {
		if !acked[string(e.Body)] {
			t.Fatalf("replay gave back an event never acknowledged: %.20s...", e.Body)
		}
	}
}

func TestMain(m *testing.M) { testutil.Main(m) }

// agent is the real sluice binary running a config.
type agent struct {
	*testutil.AgentProcess
	http string // monitoring address
}

func startAgent(t *testing.T, conf string) *agent {
	t.Helper()
	file := filepath.Join(t.TempDir(), "agent.properties")
	testutil.WriteFile(t, file, conf)
	a := &agent{http: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	a.AgentProcess = testutil.StartAgent(t, testutil.AgentBinary(t), file, "--http", a.http, "--log-format", "json")
	// /healthz answers while the agent starts ("agent a1 is starting"):
	// wait until it describes the started agent, healthy or not.
	a.WaitUntil(20*time.Second, "the agent's HTTP endpoint, once started", func() bool {
		_, body, err := a.get("/healthz")
		return err == nil && !strings.Contains(body, "is starting")
	})
	return a
}

func (a *agent) get(path string) (int, string, error) {
	resp, err := http.Get("http://" + a.http + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (a *agent) metric(t *testing.T, component, name string) string {
	t.Helper()
	_, body, err := a.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]string
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return m[component][name]
}

// postBatch sends n events to the agent's http source and returns the
// status code.
func postBatch(t *testing.T, port int, prefix string, n int, body string) (int, []string) {
	t.Helper()
	type ev struct {
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	evs := make([]ev, n)
	var bodies []string
	for i := range evs {
		evs[i].Body = fmt.Sprintf("%s-%d-%s", prefix, i, body)
		bodies = append(bodies, evs[i].Body)
	}
	b, _ := json.Marshal(evs)
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/", port), "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, bodies
}

func diskFullConfig(port int, mnt, out, minSpace string) string {
	c := fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = http
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = file
a1.channels.c1.checkpointDir = %s/ck
a1.channels.c1.dataDirs = %s/data
a1.channels.c1.maxFileSize = 4194304
a1.channels.c1.checkpointInterval = 600000
a1.channels.c1.keep-alive = 0
a1.sinks.k1.type = file_roll
a1.sinks.k1.channel = c1
a1.sinks.k1.sink.directory = %s
a1.sinks.k1.sink.rollInterval = 0
a1.sinks.k1.sink.batchSize = 100
`, port, mnt, mnt, out)
	if minSpace != "" {
		c += "a1.channels.c1.minimumRequiredSpace = " + minSpace + "\n"
	}
	return c
}

// delivered reads the bodies the file_roll sink wrote, counting each.
func delivered(t *testing.T, dir string) map[string]int {
	t.Helper()
	got := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			got[sc.Text()]++
		}
		fh.Close()
	}
	return got
}

// The real agent, an http source into a file channel on a 20 MB tmpfs
// (minimumRequiredSpace 0) and a file_roll sink elsewhere: the disk fills,
// requests get 503 and /healthz answers 503 with the reason, Unhealthy is
// 1; the sink keeps draining without sending anything twice (a failed take
// commit used to make it resend the same batch in a loop). The tmpfs grows
// to 200 MB: /healthz answers 200 and requests are accepted, with no
// restart. At the end every acknowledged event was delivered exactly once
// and no refused one at all.
func TestDiskFullThroughTheAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent")
	}
	mnt := mountTmpfs(t, "20m")
	out := t.TempDir()
	port := testutil.FreePort(t)
	a := startAgent(t, diskFullConfig(port, mnt, out, "0"))
	if code, body, _ := a.get("/healthz"); code != 200 {
		t.Fatalf("/healthz at start: %d %s", code, body)
	}
	body := strings.Repeat("y", 4000)
	acked := map[string]bool{}
	var refused []string
	send := func(prefix string) int {
		code, bodies := postBatch(t, port, prefix, 50, body)
		for _, b := range bodies {
			if code == 200 {
				acked[b] = true
			} else {
				refused = append(refused, b)
			}
		}
		return code
	}
	full := false
	for i := 0; i < 1000 && !full; i++ {
		switch code := send(fmt.Sprintf("fill%d", i)); code {
		case 200:
		case 503:
			full = true
		default:
			t.Fatalf("request %d answered %d", i, code)
		}
	}
	if !full {
		t.Fatal("the 20 MB disk never filled")
	}
	code, reason, _ := a.get("/healthz")
	if code != 503 || !strings.Contains(reason, "channel c1") || !strings.Contains(reason, "out of disk space") {
		t.Fatalf("/healthz with the disk full: %d %q", code, reason)
	}
	if u := a.metric(t, "CHANNEL.c1", "Unhealthy"); u != "1" {
		t.Fatalf("Unhealthy = %s with the disk full", u)
	}
	for i := range 3 {
		if code := send(fmt.Sprintf("refused%d", i)); code != 503 {
			t.Fatalf("request while full answered %d", code)
		}
	}
	// The sink drains what was acknowledged, once, while the disk is full.
	testutil.WaitFor(t, 30*time.Second, "the sink delivering every acknowledged event during the outage", func() bool {
		return len(delivered(t, out)) >= len(acked)
	})
	for k, n := range delivered(t, out) {
		if n != 1 {
			t.Fatalf("event %.20s... delivered %d times during the outage", k, n)
		}
	}
	// No take commit failed: a failed one rolls back and the sink sends
	// the batch again.
	if f := a.metric(t, "SINK.k1", "ChannelReadFail"); f != "0" {
		t.Fatalf("ChannelReadFail = %s: take commits failed during the outage", f)
	}

	resizeTmpfs(t, mnt, "200m")
	testutil.WaitFor(t, 10*time.Second, "/healthz 200 after the disk grew", func() bool {
		code, _, _ := a.get("/healthz")
		return code == 200
	})
	if u := a.metric(t, "CHANNEL.c1", "Unhealthy"); u != "0" {
		t.Fatalf("Unhealthy = %s after the disk grew", u)
	}
	for i := range 20 {
		if code := send(fmt.Sprintf("after%d", i)); code != 200 {
			t.Fatalf("request after space returned answered %d", code)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the sink delivering the rest", func() bool {
		return len(delivered(t, out)) >= len(acked)
	})
	a.Stop(60 * time.Second)
	got := delivered(t, out)
	for k := range acked {
		if got[k] != 1 {
			t.Fatalf("acknowledged event %.20s... delivered %d times", k, got[k])
		}
	}
	for _, k := range refused {
		if got[k] != 0 {
			t.Fatalf("refused event %.20s... delivered", k)
		}
	}
	if len(got) != len(acked) {
		t.Fatalf("%d distinct events delivered, %d acknowledged", len(got), len(acked))
	}
	t.Logf("%d events acknowledged and delivered once each; %d refused while the disk was full", len(acked), len(refused))
	// The outage in the log, as every failure streak is told: the first
	// failure, a summary of the rest right before the recovery, and
	// nothing about it after the recovery.
	var seq []string
	sc := bufio.NewScanner(strings.NewReader(a.Log.String()))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		switch msg, _ := rec["msg"].(string); msg {
		case "wal: write failed; appends are refused until the log recovers":
			seq = append(seq, "ERROR failed")
		case "wal: write failed; appends are refused until the log recovers (repeated)":
			seq = append(seq, "ERROR summary")
		case "wal: recovered; appends accepted again":
			seq = append(seq, fmt.Sprintf("%v recovered", rec["level"]))
			if rec["recovered_after"] == nil || rec["failures"] == nil {
				t.Errorf("recovery line without recovered_after and failures: %v", rec)
			}
		}
	}
	if strings.Join(seq, ", ") != "ERROR failed, ERROR summary, INFO recovered" && strings.Join(seq, ", ") != "ERROR failed, INFO recovered" {
		t.Errorf("the WAL's lines about the outage: %v, want its first failure, a summary, then its recovery", seq)
	}
	t.Logf("LOG:\n%s", a.Log.String())
}

// With Flume's default minimumRequiredSpace (500 MB) on a 20 MB disk the
// agent says so at start (WARN, both numbers, how to fix), /healthz answers
// 503 with the reason, and requests are refused with 503.
func TestMinimumRequiredSpaceAboveFreeSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent")
	}
	mnt := mountTmpfs(t, "20m")
	port := testutil.FreePort(t)
	a := startAgent(t, diskFullConfig(port, mnt, t.TempDir(), ""))
	code, reason, _ := a.get("/healthz")
	if code != 503 || !strings.Contains(reason, "minimumRequiredSpace 524288000 bytes") {
		t.Fatalf("/healthz: %d %q", code, reason)
	}
	if code, _ := postBatch(t, port, "x", 1, "x"); code != 503 {
		t.Fatalf("a request answered %d", code)
	}
	a.Stop(60 * time.Second)
	var warns int
	for _, line := range strings.Split(a.Log.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "less free space than minimumRequiredSpace") &&
			!strings.Contains(line, "(repeated)") { // the streak's summary at the stop
			warns++
			if !strings.Contains(line, `"minimumRequiredSpace":"524288000 bytes (500.0 MiB)"`) ||
				!strings.Contains(line, `"free":"`) || !strings.Contains(line, "lowered") {
				t.Errorf("the warning lacks a number or the fix: %s", line)
			}
		}
	}
	if warns != 1 {
		t.Fatalf("%d startup warnings about minimumRequiredSpace, want 1:\n%s", warns, a.Log.String())
	}
}
