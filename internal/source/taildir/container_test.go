package taildirsource

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// criLine is one record as containerd writes it.
func criLine(ts time.Time, stream string, partial bool, text string) string {
	tag := "F"
	if partial {
		tag = "P"
	}
	return ts.UTC().Format(time.RFC3339Nano) + " " + stream + " " + tag + " " + text + "\n"
}

// dockerLine is one record as dockerd's json-file driver writes it.
func dockerLine(ts time.Time, stream, log string) string {
	return `{"log":` + strconv.Quote(log) + `,"stream":"` + stream + `","time":"` + ts.UTC().Format(time.RFC3339Nano) + `"}` + "\n"
}

var t0 = time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.UTC)

func newContainerFixture(t *testing.T, format string, extra map[string]string) *fixture {
	props := map[string]string{"format": format, "filegroups.g1": ""}
	for k, v := range extra {
		props[k] = v
	}
	fx := newFixture(t, props)
	if fx.props["filegroups.g1"] == "" {
		fx.props["filegroups.g1"] = fx.dir + `/[0-9]+\.log`
	}
	return fx
}

func header(t *testing.T, e event.Event, k, want string) {
	t.Helper()
	if got, ok := e.Headers.Get(k); !ok || got != want {
		t.Fatalf("header %s = %q (present %v), want %q; headers %v", k, got, ok, want, e.Headers)
	}
}

func TestCRIFile(t *testing.T) {
	fx := newContainerFixture(t, "cri", nil)
	fx.append("0.log", criLine(t0, "stdout", false, "one")+
		criLine(t0.Add(time.Millisecond), "stdout", true, "two ")+
		criLine(t0.Add(2*time.Millisecond), "stderr", false, "err")+
		criLine(t0.Add(3*time.Millisecond), "stdout", true, "and ")+
		criLine(t0.Add(4*time.Millisecond), "stdout", false, "half"))
	fx.start()
	got := fx.expect("one", "err", "two and half")
	header(t, got[0], "stream", "stdout")
	header(t, got[0], "time", "2024-05-01T10:00:00.123456789Z")
	header(t, got[0], "timestamp", strconv.FormatInt(t0.UnixMilli(), 10))
	header(t, got[1], "stream", "stderr")
	// A joined line has its first record's time.
	header(t, got[2], "time", t0.Add(time.Millisecond).Format(time.RFC3339Nano))
	if _, ok := got[2].Headers.Get(pieceHeader); ok {
		t.Fatal("a joined line is marked as a piece")
	}
	if n := testutil.Metric(fx.src.counters.Set, "JoinedLineCount"); n != "1" {
		t.Fatalf("JoinedLineCount = %s, want 1", n)
	}

	// A line's last piece written later joins what came before.
	fx.append("0.log", criLine(t0, "stdout", true, "wait"))
	fx.expect()
	fx.append("0.log", criLine(t0, "stdout", false, "ed"))
	fx.expect("waited")
	fx.stop()
	fx.start()
	fx.expect()
}

func TestDockerFile(t *testing.T) {
	fx := newContainerFixture(t, "docker", map[string]string{"fileHeader": "true", "byteOffsetHeader": "true"})
	long := strings.Repeat("x", 16384)
	first := dockerLine(t0, "stdout", long)
	fx.append("0.log", first+dockerLine(t0, "stderr", "err\n")+dockerLine(t0.Add(time.Second), "stdout", "end\n"))
	fx.start()
	got := fx.expect("err", long+"end")
	header(t, got[0], "stream", "stderr")
	header(t, got[1], "time", t0.Format(time.RFC3339Nano))
	header(t, got[1], "file", fx.path("0.log"))
	header(t, got[1], "byteoffset", "0")
	header(t, got[0], "byteoffset", strconv.Itoa(len(first)))
}

func TestAutoFormat(t *testing.T) {
	fx := newContainerFixture(t, "auto", nil)
	fx.append("1.log", criLine(t0, "stdout", true, "cri ")+criLine(t0, "stdout", false, "line"))
	fx.append("2.log", dockerLine(t0, "stdout", "docker ")+dockerLine(t0, "stdout", "line\n"))
	fx.append("3.log", "a plain line\n")
	fx.start()
	fx.expectUnordered("a plain line", "cri line", "docker line")
}

