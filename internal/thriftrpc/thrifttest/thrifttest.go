// Package thrifttest runs Flume Thrift RPC peers written in Python for the
// thrift source's and sink's tests: Apache Thrift's Python library (Debian's
// python3-thrift) with code that Debian's thrift-compiler generates from
// sluice's flume.thrift at test time. They share no code with sluice's Go
// side but the IDL, so a test passing against them checks sluice speaks
// Flume's protocol, not merely agrees with itself.
//
// scripts/test.sh installs thrift-compiler and python3-thrift. Without
// them the tests skip, except under CI=true, where they fail.
package thrifttest

import (
	"bufio"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

//go:embed flume_client.py
var clientScript []byte

//go:embed flume_server.py
var serverScript []byte

// Python is the interpreter the peers run on: Debian's, which has Debian's
// python3-thrift (a python3 earlier on PATH, such as pyenv's, does not).
const Python = "/usr/bin/python3"

// Peer is a directory with the generated Python code and the peer scripts.
type Peer struct{ dir string }

// New generates the Python code from flume.thrift into a temporary
// directory, or skips (fails under CI) when the compiler or the library is
// missing.
func New(t testing.TB) *Peer {
	t.Helper()
	missing := func(msg string) {
		msg += "; install Debian's thrift-compiler and python3-thrift (scripts/test.sh does)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	thriftBin := testutil.SystemTool(t, "thrift", "thrift-compiler")
	if out, err := exec.Command(Python, "-c", "import thrift.protocol.TCompactProtocol").CombinedOutput(); err != nil {
		missing(fmt.Sprintf("%s cannot import thrift: %v: %s", Python, err, out))
	}
	_, self, _, _ := runtime.Caller(0)
	idl := filepath.Join(filepath.Dir(self), "..", "flume.thrift")
	dir := t.TempDir()
	if out, err := exec.Command(thriftBin, "--gen", "py", "-out", dir, idl).CombinedOutput(); err != nil {
		t.Fatalf("thrift --gen py: %v\n%s", err, out)
	}
	for name, b := range map[string][]byte{"flume_client.py": clientScript, "flume_server.py": serverScript} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &Peer{dir: dir}
}

// Call is one call a Python client makes.
type Call struct {
	Method string // "append" or "appendBatch"
	Events []event.Event
}

type wireEvent struct {
	Call    string            `json:"call,omitempty"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// Send runs a Python client that connects to addr with protocol ("compact"
// or "binary"), over TLS trusting caFile when it is not "", makes the calls
// and returns the Status name of each reply.
func (p *Peer) Send(t testing.TB, addr, protocol, caFile string, calls []Call) []string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(p.dir, "flume_client.py"), p.dir, host, port, protocol}
	if caFile != "" {
		args = append(args, caFile)
	}
	var in strings.Builder
	for _, c := range calls {
		line := struct {
			Call   string      `json:"call"`
			Events []wireEvent `json:"events"`
		}{Call: c.Method}
		for _, e := range c.Events {
			line.Events = append(line.Events, wireEvent{Headers: orEmpty(e.Headers), Body: base64.StdEncoding.EncodeToString(e.Body)})
		}
		b, _ := json.Marshal(line)
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := exec.Command(Python, args...)
	cmd.Stdin = strings.NewReader(in.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python thrift client: %v\n%s", err, stderr.String())
	}
	return strings.Fields(string(out))
}

func orEmpty(h event.Headers) map[string]string {
	m := h.Map()
	if m == nil {
		return map[string]string{}
	}
	return m
}

// Server is a running Python Thrift server standing in for a Flume thrift
// source.
type Server struct {
	Addr string

	mu     sync.Mutex
	events []Received
	stderr strings.Builder
}

// Received is an event a Server took, with the method it came in.
type Received struct {
	Method string
	event.Event
}

// ServerOptions configure a Server.
type ServerOptions struct {
	Protocol  string // "compact" (default) or "binary"
	FailFirst int    // reply FAILED to this many calls first
	// CertFile and KeyFile (PEM), when set, make it serve TLS.
	CertFile, KeyFile string
}

// Serve starts a Python server on a free loopback port; it stops at the end
// of the test.
func (p *Peer) Serve(t testing.TB, opt ServerOptions) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return p.ServeOnPort(t, strconv.Itoa(port), opt)
}

// ServeOnPort starts a Python server on 127.0.0.1:port.
func (p *Peer) ServeOnPort(t testing.TB, port string, opt ServerOptions) *Server {
	t.Helper()
	if opt.Protocol == "" {
		opt.Protocol = "compact"
	}
	args := []string{filepath.Join(p.dir, "flume_server.py"), p.dir, port, opt.Protocol, strconv.Itoa(opt.FailFirst)}
	if opt.CertFile != "" {
		args = append(args, opt.CertFile, opt.KeyFile)
	}
	cmd := exec.Command(Python, args...)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", port)}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = lockedWriter{&s.mu, &s.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if sc.Text() == "listening" {
				close(ready)
				continue
			}
			var w wireEvent
			if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
				t.Errorf("python thrift server printed %q: %v", sc.Text(), err)
				continue
			}
			body, err := base64.StdEncoding.DecodeString(w.Body)
			if err != nil {
				t.Errorf("python thrift server printed body %q: %v", w.Body, err)
			}
			s.mu.Lock()
			s.events = append(s.events, Received{Method: w.Call, Event: event.Event{Headers: event.HeadersOf(w.Headers), Body: body}})
			s.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = stdin.Close() // tells the peer to exit, awaited next
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = cmd.Wait()
	})
	select {
	case <-ready:
	case <-done:
		t.Fatalf("the python thrift server exited: %s", s.Stderr())
	case <-time.After(20 * time.Second):
		t.Fatalf("the python thrift server did not start: %s", s.Stderr())
	}
	return s
}

// Events returns what the server took so far, in order.
func (s *Server) Events() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.events...)
}

// Stderr is what the server wrote to stderr so far.
func (s *Server) Stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TLSFiles writes a self-signed certificate for localhost and 127.0.0.1
// and its key, each PEM, and returns their paths; the certificate is also
// its own CA.
func TLSFiles(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	return testutil.SelfSigned(t, "localhost", "127.0.0.1").Files(t)
}
