package kafkaconf

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

func TestHealth(t *testing.T) {
	const grace = 100 * time.Millisecond
	boom := errors.New("boom")
	tests := []struct {
		name string
		run  func(h *Health)
		want string // "" for healthy
	}{
		{"nothing failed", func(*Health) {}, ""},
		{"within the grace period", func(h *Health) { h.Fail("brokers", boom, 0) }, ""},
		{"past the grace period", func(h *Health) {
			h.Fail("brokers", boom, 0)
			time.Sleep(grace + 20*time.Millisecond)
		}, "boom (for 0s)"},
		{"ended by OK", func(h *Health) {
			h.Fail("brokers", boom, 0)
			time.Sleep(grace + 20*time.Millisecond)
			h.OK("brokers")
		}, ""},
		{"OK of another key", func(h *Health) {
			h.Fail("brokers", boom, 0)
			time.Sleep(grace + 20*time.Millisecond)
			h.OK("delivery")
		}, "boom"},
		{"a run lasts from its first failure", func(h *Health) {
			for range 6 {
				h.Fail("fetch", boom, 50*time.Millisecond)
				time.Sleep(25 * time.Millisecond)
			}
		}, "boom"},
		{"a failure not repeated within its staleness ends the run", func(h *Health) {
			h.Fail("fetch", boom, 30*time.Millisecond)
			time.Sleep(grace + 20*time.Millisecond)
		}, ""},
		{"oldest first", func(h *Health) {
			h.Fail("b", errors.New("second"), 0)
			h.Fail("a", errors.New("third"), 0)
			time.Sleep(grace + 20*time.Millisecond)
			h.Fail("b", errors.New("last word"), 0)
		}, "last word (for 0s); third (for 0s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHealth(grace)
			tc.run(h)
			err := h.Err()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Err() = %v, want %q", err, tc.want)
			}
		})
	}
}

// The probe fails "brokers" while no broker answers and "exists <topic>"
// while a topic is missing, and ends each run when the cause is gone.
func TestProbe(t *testing.T) {
	kc := kafkatest.NewNoAutoCreate(t, 1, 1, "here")
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := NewHealth(time.Hour)
	p := &Probe{Client: cl, Brokers: kc.Addrs, Health: h, Interval: time.Second, Topics: []string{"here", "later"}}
	ctx := t.Context()
	p.once(ctx)
	if h.Failing("brokers") || h.Failing("exists here") || !h.Failing("exists later") {
		t.Fatalf("brokers up, one topic missing: brokers %v, here %v, later %v", h.Failing("brokers"), h.Failing("exists here"), h.Failing("exists later"))
	}
	kc.Create(t, "later", 1)
	kc.Down()
	p.once(ctx)
	if !h.Failing("brokers") {
		t.Fatal("brokers down, and the probe did not say so")
	}
	kc.Up(t)
	p.once(ctx)
	if h.Failing("brokers") || h.Failing("exists later") {
		t.Fatalf("brokers back, topic created: brokers %v, later %v", h.Failing("brokers"), h.Failing("exists later"))
	}
}

// kgo's warnings go through the throttle: a broker that stays down is told
// once, not twice a second.
func TestLoggerThrottles(t *testing.T) {
	logs := &kafkatest.Logs{}
	l := Logger(logs.Logger(), logthrottle.New(time.Hour, 1))
	for range 100 {
		l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "127.0.0.1:9")
		l.Log(kgo.LogLevelError, "group manage loop errored", "err", "dial")
		l.Log(kgo.LogLevelInfo, "connection opened") // debug: not shown at info
	}
	if n := len(logs.Lines()); n != 2 {
		t.Fatalf("%d lines for 100 repeats of two warnings, want one each:\n%s", n, strings.Join(logs.Lines(), "\n"))
	}
	if l.Level() != kgo.LogLevelWarn {
		t.Errorf("kgo level %v for an info logger, want warn (kgo's info is sluice's debug)", l.Level())
	}
}
