package hdfssink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
)

// versityBinary finds VersityGW, the real S3 server these tests write to
// (scripts/test.sh installs it).
func versityBinary(t testing.TB) string {
	t.Helper()
	return testutil.PeerBinary(t, "versitygw", "SLUICE_VERSITYGW", "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0")
}

const (
	s3Access = "sluice-test"
	s3Secret = "sluice-test-secret"
	s3Bucket = "flume"
)

// versity is a VersityGW serving a local directory on loopback.
type versity struct {
	t        testing.TB
	bin      string
	root     string
	addr     string
	cmd      *exec.Cmd
	exited   chan struct{}
	endpoint string
}

func startVersity(t testing.TB) *versity {
	t.Helper()
	v := &versity{t: t, bin: versityBinary(t), root: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	if err := os.MkdirAll(filepath.Join(v.root, s3Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	v.endpoint = "http://" + v.addr
	v.start()
	t.Cleanup(v.stop)
	return v
}

func (v *versity) start() {
	v.t.Helper()
	v.cmd = exec.Command(v.bin, "--port", v.addr, "--access", s3Access, "--secret", s3Secret, "posix", v.root)
	v.cmd.Stdout, v.cmd.Stderr = io.Discard, io.Discard
	if err := v.cmd.Start(); err != nil {
		v.t.Fatal(err)
	}
	v.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(v.cmd, v.exited)
	c := v.client()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.BucketExists(ctx, s3Bucket)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("versitygw did not come up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (v *versity) stop() {
	if v.cmd != nil && v.cmd.Process != nil {
		v.cmd.Process.Signal(syscall.SIGKILL)
		<-v.exited
		v.cmd = nil
	}
}

func (v *versity) client() *minio.Client {
	c, err := minio.New(v.addr, &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		v.t.Fatal(err)
	}
	return c
}

// objects returns every object under prefix with its contents.
func (v *versity) objects(prefix string) map[string][]byte {
	v.t.Helper()
	c := v.client()
	out := map[string][]byte{}
	for o := range c.ListObjects(context.Background(), s3Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			v.t.Fatal(o.Err)
		}
		r, err := c.GetObject(context.Background(), s3Bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			v.t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			v.t.Fatal(err)
		}
		out[o.Key] = b
	}
	return out
}

// uploads counts multipart uploads in progress (or aborted but listed).
func (v *versity) uploads() int {
	v.t.Helper()
	core := minio.Core{Client: v.client()}
	res, err := core.ListMultipartUploads(context.Background(), s3Bucket, "", "", "", "", 1000)
	if err != nil {
		v.t.Fatal(err)
	}
	return len(res.Uploads)
}

func (v *versity) props(path string, extra map[string]string) map[string]string {
	p := map[string]string{
		"hdfs.path": "s3a://" + s3Bucket + "/" + path, "fs.s3a.endpoint": v.endpoint,
		"fs.s3a.access.key": s3Access, "fs.s3a.secret.key": s3Secret, "fs.s3a.path.style.access": "true",
		"hdfs.fileType": "DataStream", "hdfs.rollInterval": "0",
	}
	for k, val := range extra {
		p[k] = val
	}
	return p
}

// lines splits DataStream objects into their events and checks every
// body appears exactly once.
func checkExactlyOnce(t *testing.T, objs map[string][]byte, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, b := range objs {
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if l != "" {
				seen[l]++
			}
		}
	}
	var missing, dup []string
	for i := range n {
		k := "event-" + strconv.Itoa(i)
		switch seen[k] {
		case 0:
			missing = append(missing, k)
		case 1:
		default:
			dup = append(dup, k)
		}
	}
	if len(missing) > 0 || len(dup) > 0 || len(seen) != n {
		t.Fatalf("%d distinct events in %d objects; missing %d %v; duplicated %d %v", len(seen), len(objs), len(missing), first(missing), len(dup), first(dup))
	}
}

func flowEnv() flow.Env { return flow.Env{} }

func first(s []string) []string { return s[:min(len(s), 5)] }

// TestS3ObjectsAppearRolled writes through the sink into VersityGW:
// objects appear under the expanded path with Flume's names, each rolled
// at rollCount, every event exactly once, and nothing staged is left.
func TestS3ObjectsAppearRolled(t *testing.T) {
	v := startVersity(t)
	staging := filepath.Join(t.TempDir(), "staging")
	w := startWriter(t, v.props("logs/%{host}/%Y", map[string]string{"hdfs.rollCount": "100", "hdfs.timeZone": "UTC", "hdfs.stagingDir": staging}))
	for b := range 10 {
		if err := w.Write(context.Background(), events(b*50, 50, 1339502074000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	objs := v.objects("")
	if len(objs) != 5 {
		t.Fatalf("%d objects, want 5 of 100 events", len(objs))
	}
	re := regexp.MustCompile(`^logs/web1/2012/FlumeData\.\d{13}$`)
	var keys []string
	for k, b := range objs {
		if !re.MatchString(k) {
			t.Fatalf("object %q", k)
		}
		if n := bytes.Count(b, []byte{'\n'}); n != 100 {
			t.Fatalf("%s holds %d events, want 100", k, n)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if first := string(objs[keys[0]][:8]); first != "event-0\n" {
		t.Fatalf("first object starts %q", first)
	}
	checkExactlyOnce(t, objs, 500)
	if left := files(t, staging); len(left) != 1 || left[0] != "lock" {
		t.Fatalf("staging left %v", left)
	}
}

// TestS3Multipart rolls a file past fs.s3a.multipart.threshold, so it goes
// up in 5 MiB parts, and the object is whole.
func TestS3Multipart(t *testing.T) {
	v := startVersity(t)
	w := startWriter(t, v.props("big", map[string]string{"hdfs.rollCount": "0", "hdfs.rollSize": "0",
		"fs.s3a.multipart.size": "5M", "fs.s3a.multipart.threshold": "6M"}))
	n := 0
	body := bytes.Repeat([]byte{'x'}, 1000)
	for range 12 {
		evs := make([]event.Event, 1000)
		for i := range evs {
			evs[i] = event.Event{Body: append([]byte("event-"+strconv.Itoa(n)+" "), body...)}
			n++
		}
		if err := w.Write(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	objs := v.objects("big/")
	if len(objs) != 1 {
		t.Fatalf("%d objects", len(objs))
	}
	for _, b := range objs {
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != n || !strings.HasPrefix(lines[n-1], "event-"+strconv.Itoa(n-1)+" ") {
			t.Fatalf("%d lines in a %d-byte object", len(lines), len(b))
		}
	}
	if u := v.uploads(); u != 0 {
		t.Fatalf("%d multipart uploads left", u)
	}
}

// TestS3ResumesMultipartAfterCrash leaves what a crash in the middle of a
// multipart upload leaves: a staged file, its journal record with the
// upload id and one part, and a second upload of the same key that the
// crashed run started without recording. The next start completes the
// recorded upload, aborts the other, and removes the staging file.
func TestS3ResumesMultipartAfterCrash(t *testing.T) {
	v := startVersity(t)
	staging := filepath.Join(t.TempDir(), "staging")
	props := v.props("resume", map[string]string{"hdfs.stagingDir": staging, "fs.s3a.multipart.size": "5M", "fs.s3a.multipart.threshold": "5M"})
	s := newTestSink(t, flowEnv(), props)
	st := s.w.store.(*s3Store)

	j, err := openJournal(staging)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 0; want.Len() < 11<<20; i++ {
		fmt.Fprintf(&want, "event-%d %s\n", i, strings.Repeat("y", 500))
	}
	rec := &record{ID: j.newID(), Store: st.String(), Target: "resume/FlumeData.1", Staged: true, Closed: true,
		Format: format{Type: dataStream}}
	rec.InUse = j.stagingPath(rec.ID)
	if err := os.WriteFile(rec.InUse, want.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := st.core.NewMultipartUpload(ctx, s3Bucket, rec.Target, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := st.core.PutObjectPart(ctx, s3Bucket, rec.Target, id, 1, bytes.NewReader(want.Bytes()[:5<<20]), 5<<20, minio.PutObjectPartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.Upload = &upload{ID: id, PartSize: 5 << 20, Parts: []part{{Number: 1, ETag: p1.ETag, Size: 5 << 20}}}
	if err := j.put(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := st.core.NewMultipartUpload(ctx, s3Bucket, rec.Target, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	j.close()
	if u := v.uploads(); u != 2 {
		t.Fatalf("setup: %d uploads", u)
	}

	if err := s.w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	objs := v.objects("resume/")
	if !bytes.Equal(objs["resume/FlumeData.1"], want.Bytes()) {
		t.Fatalf("object has %d bytes, want %d", len(objs["resume/FlumeData.1"]), want.Len())
	}
	if u := v.uploads(); u != 0 {
		t.Fatalf("%d multipart uploads left", u)
	}
	if _, err := os.Stat(rec.InUse); !os.IsNotExist(err) {
		t.Fatalf("staging file left: %v", err)
	}
}

// TestS3Outage takes the S3 server away while batches keep coming: writes
// go on into staging, uploads back off and retry, and once the server is
// back every event is in exactly one object. SLUICE_LONG=1 makes the
// outage 30 s (the figure); the default run uses 3 s.
func TestS3Outage(t *testing.T) {
	outage := 3 * time.Second
	if os.Getenv("SLUICE_LONG") != "" {
		outage = 30 * time.Second
	}
	v := startVersity(t)
	w := startWriter(t, v.props("outage", map[string]string{"hdfs.rollCount": "50", "hdfs.retryInterval": "2"}))
	n := 0
	write := func(batches int) {
		for range batches {
			if err := w.Write(context.Background(), events(n, 25, 1)); err != nil {
				t.Fatal(err)
			}
			n += 25
		}
	}
	write(8)
	v.stop()
	end := time.Now().Add(outage)
	for time.Now().Before(end) {
		write(2)
		time.Sleep(outage / 10)
	}
	v.start()
	write(4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, v.objects("outage/"), n)
}

// TestS3PushbackAndHealth stops the S3 server: closed files pile up in
// staging until hdfs.maxPendingBytes, then Write refuses batches (they stay
// in the channel) and Health reports the store; once the server is back,
// the files go up, Write takes batches again and Health is clear.
func TestS3PushbackAndHealth(t *testing.T) {
	old := healthGrace
	healthGrace = 300 * time.Millisecond
	defer func() { healthGrace = old }()
	v := startVersity(t)
	w := startWriter(t, v.props("push", map[string]string{"hdfs.rollCount": "10", "hdfs.maxPendingBytes": "2000", "hdfs.retryInterval": "1"}))
	v.stop()
	n := 0
	var refused error
	for range 50 {
		if err := w.Write(context.Background(), events(n, 10, 1)); err != nil {
			refused = err
			break
		}
		n += 10
	}
	if refused == nil || !strings.Contains(refused.Error(), "wait to be finished") {
		t.Fatalf("Write never pushed back with the store down: %v", refused)
	}
	time.Sleep(500 * time.Millisecond)
	if err := w.Health(); err == nil || !strings.Contains(err.Error(), "cannot finish files") {
		t.Fatalf("Health with the store down for longer than the grace: %v", err)
	}
	v.start()
	deadline := time.Now().Add(20 * time.Second)
	for w.Write(context.Background(), events(n, 10, 1)) != nil {
		if time.Now().After(deadline) {
			t.Fatal("Write still refused 20 s after the store came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	n += 10
	if err := w.Health(); err != nil {
		t.Fatalf("Health after the store came back: %v", err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, v.objects("push/"), n)
}
