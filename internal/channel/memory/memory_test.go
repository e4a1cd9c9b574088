package memorychannel

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

func newChannel(t testing.TB, m map[string]string) (*Channel, *metrics.Registry) {
	t.Helper()
	reg := metrics.NewRegistry("a1")
	p := config.FromMap("a1.channels.c1.", m)
	ch, err := New(flow.Env{Agent: "a1", Name: "c1", Type: "memory", Metrics: reg}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	if err := p.Err(); err != nil {
		t.Fatalf("config problems: %v", err)
	}
	return ch.(*Channel), reg
}

func TestChannelSuite(t *testing.T) {
	testutil.RunChannelSuite(t, func(t *testing.T, capacity, txCapacity int) flow.Channel {
		ch, _ := newChannel(t, map[string]string{
			"capacity":            strconv.Itoa(capacity),
			"transactionCapacity": strconv.Itoa(txCapacity),
			"keep-alive":          "1", // long enough that a loaded CI machine frees space in time
		})
		return ch
	})
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		props   map[string]string
		wantErr string // substring of the problems; "" for none
		check   func(t *testing.T, c *Channel)
	}{
		{name: "defaults", props: map[string]string{}, check: func(t *testing.T, c *Channel) {
			if c.Capacity() != 100 || c.TransactionCapacity() != 100 || c.KeepAlive() != 3*time.Second {
				t.Fatalf("defaults: capacity %d, transactionCapacity %d, keep-alive %v", c.Capacity(), c.TransactionCapacity(), c.KeepAlive())
			}
		}},
		{name: "flume keys", props: map[string]string{"capacity": "10000", "transactionCapacity": "1000", "keep-alive": "5",
			"byteCapacity": "1000", "byteCapacityBufferPercentage": "10"}, check: func(t *testing.T, c *Channel) {
			if c.Capacity() != 10000 || c.TransactionCapacity() != 1000 || c.KeepAlive() != 5*time.Second || c.ByteCapacity() != 900 {
				t.Fatalf("got capacity %d, transactionCapacity %d, keep-alive %v, byte capacity %d", c.Capacity(), c.TransactionCapacity(), c.KeepAlive(), c.ByteCapacity())
			}
		}},
		{name: "decimal keep-alive", props: map[string]string{"keep-alive": "0.25"}, check: func(t *testing.T, c *Channel) {
			if c.KeepAlive() != 250*time.Millisecond {
				t.Fatalf("keep-alive %v", c.KeepAlive())
			}
		}},
		{name: "byteCapacity 0 is unlimited", props: map[string]string{"byteCapacity": "0"}, check: func(t *testing.T, c *Channel) {
			if c.ByteCapacity() != 0 {
				t.Fatalf("byte capacity %d", c.ByteCapacity())
			}
		}},
		{name: "tx over capacity", props: map[string]string{"capacity": "10", "transactionCapacity": "20"},
			wantErr: "a1.channels.c1.transactionCapacity: 20 is larger than capacity 10"},
		{name: "zero capacity", props: map[string]string{"capacity": "0"}, wantErr: "a1.channels.c1.capacity: 0 is not a positive number"},
		{name: "bad number", props: map[string]string{"capacity": "lots"}, wantErr: `"lots" is not a whole number`},
		{name: "negative keep-alive", props: map[string]string{"keep-alive": "-1"}, wantErr: "keep-alive: -1 is not a number of seconds"},
		{name: "buffer percentage", props: map[string]string{"byteCapacityBufferPercentage": "100"}, wantErr: "use a percentage from 0 to 99"},
		{name: "unknown key", props: map[string]string{"capacty": "5"}, wantErr: "a1.channels.c1.capacty: ignored: sluice does not read it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := config.FromMap("a1.channels.c1.", tc.props)
			ch, err := New(flow.Env{Name: "c1", Type: "memory"}, p)
			if err != nil {
				t.Fatal(err)
			}
			p.Unused()
			err = p.Err()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected problems: %v", err)
				}
				tc.check(t, ch.(*Channel))
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("problems %v; want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaultByteCapacity(t *testing.T) {
	if n := DefaultByteCapacity(); n < 0 {
		t.Fatalf("default byte capacity %d", n)
	}
}

func TestFullErrorSaysWhichLimit(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		first []event.Event
		then  []event.Event
		want  string
	}{
		{"capacity", map[string]string{"capacity": "3", "transactionCapacity": "3", "keep-alive": "0"},
			testutil.Events("e", 3), testutil.Events("x", 1), "channel c1 is full: capacity 3 reached"},
		{"bytes", map[string]string{"byteCapacity": "100", "byteCapacityBufferPercentage": "0", "keep-alive": "0.05"},
			[]event.Event{{Body: make([]byte, 90)}}, []event.Event{{Body: make([]byte, 20)}}, "channel c1 is full: byteCapacity 100 bytes"},
		{"batch over byteCapacity", map[string]string{"byteCapacity": "100", "byteCapacityBufferPercentage": "0"},
			nil, []event.Event{{Body: make([]byte, 101)}}, "can never fit in byteCapacity 100"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch, _ := newChannel(t, tc.props)
			if tc.first != nil {
				if err := testutil.PutCommit(ch, tc.first); err != nil {
					t.Fatal(err)
				}
			}
			err := testutil.PutCommit(ch, tc.then)
			if !errors.Is(err, flow.ErrChannelFull) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want ErrChannelFull saying %q", err, tc.want)
			}
		})
	}
}