func TestBadRecord(t *testing.T) {
	fx := newContainerFixture(t, "cri", nil)
	fx.append("0.log", criLine(t0, "stdout", false, "ok")+"not a record\n"+criLine(t0, "stdout", false, "ok again"))
	fx.start()
	got := fx.expect("ok", "not a record", "ok again")
	if !strings.Contains(got[1].Headers.Value(formatErrorHeader), "not a cri record") {
		t.Fatalf("headers %v", got[1].Headers)
	}
	if _, ok := got[1].Headers.Get("stream"); ok {
		t.Fatal("a bad record has a stream")
	}
	if n := testutil.Metric(fx.src.counters.Set, "BadRecordCount"); n != "1" {
		t.Fatalf("BadRecordCount = %s", n)
	}
	if !strings.Contains(fx.logs.String(), "not a record of its file's format") {
		t.Fatalf("not logged: %s", fx.logs)
	}
}

// TestLongLineInPieces: a line longer than maxLineLength comes in pieces
// of at most that, with the linePiece headers; a UTF-8 character cut
// across records is whole in the event.
func TestLongLineInPieces(t *testing.T) {
	fx := newContainerFixture(t, "cri", map[string]string{"maxLineLength": "10"})
	fx.append("0.log", criLine(t0, "stdout", true, "abcd日")[:len(criLine(t0, "stdout", true, "abcd日"))-2]+"\n"+
		criLine(t0, "stdout", true, "\xa5efgh")+criLine(t0, "stdout", false, "ijklmnopq")+
		criLine(t0, "stdout", false, "short"))
	fx.start()
	// Cut at record boundaries where it can be, never inside a character.
	got := fx.expect("abcd", "日efgh", "ijklmnopq", "short")
	for i, want := range []string{"1", "2", "3"} {
		header(t, got[i], pieceHeader, want)
		header(t, got[i], lastPieceHeader, strconv.FormatBool(i == 2))
	}
	if n := testutil.Metric(fx.src.counters.Set, "SplitLineCount"); n != "1" {
		t.Fatalf("SplitLineCount = %s", n)
	}
}

// TestPartialSentWhenIdle: a container that ended without a newline
// leaves a P record (containerd #4813); it is sent once the file is idle.
func TestPartialSentWhenIdle(t *testing.T) {
	fx := newContainerFixture(t, "cri", map[string]string{"idleTimeout": "300"})
	fx.append("0.log", criLine(t0, "stdout", false, "a")+criLine(t0, "stdout", true, "no newline"))
	fx.start()
	fx.expect("a")
	got := fx.pl.Drain(t, 1, 5*time.Second)
	if sourcetest.Bodies(got)[0] != "no newline" {
		t.Fatalf("got %q", sourcetest.Bodies(got))
	}
	fx.expect()
}

