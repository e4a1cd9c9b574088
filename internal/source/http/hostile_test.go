package httpsource

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newSourceLogged(t *testing.T, props map[string]string) (*Source, *testutil.LogBuffer) {
	t.Helper()
	var logs testutil.LogBuffer
	env := sourcetest.Env("r1", "http")
	env.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	return sourcetest.New(t, New, env, sourcetest.Loopback(props)).(*Source), &logs
}

func counter(s *Source, name string) int64 { return s.counters.Counter(name).Load() }

func jsonEvents(n int, ev string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(ev)
	}
	b.WriteByte(']')
	return b.String()
}

// TestDecodeCost: what scanShape's cost says decoding may allocate is at
// least what it allocates, on the fast path and on encoding/json's, for
// each shape of request: the budget is taken before the bytes are.
func TestDecodeCost(t *testing.T) {
	many := `{"headers":{`
	var hs []string
	for i := range 40 {
		hs = append(hs, fmt.Sprintf(`"header%02d":"value%d"`, i, i))
	}
	many += strings.Join(hs, ",") + `},"body":"x"}`
	cases := map[string]string{
		"tiny":       `{"body":"x"}`,
		"empty":      `{}`,
		"one header": `{"headers":{"a":"b"},"body":"x"}`,
		"3 headers":  `{"headers":{"host":"web-01","app":"nginx","k":"v"},"body":"GET /index.html 200"}`,
		"40 headers": many,
		"numbers":    `{"headers":{"n":12345,"t":true},"body":-1.5e3}`,
		"escapes":    `{"headers":{"k\n":"\u00e9\"x\""},"body":"tab\tnew\nline \ud83d\ude00"}`,
		"big body":   `{"body":"` + strings.Repeat("y", 100000) + `"}`,
		// Keys the fast decoder leaves to encoding/json.
		"other key": `{"headers":{"a":"b"},"body":"x","timestamp":"1"}`,
		"case":      `{"Body":"x","HEADERS":{"a":"b"}}`,
	}
	for name, ev := range cases {
		n := 1000
		if name == "big body" {
			n = 10
		}
		data := []byte(jsonEvents(n, ev))
		sh := scanShape(data)
		if sh.events != n {
			t.Errorf("%s: scanShape counted %d events, want %d", name, sh.events, n)
		}
		cost := sh.cost(len(data))
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		_, fastOK := decodeFast(data, sh.events)
		runtime.ReadMemStats(&m1)
		if got := int64(m1.TotalAlloc - m0.TotalAlloc); fastOK && got > cost {
			t.Errorf("%s: the fast decoder allocated %d bytes, over the estimate %d", name, got, cost)
		}
		runtime.GC()
		runtime.ReadMemStats(&m0)
		if _, err := decodeGeneral(data, "utf-8"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		runtime.ReadMemStats(&m1)
		if got := int64(m1.TotalAlloc - m0.TotalAlloc); got > generalFactor*cost {
			t.Errorf("%s: encoding/json allocated %d bytes, over %d × the estimate %d", name, got, generalFactor, cost)
		}
	}
}

// TestMemoryBudget: a request with more to decode than maxBytesInFlight is
// refused with 413 before it is decoded; requests arriving while others
// hold the budget get 503 with Retry-After, and go through once those end.
func TestMemoryBudget(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100000, 10000, time.Second)
	s, logs := newSourceLogged(t, map[string]string{"maxRequestBytes": "1000000", "maxBytesInFlight": "2600000"})
	start(t, s, pl.Processor)
	url := "http://" + s.Addr().String()

	// 60,000 tiny events in 780 KB: small on the wire, about 5 MB to decode.
	code, body := send(t, http.DefaultClient, "POST", url, "", jsonEvents(60000, `{"body":"x"}`))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "maxBytesInFlight") {
		t.Fatalf("a request too large to decode: %d %q, want 413 naming maxBytesInFlight", code, body)
	}
	if n := pl.Channel.Len(); n != 0 {
		t.Fatalf("the refused request put %d events", n)
	}

	// Two requests that announce 1 MB each and send it slowly hold 2 MB.
	var holders []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n[")
		holders = append(holders, c)
	}
	if !testutil.Eventually(func() bool { return s.inFlight() >= 2000000 }, 5*time.Second) {
		t.Fatalf("in flight %d bytes, want the two announced bodies", s.inFlight())
	}
	req, _ := http.NewRequest("POST", url, strings.NewReader(jsonEvents(10000, `{"body":"honest"}`)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a request while the budget is held: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	for _, c := range holders {
		c.Close()
	}
	if !testutil.Eventually(func() bool { return s.inFlight() == 0 }, 5*time.Second) {
		t.Fatalf("in flight %d bytes after the holders left", s.inFlight())
	}
	if code, body := send(t, http.DefaultClient, "POST", url, "", jsonEvents(10000, `{"body":"honest"}`)); code != 200 {
		t.Fatalf("the retry: %d %q, want 200", code, body)
	}
	if counter(s, "RequestTooLargeCount") != 1 || counter(s, "OverBudgetCount") != 1 {
		t.Errorf("RequestTooLargeCount %d, OverBudgetCount %d; want 1 and 1", counter(s, "RequestTooLargeCount"), counter(s, "OverBudgetCount"))
	}
	if logs.Count("answered 413") != 1 || logs.Count("answered 503 with Retry-After") != 1 {
		t.Errorf("want one warning each for the 413 and the 503:\n%s", logs)
	}
}

// TestRejectsLoggedThrottled: 100 bad requests from a client are each
// answered 400, counted, and told in one warning with the peer.
func TestRejectsLoggedThrottled(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s, logs := newSourceLogged(t, nil)
	start(t, s, pl.Processor)
	url := "http://" + s.Addr().String()
	for range 100 {
		if code, _ := send(t, http.DefaultClient, "POST", url, "", `[{"body":`); code != 400 {
			t.Fatalf("status %d, want 400", code)
		}
	}
	if n := counter(s, "BadRequestCount"); n != 100 {
		t.Errorf("BadRequestCount %d, want 100", n)
	}
	if n := logs.Count("could not read; answered 400"); n != 1 {
		t.Errorf("%d warnings for 100 bad requests within the throttle interval, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "peer=127.0.0.1:") {
		t.Errorf("the warning lacks its level or the peer:\n%s", logs)
	}
}

// TestHonestServedWhileIdleHeld: with more idle connections held than
// maxConnections, an honest request is answered.
func TestHonestServedWhileIdleHeld(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, map[string]string{"maxConnections": "20"})
	start(t, s, pl.Processor)
	for range 25 {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if !testutil.Eventually(func() bool { return s.counters.OpenConnection.Load() == 20 }, 5*time.Second) {
		t.Fatalf("OpenConnectionCount %d, want 20", s.counters.OpenConnection.Load())
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	if code, body := send(t, client, "POST", "http://"+s.Addr().String(), "", `[{"body":"honest"}]`); code != 200 {
		t.Fatalf("honest request: %d %q", code, body)
	}
}

// TestTrickleClosed: a body sent a byte at a time is cut after the progress
// timeout (the old 60 s read timeout let it run a minute).
func TestTrickleClosed(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, map[string]string{"progressTimeout": "300", "minBytesPerSecond": "100"})
	start(t, s, pl.Processor)
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	go func() {
		for range 100 {
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = bufio.NewReader(c).ReadString('\n')
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the trickling request was not cut: %v", err)
	}
	if n := counter(s, "ConnectionTooSlowCount"); n != 1 {
		t.Errorf("ConnectionTooSlowCount %d, want 1", n)
	}
}

// TestStoppingAnswers503: once the agent closed the source's processor, a
// request is answered 503 (nothing kept, send again) and its connection is
// closed.
func TestStoppingAnswers503(t *testing.T) {
	pl := sourcetest.NewPipeline(t, 100, 100, time.Second)
	s := newSource(t, nil)
	start(t, s, pl.Processor)
	if err := pl.Processor.(*flow.ChannelProcessor).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "http://"+s.Addr().String(), strings.NewReader(`[{"body":"late"}]`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, close %v, Retry-After %q; want 503, the connection closed, Retry-After", resp.StatusCode, resp.Close, resp.Header.Get("Retry-After"))
	}
	if n := pl.Channel.Len(); n != 0 {
		t.Errorf("%d events put after the processor closed", n)
	}
	_ = strconv.Itoa
}