func TestPutListFullMessage(t *testing.T) {
	ch, _ := newChannel(t, map[string]string{"transactionCapacity": "2"})
	tx := ch.Begin()
	err := tx.Put(testutil.Events("e", 3))
	if !errors.Is(err, flow.ErrChannelFull) || !strings.Contains(err.Error(), "put list of transaction full (transactionCapacity 2)") {
		t.Fatalf("err = %v", err)
	}
	_ = tx.Rollback()
}

func TestByteCapacityFreedByTakes(t *testing.T) {
	ch, _ := newChannel(t, map[string]string{"byteCapacity": "100", "byteCapacityBufferPercentage": "0", "keep-alive": "0"})
	big := []event.Event{{Body: make([]byte, 60)}}
	if err := testutil.PutCommit(ch, big); err != nil {
		t.Fatal(err)
	}
	if err := testutil.PutCommit(ch, big); !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("second 60-byte put into 100 bytes: %v", err)
	}
	// A taken but uncommitted event still holds its bytes (it may come back).
	tx := ch.Begin()
	if got, err := tx.Take(context.Background(), nil, 1); err != nil || len(got) != 1 {
		t.Fatalf("take: %d, %v", len(got), err)
	}
	if err := testutil.PutCommit(ch, big); !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("put while the bytes are taken but not committed: %v", err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := testutil.PutCommit(ch, big); err != nil {
		t.Fatalf("put after the take committed: %v", err)
	}
}

