package tcpsink

import (
	"bufio"
	"net"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// TestSinkSuite runs the sink contract against a line server on loopback
// that refuses by going away: its listener and connections close (the sink
// sees the close, then a refused connection) until it listens again on the
// same port. A TCP write completes into the kernel's buffers and the line
// protocol has no acknowledgement to wait for, so nothing can hold a
// delivery unanswered: the cancel test does not apply.
func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		ls := newLineServer(t)
		host, port, _ := net.SplitHostPort(ls.addr)
		s, err := New(env, config.FromMap("a1.sinks.k1.", map[string]string{
			"hostname": host, "port": port}))
		if err != nil {
			t.Fatal(err)
		}
		return s, sinktest.Downstream{Delivered: ls.lines.Get, Refuse: ls.down, Accept: ls.up,
			Note: "a TCP write completes into the kernel's buffers and the line protocol has no acknowledgement to hold back"}
	})
}

// lineServer collects the lines its connections send; down closes the
// listener and every connection, up listens again on the same address.
type lineServer struct {
	t     *testing.T
	addr  string
	lines sinktest.Bodies

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newLineServer(t *testing.T) *lineServer {
	ls := &lineServer{t: t, addr: "127.0.0.1:0", conns: map[net.Conn]bool{}}
	ls.up()
	t.Cleanup(func() {
		ls.down()
		ls.wg.Wait()
	})
	return ls
}

func (ls *lineServer) up() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", ls.addr)
	if err != nil {
		ls.t.Errorf("listen again on %s: %v", ls.addr, err)
		return
	}
	ls.ln, ls.addr = ln, ln.Addr().String()
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ls.mu.Lock()
			if ls.ln != ln { // went down meanwhile
				ls.mu.Unlock()
				c.Close()
				continue
			}
			ls.conns[c] = true
			ls.mu.Unlock()
			ls.wg.Add(1)
			go func() {
				defer ls.wg.Done()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					ls.lines.Add(sc.Text())
				}
				c.Close()
				ls.mu.Lock()
				delete(ls.conns, c)
				ls.mu.Unlock()
			}()
		}
	}()
}

func (ls *lineServer) down() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ln != nil {
		ls.ln.Close()
		ls.ln = nil
	}
	for c := range ls.conns {
		c.Close()
	}
}
