package avrosink

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// avsc (npm) is an Avro RPC implementation independent of Java's and
// sluice's. scripts/test.sh installs it with
//
//	npm install --prefix "$(go env GOPATH)/sluice-test-peers/npm" avsc@5.7.9
//
// The test looks in $SLUICE_NPM_PEERS, then there. Outside CI a missing
// node or avsc skips it.
func avscModules(t *testing.T) (node, modules string) {
	t.Helper()
	skip := func(msg string) {
		msg += `; install it with npm install --prefix "$(go env GOPATH)/sluice-test-peers/npm" avsc@5.7.9 (scripts/test.sh does)`
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node not found")
	}
	dir := os.Getenv("SLUICE_NPM_PEERS")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err != nil {
			skip("go env GOPATH: " + err.Error())
		}
		dir = filepath.Join(filepath.SplitList(strings.TrimSpace(string(out)))[0], "sluice-test-peers", "npm")
	}
	modules = filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "avsc", "package.json")); err != nil {
		skip("avsc not found in " + modules)
	}
	return node, modules
}

// avscServer runs testdata/avsc_server.js and collects the events it prints.
type avscServer struct {
	port   string
	stderr testutil.LogBuffer
	mu     sync.Mutex
	got    []avscEvent
}

type avscEvent struct {
	Call    string            `json:"call"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

func startAvsc(t *testing.T) *avscServer {
	t.Helper()
	node, modules := avscModules(t)
	portFile := filepath.Join(t.TempDir(), "port")
	cmd := exec.Command(node, "testdata/avsc_server.js", portFile)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &avscServer{}
	cmd.Stderr = &s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e avscEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("avsc server printed %q: %v", sc.Text(), err)
				continue
			}
			s.mu.Lock()
			s.got = append(s.got, e)
			s.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = cmd.Wait()
	})
	if !testutil.Eventually(func() bool {
		b, err := os.ReadFile(portFile)
		s.port = strings.TrimSpace(string(b))
		return err == nil && s.port != ""
	}, 10*time.Second) {
		t.Fatalf("the avsc server did not start: %s", s.stderr.String())
	}
	return s
}

func (s *avscServer) events() []avscEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]avscEvent(nil), s.got...)
}

// TestDeliversIntoAvscServer: the avsc server answers the sink's first
// handshake with NONE followed by an error response; the sink resends with
// its protocol text, as Java's Requestor does, and delivers every event with
// its headers (before, it failed with "bytes after a NONE handshake
// response" and reconnected for ever).
func TestDeliversIntoAvscServer(t *testing.T) {
	srv := startAvsc(t)
	src := sourcetest.NewPipeline(t, 10000, 1000, 50*time.Millisecond)
	k := newSink(t, src.Channel, srv.port, map[string]string{"batch-size": "100"})
	const n = 1000
	put(t, src, "avsc", n)
	deadline := time.Now().Add(20 * time.Second)
	for src.Channel.Len() > 0 {
		if _, err := k.Process(context.Background()); err != nil {
			t.Fatalf("Process: %v\n%s", err, srv.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still in the channel", src.Channel.Len())
		}
	}
	var got []avscEvent
	if !testutil.Eventually(func() bool { got = srv.events(); return len(got) >= n }, 5*time.Second) {
		t.Fatalf("the avsc server received %d of %d events", len(got), n)
	}
	if len(got) != n {
		t.Fatalf("the avsc server received %d events, want %d", len(got), n)
	}
	for i, e := range got {
		body, err := base64.StdEncoding.DecodeString(e.Body)
		if err != nil || string(body) != fmt.Sprintf("avsc%d", i) || e.Headers["seq"] != strconv.Itoa(i) || e.Call != "appendBatch" {
			t.Fatalf("event %d: %+v (body %q)", i, e, body)
		}
	}
}