func TestSwapInOneTransaction(t *testing.T) {
	// A transaction that takes as many as it puts needs no new space.
	ch, _ := newChannel(t, map[string]string{"capacity": "2", "transactionCapacity": "2", "keep-alive": "0"})
	if err := testutil.PutCommit(ch, testutil.Events("a", 2)); err != nil {
		t.Fatal(err)
	}
	tx := ch.Begin()
	if _, err := tx.Take(context.Background(), nil, 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Put(testutil.Events("b", 2)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("swap commit: %v", err)
	}
	if ch.Len() != 2 {
		t.Fatalf("Len %d", ch.Len())
	}
}

func TestCompletedTransaction(t *testing.T) {
	ch, _ := newChannel(t, nil)
	tx := ch.Begin()
	if err := tx.Put(testutil.Events("e", 1)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err == nil {
		t.Fatal("rollback after commit succeeded")
	}
	if err := tx.Put(testutil.Events("e", 1)); err == nil {
		t.Fatal("put after commit succeeded")
	}
	if ch.Len() != 1 {
		t.Fatalf("Len %d", ch.Len())
	}
}

func TestStopWakesTakers(t *testing.T) {
	ch, _ := newChannel(t, nil)
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		tx := ch.Begin()
		close(started)
		_, err := tx.Take(context.Background(), nil, 1)
		_ = tx.Rollback()
		res <- err
	}()
	<-started
	if err := ch.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.Is(err, flow.ErrClosed) {
		t.Fatalf("take on a stopped channel: %v", err)
	}
}

func TestTakeWithDoneContextGetsWhatIsThere(t *testing.T) {
	// flow.BatchSink relies on this to avoid a timer per batch.
	ch, _ := newChannel(t, nil)
	if err := testutil.PutCommit(ch, testutil.Events("e", 3)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tx := ch.Begin()
	got, err := tx.Take(ctx, nil, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("took %d, %v; want 3", len(got), err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRingGrowsAndWraps(t *testing.T) {
	ch, _ := newChannel(t, map[string]string{"capacity": "5000", "transactionCapacity": "700"})
	next, want := 0, 0
	for round := range 40 {
		evs := make([]event.Event, 300+round*10)
		for i := range evs {
			evs[i].Body = []byte(strconv.Itoa(next))
			next++
		}
		if err := testutil.PutCommit(ch, evs); err != nil {
			t.Fatal(err)
		}
		got := testutil.TakeAll(t, ch, len(evs)-50, 700, time.Second)
		for _, e := range got {
			if string(e.Body) != strconv.Itoa(want) {
				t.Fatalf("got %s, want %d", e.Body, want)
			}
			want++
		}
	}
	for _, e := range testutil.TakeAll(t, ch, next-want, 700, time.Second) {
		if string(e.Body) != strconv.Itoa(want) {
			t.Fatalf("got %s, want %d", e.Body, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("took %d of %d", want, next)
	}
}

func TestCounters(t *testing.T) {
	ch, reg := newChannel(t, map[string]string{"capacity": "10", "transactionCapacity": "5"})
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := testutil.PutCommit(ch, testutil.Events("e", 4)); err != nil {
		t.Fatal(err)
	}
	tx := ch.Begin()
	_ = tx.Put(testutil.Events("r", 2))
	_ = tx.Rollback()
	testutil.TakeAll(t, ch, 3, 5, time.Second) // takes 3: 3 attempts
	got := map[string]string{}
	for _, s := range reg.Sets() {
		if s.Kind == metrics.KindChannel && s.Name == "c1" {
			s.Each(func(k, v string) { got[k] = v })
		}
	}
	want := map[string]string{
		"EventPutAttemptCount": "6", "EventPutSuccessCount": "4",
		"EventTakeAttemptCount": "3", "EventTakeSuccessCount": "3",
		"ChannelSize": "1", "ChannelCapacity": "10", "ChannelFillPercentage": "10.0",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	// A take that finds fewer than asked counts one more attempt, as Flume's loop does.
	if got, err := testutil.TakeCommit(ch, 5, time.Second); err != nil || len(got) != 1 {
		t.Fatalf("took %d, %v; want the 1 left", len(got), err)
	}
	if a := ch.counters.EventTakeAttempt.Load(); a != 5 {
		t.Errorf("EventTakeAttemptCount after an underflowing take = %d, want 5", a)
	}
}

// BenchmarkMemoryChannel moves events through the channel in put batches of
// 100 from one goroutine and take batches of 100 from another. One op is
// one event.
func BenchmarkMemoryChannel(b *testing.B) {
	for _, batch := range []int{1, 10, 100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			ch, _ := newChannel(b, map[string]string{"capacity": "100000", "transactionCapacity": strconv.Itoa(max(batch, 100))})
			evs := testutil.Events("0123456789abcd-", batch)
			for i := range evs {
				evs[i].Headers = nil
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]event.Event, 0, batch)
				ctx := context.Background()
				for taken := 0; taken < b.N; {
					tx := ch.Begin()
					var err error
					buf, err = tx.Take(ctx, buf[:0], batch)
					if err != nil {
						panic(err)
					}
					if err := tx.Commit(context.Background()); err != nil {
						panic(err)
					}
					taken += len(buf)
				}
			}()
			for put := 0; put < b.N; {
				n := min(batch, b.N-put)
				tx := ch.Begin()
				if err := tx.Put(evs[:n]); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(context.Background()); err != nil {
					_ = tx.Rollback()
					continue
				}
				put += n
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// TestAdopt: a replacement with a lower capacity takes over every event the
// old channel held, in order, ahead of its own, even beyond its capacity;
// puts are refused until takes bring it under; a take of the old channel
// still open at the handover rolls back into the replacement.
func TestAdopt(t *testing.T) {
	old, _ := newChannel(t, map[string]string{"capacity": "100", "transactionCapacity": "10"})
	if err := old.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := testutil.PutCommit(old, testutil.Events("e"+strconv.Itoa(i)+"-", 10)); err != nil {
			t.Fatal(err)
		}
	}
	open := old.Begin() // a sink that did not stop in time
	if got, err := open.Take(t.Context(), nil, 10); err != nil || len(got) != 10 {
		t.Fatalf("take %d, %v", len(got), err)
	}
	if err := old.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	repl, _ := newChannel(t, map[string]string{"capacity": "20", "transactionCapacity": "10", "keep-alive": "0"})
	n, ok := repl.Adopt(old)
	if !ok || n != 40 {
		t.Fatalf("Adopt = %d, %v; want 40, true", n, ok)
	}
	if err := repl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if old.Held() != 10 || repl.Len() != 40 || repl.Held() != 40 {
		t.Fatalf("after adoption old holds %d, new %d (held %d)", old.Held(), repl.Len(), repl.Held())
	}
	if err := testutil.PutCommit(repl, testutil.Events("new", 1)); !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("put into a channel over its capacity: %v, want full", err)
	}
	if err := open.Rollback(); err != nil {
		t.Fatal(err)
	}
	if old.Held() != 0 || repl.Len() != 50 {
		t.Fatalf("after the late rollback old holds %d, new %d", old.Held(), repl.Len())
	}
	var want []string
	for i := range 5 {
		want = append(want, testutil.Bodies(testutil.Events("e"+strconv.Itoa(i)+"-", 10))...)
	}
	got := testutil.Bodies(testutil.TakeAll(t, repl, 35, 10, time.Second))
	if strings.Join(got, " ") != strings.Join(want[:35], " ") {
		t.Fatalf("took %q\nwant %q", got, want[:35])
	}
	// 15 left, under capacity 20: puts fit again, behind the adopted events.
	if err := testutil.PutCommit(repl, testutil.Events("new", 5)); err != nil {
		t.Fatalf("put once under capacity: %v", err)
	}
	got = testutil.Bodies(testutil.TakeAll(t, repl, 20, 10, time.Second))
	want = append(want[35:], testutil.Bodies(testutil.Events("new", 5))...)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("took %q\nwant %q", got, want)
	}
	if _, ok := repl.Adopt(fakeChannel{}); ok {
		t.Fatal("adopted a channel of another type")
	}
}

type fakeChannel struct{ flow.Channel }

// What a stop drops is split exactly: events no delivery had (lost), and
// those of deliveries cut off at the deadline or still open (in flight:
// the downstream may have them). Before the deadline a rollback is a
// delivery that failed, so its events count as lost.
func TestLossSplitsInFlight(t *testing.T) {
	ch, _ := newChannel(t, map[string]string{"capacity": "1000", "transactionCapacity": "100"})
	for i := range 5 {
		if err := testutil.PutCommit(ch, testutil.Events("e"+strconv.Itoa(i), 100)); err != nil {
			t.Fatal(err)
		}
	}
	take := func(n int) flow.Transaction {
		tx := ch.Begin()
		got, err := tx.Take(context.Background(), nil, n)
		if err != nil || len(got) != n {
			t.Fatalf("take %d: got %d, %v", n, len(got), err)
		}
		return tx
	}
	check := func(when string, lost, inFlight int) {
		t.Helper()
		l, f := ch.Loss()
		if l != lost || f != inFlight || l+f != ch.Held() {
			t.Fatalf("%s: Loss() = %d lost, %d in flight (Held %d), want %d and %d", when, l, f, ch.Held(), lost, inFlight)
		}
	}
	check("at rest", 500, 0)
	take(100).Rollback() // a delivery that failed before the deadline
	check("after a failed delivery", 500, 0)
	delivered := take(100)
	if err := delivered.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("after a delivery", 400, 0)
	cut, open := take(100), take(50)
	check("with two deliveries under way", 250, 150)
	ch.MarkInFlight()
	cut.Rollback() // the deadline cut it off
	check("after the deadline cut one off", 250, 150)
	again := take(30) // another sink takes 30 of those back...
	check("after a take of 30 of them", 250, 150)
	if err := again.Commit(context.Background()); err != nil { // ...and delivers them
		t.Fatal(err)
	}
	check("after they were delivered", 250, 120)
	open.Rollback()
	check("after the other was cut off", 250, 120)
	if err := ch.Start(context.Background()); err != nil { // a new run forgets the last one's deadline
		t.Fatal(err)
	}
	take(100).Rollback()
	check("a rollback after a restart", 370, 0)
}
