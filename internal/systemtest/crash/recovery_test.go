package crash

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

// avroCollector is a Flume Avro collector the test can take away and bring
// back on the same port.
type avroCollector struct {
	addr     string
	received atomic.Int64

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func (c *avroCollector) Append(context.Context, event.Event) avrorpc.Status {
	c.received.Add(1)
	return avrorpc.OK
}

func (c *avroCollector) AppendBatch(_ context.Context, evs []event.Event) avrorpc.Status {
	c.received.Add(int64(len(evs)))
	return avrorpc.OK
}

func (c *avroCollector) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	c.mu.Lock()
	c.ln, c.conns = ln, map[net.Conn]bool{}
	c.mu.Unlock()
	srv := &avrorpc.Server{Handler: c}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			c.conns[conn] = true
			c.mu.Unlock()
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				_ = srv.ServeConn(context.Background(), conn)
				conn.Close()
			}()
		}
	}()
}

// down closes the listener and every connection, as a avroCollector that
// stops does.
func (c *avroCollector) down() {
	c.mu.Lock()
	c.ln.Close()
	for conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// TestSinkOutageLines runs the real agent with an avro sink whose
// avroCollector goes away for a few seconds while events keep coming, then
// comes back. The log tells the outage once, in order, and nothing of it
// after it ended: the sink's first failure at WARN, one summary of the
// failures held back, then "delivering again" with how long it lasted and
// how many attempts failed, and none of the runner's own lines at WARN
// (the sink told it). Every acknowledged event reaches the avroCollector.
func TestSinkOutageLines(t *testing.T) {
	col := &avroCollector{addr: "127.0.0.1:0"}
	col.up(t)
	defer func() { col.down() }()
	dir := t.TempDir()
	port := testutil.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	_, colPort, _ := net.SplitHostPort(col.addr)
	conf := filepath.Join(dir, "a.properties")
	testutil.WriteFile(t, conf, fmt.Sprintf(`a1.sources = r1
a1.channels = c1
a1.sinks = k1
a1.sources.r1.type = avro
a1.sources.r1.bind = 127.0.0.1
a1.sources.r1.port = %d
a1.sources.r1.channels = c1
a1.channels.c1.type = memory
a1.sinks.k1.type = avro
a1.sinks.k1.hostname = 127.0.0.1
a1.sinks.k1.port = %s
a1.sinks.k1.channel = c1
`, port, colPort))
	p := startAgent(t, conf)
	if err := testutil.WaitAccepting(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sent := 0
	send := func() {
		t.Helper()
		if st, err := sendOne(addr, uint64(sent)); err != nil || st != avrorpc.OK {
			t.Fatalf("send %d: %v %v", sent, st, err)
		}
		sent++
	}
	send()
	testutil.WaitFor(t, 10*time.Second, "the first event at the avroCollector", func() bool { return col.received.Load() == 1 })

	col.down()
	outage := time.Now()
	for time.Since(outage) < 6*time.Second {
		send()
		time.Sleep(200 * time.Millisecond)
	}
	col.up(t)
	testutil.WaitFor(t, 20*time.Second, "every event at the avroCollector", func() bool { return col.received.Load() >= int64(sent) })
	t.Logf("%d events sent, %d received; outage %v", sent, col.received.Load(), time.Since(outage).Round(time.Millisecond))
	time.Sleep(time.Second) // anything the outage would still say after it ended
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}

	var seq []string
	for _, rec := range p.Log.Records("") {
		msg, _ := rec["msg"].(string)
		lvl, _ := rec["level"].(string)
		switch {
		case lvl == "DEBUG":
		case rec["runner"] == "k1" && lvl != "INFO":
			seq = append(seq, lvl+" runner: "+msg)
		case rec["component"] != "k1":
		case msg == "avro sink: delivery failed; the events stay in the channel and will be sent again":
			seq = append(seq, "WARN failed")
			if lvl != "WARN" {
				t.Errorf("first failure at %s, want WARN", lvl)
			}
		case msg == "avro sink: delivery failed; the events stay in the channel and will be sent again (repeated)":
			seq = append(seq, "WARN summary")
			if num(rec, "failures") < 2 || rec["failing_for"] == nil {
				t.Errorf("summary without failures and failing_for: %v", rec)
			}
		case msg == "avro sink: delivering again":
			seq = append(seq, "INFO recovered")
			if num(rec, "failures") < 2 || rec["recovered_after"] == nil || rec["addr"] != col.addr {
				t.Errorf("recovery line %v: want failures, recovered_after and the avroCollector's address", rec)
			}
		default:
			seq = append(seq, lvl+" "+msg)
		}
	}
	want := []string{"WARN failed", "WARN summary", "INFO recovered"}
	if fmt.Sprint(seq) != fmt.Sprint(want) {
		t.Fatalf("the sink's lines over the outage:\n%q\nwant %q", seq, want)
	}
}