// TestRecordsExactlyOnceAcrossStops: interleaved streams, lines in pieces,
// batches of one event and restarts between them: every line once.
func TestRecordsExactlyOnceAcrossStops(t *testing.T) {
	fx := newContainerFixture(t, "cri", map[string]string{"batchSize": "1", "maxBatchCount": "1", "maxLineLength": "12"})
	var b strings.Builder
	var want []string
	for i := range 40 {
		switch i % 4 {
		case 0:
			b.WriteString(criLine(t0, "stdout", true, fmt.Sprintf("out%d-", i)))
			b.WriteString(criLine(t0, "stderr", false, fmt.Sprintf("err%d", i)))
			b.WriteString(criLine(t0, "stdout", false, "end"))
			want = append(want, fmt.Sprintf("err%d", i), fmt.Sprintf("out%d-end", i))
		case 1:
			b.WriteString(criLine(t0, "stdout", true, "0123456789"))
			b.WriteString(criLine(t0, "stdout", false, fmt.Sprintf("x%d", i)))
			if i < 10 {
				want = append(want, fmt.Sprintf("0123456789x%d", i)) // 12 bytes: whole
			} else {
				want = append(want, "0123456789", fmt.Sprintf("x%d", i)) // two pieces
			}
		default:
			b.WriteString(criLine(t0, "stderr", false, fmt.Sprintf("line%d", i)))
			want = append(want, fmt.Sprintf("line%d", i))
		}
	}
	fx.append("0.log", b.String())
	// Each run puts a few batches, then the agent closes the intake and
	// stops the source: positions land inside joined lines, between the
	// pieces of a long line, and between events cut from one clean point.
	for round := 0; ; round++ {
		if round > 2*len(want) {
			t.Fatalf("not done after %d restarts: %q", round, sourcetest.Bodies(fx.pl.Take(t, 1000, 100*time.Millisecond)))
		}
		gate := &countingGate{inner: fx.pl.Processor, allow: int64(1 + round%3)}
		fx.startWith(gate)
		done := !testutil.Eventually(func() bool { return gate.refused.Load() > 0 }, 500*time.Millisecond)
		fx.stop()
		if done {
			break
		}
	}
	got := sourcetest.Bodies(fx.pl.Take(t, 1000, 300*time.Millisecond))
	if !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// countingGate lets allow puts through, then refuses the others as a
// closed intake does.
type countingGate struct {
	inner   flow.Processor
	allow   int64
	puts    atomic.Int64
	refused atomic.Int64
}

func (g *countingGate) Process(ctx context.Context, events []event.Event) error {
	if g.puts.Add(1) > g.allow {
		g.refused.Add(1)
		return fmt.Errorf("source r1: %w", flow.ErrStopping)
	}
	return g.inner.Process(ctx, events)
}

// TestPartialAcrossRotation: the last record of 0.log is a P piece, the
// kubelet renames 0.log away and the runtime writes the F piece in the new
// 0.log: the line is one event, and once it is committed the rotated file
// is dropped from the positions.
func TestPartialAcrossRotation(t *testing.T) {
	fx := newContainerFixture(t, "cri", map[string]string{"idleTimeout": "500"})
	fx.append("0.log", criLine(t0, "stdout", false, "before")+criLine(t0, "stderr", true, "split ")+criLine(t0, "stdout", false, "after P"))
	fx.start()
	fx.expect("before", "after P")
	if err := os.Rename(fx.path("0.log"), fx.path("0.log.20240501-100000")); err != nil {
		t.Fatal(err)
	}
	fx.append("0.log", criLine(t0, "stdout", false, "new")+criLine(t0, "stderr", false, "line")+criLine(t0, "stdout", false, "next"))
	got := fx.expect("new", "split line", "next")
	header(t, got[1], "time", t0.Format(time.RFC3339Nano))
	if !testutil.Eventually(func() bool {
		ps := readPositions(t, fx.pos)
		return len(ps) == 1 && ps[0].File == fx.path("0.log")
	}, 5*time.Second) {
		t.Fatalf("positions %+v, want the new 0.log only", readPositions(t, fx.pos))
	}
	fx.stop()
	fx.start()
	fx.expect()
}

// TestPartialAcrossRotationAndStop: as above, with the agent stopped
// between the rotation and the F piece: the rotated file's rest is kept in
// a spill file naming its successor, and the next start joins the line,
// once.
func TestPartialAcrossRotationAndStop(t *testing.T) {
	fx := newContainerFixture(t, "cri", nil)
	fx.append("0.log", criLine(t0, "stdout", false, "before")+criLine(t0, "stdout", true, "split "))
	gate := fx.startGated()
	fx.expect("before")
	if err := os.Rename(fx.path("0.log"), fx.path("0.log.20240501-100000")); err != nil {
		t.Fatal(err)
	}
	fx.append("0.log", "") // the runtime opens the new file
	if !testutil.Eventually(func() bool {
		ps := readPositions(t, fx.pos)
		return len(ps) == 2
	}, 5*time.Second) {
		t.Fatalf("the new file was not found: %+v", readPositions(t, fx.pos))
	}
	gate.closed.Store(true)
	fx.stop()
	spills, _ := filepath.Glob(fx.pos + ".spill-*")
	if len(spills) != 1 {
		t.Fatalf("spill files %v", spills)
	}
	// The kubelet compresses the rotated file while the agent is down.
	if err := os.Remove(fx.path("0.log.20240501-100000")); err != nil {
		t.Fatal(err)
	}
	fx.append("0.log", criLine(t0, "stdout", false, "line")+criLine(t0, "stdout", false, "next"))
	fx.start()
	fx.expect("split line", "next")
	if !testutil.Eventually(func() bool {
		m, _ := filepath.Glob(fx.pos + ".spill-*")
		return len(m) == 0
	}, 5*time.Second) {
		t.Fatal("the spill file was not deleted")
	}
	fx.stop()
	fx.start()
	fx.expect()
}

// TestRestartIsNotAContinuation: a container restart writes 1.log; the P
// piece 0.log ends with is not joined to 1.log's first line, but sent
// when 0.log is idle.
func TestRestartIsNotAContinuation(t *testing.T) {
	fx := newContainerFixture(t, "cri", map[string]string{"idleTimeout": "300"})
	fx.append("0.log", criLine(t0, "stdout", true, "crashed mid-line"))
	fx.start()
	fx.append("1.log", criLine(t0, "stdout", false, "restarted"))
	got := sourcetest.Bodies(fx.pl.Drain(t, 2, 5*time.Second))
	if !slices.Equal(got, []string{"restarted", "crashed mid-line"}) {
		t.Fatalf("got %q", got)
	}
}

// podDir makes /<base>/<ns>_<pod>_<uid>/<container> and returns it.
func podDir(t *testing.T, base, ns, pod, uid, container string) string {
	t.Helper()
	d := filepath.Join(base, ns+"_"+pod+"_"+uid, container)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestPodsComeAndGo: a file group over /var/log/pods/*/* finds pods as
// their directories appear, reads a deleted pod's files to their end, and
// drops their positions.
func TestPodsComeAndGo(t *testing.T) {
	fx := newContainerFixture(t, "cri", map[string]string{"kubernetesMetadata": "path", "idleTimeout": "300"})
	pods := fx.dir
	fx.props["filegroups.g1"] = pods + `/*/*/[0-9]+\.log`
	a := podDir(t, pods, "shop", "web-0", "uid-a", "nginx")
	appendTo(t, filepath.Join(a, "0.log"), criLine(t0, "stdout", false, "a1"))
	fx.start()
	got := fx.expect("a1")
	header(t, got[0], "k8s.namespace", "shop")
	header(t, got[0], "k8s.pod", "web-0")
	header(t, got[0], "k8s.pod.uid", "uid-a")
	header(t, got[0], "k8s.container", "nginx")
	header(t, got[0], "k8s.restart", "0")

	b := podDir(t, pods, "shop", "web-1", "uid-b", "nginx")
	appendTo(t, filepath.Join(b, "2.log"), criLine(t0, "stdout", false, "b1"))
	got = fx.expect("b1")
	header(t, got[0], "k8s.restart", "2")
	appendTo(t, filepath.Join(a, "0.log"), criLine(t0, "stdout", false, "a2"))
	fx.expect("a2")

	// The pod goes: its last line, written just before, still arrives.
	appendTo(t, filepath.Join(a, "0.log"), criLine(t0, "stdout", false, "a3"))
	if err := os.RemoveAll(filepath.Dir(a)); err != nil {
		t.Fatal(err)
	}
	fx.pl.Drain(t, 1, 5*time.Second)
	if !testutil.Eventually(func() bool {
		ps := readPositions(t, fx.pos)
		return len(ps) == 1 && ps[0].File == filepath.Join(b, "2.log")
	}, 10*time.Second) {
		t.Fatalf("positions %+v, want the live pod's only", readPositions(t, fx.pos))
	}
}

// TestContainersLinks: the /var/log/containers names (links to the pod
// files) give the pod, namespace, container and container id, and the
// target the uid; writes behind the link are found by polling.
func TestContainersLinks(t *testing.T) {
	fx := newContainerFixture(t, "cri", map[string]string{"kubernetesMetadata": "path"})
	base := filepath.Dir(fx.dir)
	links := filepath.Join(base, "containers")
	if err := os.Mkdir(links, 0o755); err != nil {
		t.Fatal(err)
	}
	fx.props["filegroups.g1"] = links + `/.*\.log`
	d := podDir(t, filepath.Join(base, "pods"), "shop", "web-0", "uid-a", "nginx")
	target := filepath.Join(d, "0.log")
	appendTo(t, target, criLine(t0, "stdout", false, "one"))
	id := strings.Repeat("ab", 32)
	if err := os.Symlink(target, filepath.Join(links, "web-0_shop_nginx-"+id+".log")); err != nil {
		t.Fatal(err)
	}
	fx.start()
	got := fx.expect("one")
	header(t, got[0], "k8s.pod", "web-0")
	header(t, got[0], "k8s.namespace", "shop")
	header(t, got[0], "k8s.container", "nginx")
	header(t, got[0], "k8s.container.id", id)
	header(t, got[0], "k8s.pod.uid", "uid-a")
	header(t, got[0], "k8s.restart", "0")
	appendTo(t, target, criLine(t0, "stdout", false, "two"))
	fx.expect("two")
}

// TestKubeletLabels: kubernetesMetadata = kubelet adds the labels and
// annotations asked for from the kubelet's /pods; when the kubelet is down
// or slow the lines go on with path metadata only, counted.
func TestKubeletLabels(t *testing.T) {
	body, err := os.ReadFile("../../kubelet/testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	var down, slow atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			select {
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
			}
			return
		}
		if down.Load() {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	fx := newContainerFixture(t, "cri", map[string]string{
		"kubernetesMetadata": "kubelet", "kubernetesMetadata.kubeletURL": srv.URL,
		"kubernetesMetadata.labels": "app team", "kubernetesMetadata.annotations": "prometheus.io/scrape",
		"kubernetesMetadata.refreshInterval": "1000", "kubernetesMetadata.timeout": "200",
	})
	pods := fx.dir
	fx.props["filegroups.g1"] = pods + `/*/*/[0-9]+\.log`
	d := podDir(t, pods, "shop", "web-0", "9d4f2b17-6c0e-4a8b-b3f1-7e5a2c9d0f64", "nginx")
	appendTo(t, filepath.Join(d, "2.log"), criLine(t0, "stdout", false, "labelled"))
	fx.start()
	got := fx.expect("labelled")
	header(t, got[0], "k8s.label.app", "web")
	header(t, got[0], "k8s.label.team", "checkout")
	header(t, got[0], "k8s.annotation.prometheus.io/scrape", "true")
	header(t, got[0], "k8s.node", "node-1")
	header(t, got[0], "k8s.pod", "web-0")
	if _, ok := got[0].Headers.Get("k8s.label.controller-revision-hash"); ok {
		t.Fatal("a label not asked for")
	}

	// A pod the kubelet does not list: path metadata only, counted.
	other := podDir(t, pods, "shop", "gone-0", "uid-unknown", "app")
	appendTo(t, filepath.Join(other, "0.log"), criLine(t0, "stdout", false, "unknown pod"))
	got = fx.expect("unknown pod")
	header(t, got[0], "k8s.pod", "gone-0")
	if _, ok := got[0].Headers.Get("k8s.label.app"); ok {
		t.Fatal("labels for a pod the kubelet does not list")
	}
	if n := testutil.Metric(fx.src.counters.Set, "KubeletMissCount"); n != "1" {
		t.Fatalf("KubeletMissCount = %s", n)
	}

	// Slow, then refusing: lines go on at once.
	slow.Store(true)
	time.Sleep(1500 * time.Millisecond)
	t1 := time.Now()
	appendTo(t, filepath.Join(other, "0.log"), criLine(t0, "stdout", false, "while slow"))
	fx.expect("while slow")
	if d := time.Since(t1); d > 2*time.Second {
		t.Fatalf("a line took %v with a slow kubelet", d)
	}
	slow.Store(false)
	down.Store(true)
	appendTo(t, filepath.Join(d, "2.log"), criLine(t0, "stdout", false, "while down"))
	got = fx.expect("while down")
	header(t, got[0], "k8s.label.app", "web") // still known from before
	if !testutil.Eventually(func() bool {
		n, _ := strconv.Atoi(testutil.Metric(fx.src.counters.Set, "KubeletRequestFail"))
		return n >= 2
	}, 10*time.Second) {
		t.Fatal("failed requests not counted")
	}
	if !strings.Contains(fx.logs.String(), "cannot get the pods from the kubelet") {
		t.Fatalf("not logged: %s", fx.logs)
	}
}

func TestContainerFormatProperties(t *testing.T) {
	for _, c := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{"format": "json"}, "is not one of line, cri, docker, auto"},
		{map[string]string{"format.g2": "cri"}, `file group "g2" is not listed`},
		{map[string]string{"format.g1": "cri-o"}, "is not one of"},
		{map[string]string{"kubernetesMetadata": "api"}, "is not one of none, path, kubelet"},
		{map[string]string{"kubernetesMetadata": "kubelet", "kubernetesMetadata.kubeletURL": "10.0.0.1:10250"}, "not http:// or https://"},
		{map[string]string{"kubernetesMetadata": "kubelet", "kubernetesMetadata.caFile": "/nonexistent/ca.crt"}, "no such file"},
		{map[string]string{"filegroups.g1": `/var/log/pods/[/.*\.log`}, "not a valid wildcard pattern"},
	} {
		props := map[string]string{"filegroups": "g1", "filegroups.g1": "/tmp/x.log", "positionFile": filepath.Join(t.TempDir(), "p.json")}
		for k, v := range c.props {
			props[k] = v
		}
		p := config.FromMap("a1.sources.r1.", props)
		_, _ = New(sourcetest.Env("r1", "taildir"), p) // the error is p.Err's, checked next
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.props, err, c.want)
		}
	}
}
