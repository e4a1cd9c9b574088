package hostile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
)

// BoundRSS is the agent's peak RSS under any mix of the table's inputs with
// default limits, as docs/operations.md ("Limits") states it.
const BoundRSS = 256 << 20

// result is one row of the table.
type result struct {
	input, response string
	peak            int64  // VmHWM during the row, bytes
	honest          string // "yes", "no", or "n/a"
	problems        []string
}

func (r *result) fail(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// honestLoop runs check every interval until stop is closed, and reports
// whether it succeeded at least once, and last time.
type honest struct {
	ok, fails atomic.Int64
	stop      chan struct{}
	done      chan struct{}
}

func startHonest(interval time.Duration, check func() bool) *honest {
	h := &honest{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			if check() {
				h.ok.Add(1)
			} else {
				h.fails.Add(1)
			}
			select {
			case <-h.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return h
}

// end stops the loop and says whether the honest client was served.
func (h *honest) end() string {
	close(h.stop)
	<-h.done
	if h.ok.Load() > 0 {
		return fmt.Sprintf("yes (%d of %d)", h.ok.Load(), h.ok.Load()+h.fails.Load())
	}
	return "no"
}

// tinyEvents is a JSON array of n events of one-byte bodies (13 bytes each).
func tinyEvents(n int) []byte {
	var b bytes.Buffer
	b.Grow(13*n + 2)
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"body":"x"}`)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// honestHTTP posts one small batch, retrying a 503 as its Retry-After says.
func honestHTTP(a *agent) func() bool {
	client := &http.Client{Timeout: 10 * time.Second}
	return func() bool {
		for range 5 {
			code, err := a.postJSON(client, []byte(`[{"headers":{"who":"honest"},"body":"hello"}]`))
			if err == nil && code == 200 {
				return true
			}
			if code != http.StatusServiceUnavailable {
				return false
			}
			time.Sleep(time.Second)
		}
		return false
	}
}

func honestAvro(a *agent) func() bool {
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c, err := avrorpc.Dial(ctx, a.addr("avro"), avrorpc.ClientConfig{ConnectTimeout: 10 * time.Second, RequestTimeout: 10 * time.Second})
		if err != nil {
			return false
		}
		defer c.Close()
		st, err := c.AppendBatch(ctx, []event.Event{{Body: []byte("honest")}})
		return err == nil && st == avrorpc.OK
	}
}

func honestNetcat(a *agent) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", a.addr("netcat"), 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("honest\n"))
		b := make([]byte, 3)
		_, err = io.ReadFull(c, b)
		return err == nil && string(b) == "OK\n"
	}
}

func honestSyslog(a *agent) func() bool {
	return func() bool {
		before := a.counter("syslogtcp", "EventAcceptedCount")
		c, err := net.DialTimeout("tcp", a.addr("syslogtcp"), 5*time.Second)
		if err != nil {
			return false
		}
		c.Write([]byte("<13>Jun 15 11:22:33 host app: honest\n"))
		c.Close()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if a.counter("syslogtcp", "EventAcceptedCount") > before {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
}

// rowHTTPTiny: n requests at once, each a JSON array of a million one-byte
// events (13 MB): refused before decoding (413), RSS bounded.
func rowHTTPTiny(t *testing.T, a *agent, n int) result {
	r := result{input: fmt.Sprintf("http: %d requests at once of 1,000,000 tiny events (13 MB)", n)}
	body := tinyEvents(1_000_000)
	h := startHonest(300*time.Millisecond, honestHTTP(a))
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 60 * time.Second}
			code, err := a.postJSON(client, body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				codes[0]++
				return
			}
			codes[code]++
		}()
	}
	wg.Wait()
	r.honest = h.end()
	r.response = describeCodes(codes)
	if codes[200] > 0 {
		r.fail("%d of the requests were accepted (%d events decoded)", codes[200], 1_000_000*codes[200])
	}
	return r
}

func describeCodes(codes map[int]int) string {
	var parts []string
	for _, c := range []int{200, 400, 413, 503, 0} {
		if codes[c] > 0 {
			name := fmt.Sprint(c)
			if c == 0 {
				name = "error"
			}
			parts = append(parts, fmt.Sprintf("%d× %s", codes[c], name))
		}
	}
	return strings.Join(parts, ", ")
}

// avroPack is the start of a pack with one frame of size bytes.
func avroPack(size int) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint32(b, 1)
	return binary.BigEndian.AppendUint32(b, uint32(size))
}

// rowAvroFrames: k connections each sending one frame of size bytes.
func rowAvroFrames(t *testing.T, a *agent, k, size int) result {
	r := result{input: fmt.Sprintf("avro: %d connections each sending one %d MB frame", k, size/1_000_000)}
	junk := make([]byte, size)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range junk {
		junk[i] = byte(rng.UintN(256))
	}
	before := map[string]int64{}
	for _, c := range []string{"OverBudgetCount", "BadDataCount"} {
		before[c] = a.counter("avro", c)
	}
	h := startHonest(500*time.Millisecond, honestAvro(a))
	start := time.Now()
	var wg sync.WaitGroup
	var closed atomic.Int64
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", a.addr("avro"), 5*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			c.Write(avroPack(size))
			c.Write(junk)
			if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	r.honest = h.end()
	r.response = fmt.Sprintf("%d of %d closed in %.1f s (%d over max-bytes-in-flight, %d bad data or over max-message-bytes)", closed.Load(), k, el.Seconds(),
		a.counter("avro", "OverBudgetCount")-before["OverBudgetCount"], a.counter("avro", "BadDataCount")-before["BadDataCount"])
	if closed.Load() != int64(k) {
		r.fail("%d connections were not closed", int64(k)-closed.Load())
	}
	return r
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rowAvroIdle: n idle connections held while an honest client sends.
func rowAvroIdle(t *testing.T, a *agent, n int) result {
	r := result{input: fmt.Sprintf("avro: %d idle connections", n)}
	before := a.counter("avro", "ConnectionEvictedCount")
	conns := dialMany(t, a.addr("avro"), n)
	defer closeAll(conns)
	time.Sleep(500 * time.Millisecond)
	open := a.counter("avro", "OpenConnectionCount")
	h := startHonest(200*time.Millisecond, honestAvro(a))
	time.Sleep(2 * time.Second)
	r.honest = h.end()
	r.response = fmt.Sprintf("%d held open (max-connections 1024), %d longest-idle closed to admit others", open,
		a.counter("avro", "ConnectionEvictedCount")-before)
	if !strings.HasPrefix(r.honest, "yes") {
		r.fail("the honest client was refused")
	}
	return r
}

// rowAvroTrickle: n connections each sending a pack one byte a second.
func rowAvroTrickle(t *testing.T, a *agent, n int, hold time.Duration) result {
	r := result{input: fmt.Sprintf("avro: %d connections sending 1 byte a second", n)}
	before := a.counter("avro", "ConnectionTooSlowCount") + a.counter("avro", "ConnectionEvictedCount")
	conns := dialMany(t, a.addr("avro"), n)
	defer closeAll(conns)
	pack := avroPack(1000)
	stop := make(chan struct{})
	var alive atomic.Int64
	go func() {
		for i := 0; ; i++ {
			var n int64
			for _, c := range conns {
				c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := c.Write(pack[i%len(pack) : i%len(pack)+1]); err == nil {
					n++
				}
			}
			alive.Store(n)
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	time.Sleep(time.Second)
	h := startHonest(time.Second, honestAvro(a))
	time.Sleep(hold)
	r.honest = h.end()
	close(stop)
	closed := a.counter("avro", "ConnectionTooSlowCount") + a.counter("avro", "ConnectionEvictedCount") - before
	r.response = fmt.Sprintf("%d of %d closed within %v (too slow, or closed to admit others)", closed, n, hold+time.Second)
	if closed < int64(n)*9/10 {
		r.fail("only %d trickling connections were closed", closed)
	}
	return r
}

// rowNetcatOverlong: n connections each sending an over-long line.
func rowNetcatOverlong(t *testing.T, a *agent, n int) result {
	r := result{input: fmt.Sprintf("netcat: %d connections sending an over-long line", n)}
	before := a.counter("netcat", "LineTooLongCount")
	logBefore := a.Log.Lines("longer than max-line-length")
	line := []byte(strings.Repeat("z", 600) + "\n")
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", a.addr("netcat"), 5*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(line)
			io.Copy(io.Discard, c)
		}()
	}
	wg.Wait()
	r.honest = okString(honestNetcat(a)())
	counted := a.counter("netcat", "LineTooLongCount") - before
	lines := a.Log.Lines("longer than max-line-length") - logBefore
	r.response = fmt.Sprintf("FAILED and closed; %d counted in LineTooLongCount, %d WARN lines", counted, lines)
	if counted != int64(n) {
		r.fail("LineTooLongCount rose by %d, want %d", counted, n)
	}
	if lines > 2 {
		r.fail("%d log lines for %d over-long lines: not throttled", lines, n)
	}
	return r
}

func okString(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// rowHTTP4xx: bad and oversized requests are answered, logged throttled,
// counted.
func rowHTTP4xx(t *testing.T, a *agent, n int) result {
	r := result{input: fmt.Sprintf("http: %d requests of bad JSON and %d over maxRequestBytes", n, n)}
	bad0, big0 := a.counter("http", "BadRequestCount"), a.counter("http", "RequestTooLargeCount")
	log400, log413 := a.Log.Lines("answered 400"), a.Log.Lines("answered 413")
	codes := map[int]int{}
	client := &http.Client{Timeout: 10 * time.Second}
	for range n {
		code, _ := a.postJSON(client, []byte(`[{"body":`))
		codes[code]++
		// Content-Length over maxRequestBytes (16 MiB): refused before reading.
		c, err := net.Dial("tcp", a.addr("http"))
		if err == nil {
			fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n[", 17<<20)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 12)
			if _, err := io.ReadFull(c, buf); err == nil && bytes.HasPrefix(buf, []byte("HTTP/1.1 413")) {
				codes[413]++
			}
			c.Close()
		}
	}
	r.honest = okString(honestHTTP(a)())
	bad, big := a.counter("http", "BadRequestCount")-bad0, a.counter("http", "RequestTooLargeCount")-big0
	l400, l413 := a.Log.Lines("answered 400")-log400, a.Log.Lines("answered 413")-log413
	r.response = fmt.Sprintf("%s; counted %d + %d; WARN lines %d + %d", describeCodes(codes), bad, big, l400, l413)
	if bad != int64(n) || big != int64(n) {
		r.fail("counters rose by %d and %d, want %d each", bad, big, n)
	}
	if l400 < 1 || l413 < 1 || l400 > 2 || l413 > 2 {
		r.fail("%d and %d log lines: want each reason told, throttled", l400, l413)
	}
	return r
}

// rowSyslogHostile: a 10 MB line, 1 MB of random bytes and a
// 1,000,000,000-byte octet count, each k times.
func rowSyslogHostile(t *testing.T, a *agent, k int) result {
	r := result{input: fmt.Sprintf("syslogtcp: a 10 MB line, 1 MB of random bytes, a 1,000,000,000-byte octet count (each %d×)", k)}
	over0, inv0 := a.counter("syslogtcp", "OversizeMessageCount"), a.counter("syslogtcp", "InvalidMessageCount")
	logOver, logInv := a.Log.Lines("longer than eventSize"), a.Log.Lines("without a valid <PRI> header")
	long := "<13>Jun 15 11:22:33 host app: " + strings.Repeat("z", 10<<20) + "\n"
	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	counted := "1000000000 <13>Jun 15 11:22:33 host app: " + strings.Repeat("c", 1<<20)
	var wg sync.WaitGroup
	for range k {
		for _, in := range [][]byte{[]byte(long), random, []byte(counted)} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.DialTimeout("tcp", a.addr("syslogtcp"), 5*time.Second)
				if err != nil {
					return
				}
				c.SetDeadline(time.Now().Add(time.Minute))
				c.Write(in)
				c.Close()
			}()
		}
	}
	wg.Wait()
	time.Sleep(time.Second)
	r.honest = okString(honestSyslog(a)())
	over, inv := a.counter("syslogtcp", "OversizeMessageCount")-over0, a.counter("syslogtcp", "InvalidMessageCount")-inv0
	lo, li := a.Log.Lines("longer than eventSize")-logOver, a.Log.Lines("without a valid <PRI> header")-logInv
	r.response = fmt.Sprintf("cut at eventSize and tagged; counted %d oversize, %d invalid; WARN lines %d + %d", over, inv, lo, li)
	if over < int64(2*k) || inv < 1 {
		r.fail("oversize %d, invalid %d: not counted", over, inv)
	}
	if lo < 1 || li < 1 || lo > 2 || li > 2 {
		r.fail("%d and %d log lines: want each reason told, throttled", lo, li)
	}
	return r
}

// rowSyslogUDPBursts: bursts of datagrams, as rsyslog sends once a second.
func rowSyslogUDPBursts(t *testing.T, a *agent, bursts, per int) result {
	r := result{input: fmt.Sprintf("syslogudp: %d bursts of %d datagrams, one a second", bursts, per), honest: "n/a"}
	drops0 := a.counter("syslogudp", "DatagramDropCount")
	acc0 := a.counter("syslogudp", "EventAcceptedCount")
	c, err := net.Dial("udp", a.addr("syslogudp"))
	if err != nil {
		r.fail("%v", err)
		return r
	}
	defer c.Close()
	msg := []byte("<13>Jun 15 11:22:33 host app: " + strings.Repeat("u", 200))
	for b := range bursts {
		for range per {
			c.Write(msg)
		}
		if b < bursts-1 {
			time.Sleep(time.Second)
		}
	}
	total := int64(bursts * per)
	deadline := time.Now().Add(10 * time.Second)
	var acc, drops int64
	for time.Now().Before(deadline) {
		acc, drops = a.counter("syslogudp", "EventAcceptedCount")-acc0, a.counter("syslogudp", "DatagramDropCount")-drops0
		if acc+drops >= total {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.response = fmt.Sprintf("%d of %d delivered, %d dropped (counted)", acc, total, drops)
	if acc+drops != total {
		r.fail("delivered %d + dropped %d != %d sent: a loss is not counted", acc, drops, total)
	}
	return r
}
