package kafkaconf

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kafkaconf/kafkatest"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/testutil"
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

// kgo's own lines, warnings and errors included, are the library's view
// of failures the component tells itself (Health): DEBUG only, and kgo is
// not asked to log at all unless DEBUG is on.
func TestLoggerKeepsKgoAtDebug(t *testing.T) {
	logs := &kafkatest.Logs{}
	l := Logger(logs.Logger())
	l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "127.0.0.1:9")
	l.Log(kgo.LogLevelError, "group manage loop errored", "err", "dial")
	if n := len(logs.Lines()); n != 0 || l.Level() != kgo.LogLevelNone {
		t.Fatalf("at INFO: kgo level %v, %d lines:\n%s", l.Level(), n, strings.Join(logs.Lines(), "\n"))
	}
	debug := &testutil.LogBuffer{}
	l = Logger(slog.New(slog.NewTextHandler(debug, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Log(kgo.LogLevelError, "group manage loop errored", "err", "dial")
	if l.Level() != kgo.LogLevelInfo || debug.Lines(`level=DEBUG msg="kafka client: group manage loop errored" err=dial kgo_level=ERROR`) != 1 {
		t.Fatalf("at DEBUG: kgo level %v, log:\n%s", l.Level(), debug.String())
	}
}

// A component's runs of failures, whatever their keys, are one streak in
// its log: one line when the first key fails, none while other keys join
// or leave, then the summary and one "recovered" line when the last one
// ends (by OK, or by staleness).
func TestHealthTellsOneStreak(t *testing.T) {
	for _, end := range []string{"ok", "stale"} {
		t.Run(end, func(t *testing.T) {
			logs := &testutil.LogBuffer{}
			h := NewHealth(time.Hour)
			h.Tell(slog.New(slog.NewTextHandler(logs, nil)), "kafka x: cannot reach Kafka; retrying", "kafka x: working again")
			h.OK("brokers") // nothing failing: nothing to say
			err := h.Fail("brokers", errors.New("no broker answers"), 0)
			if !logthrottle.Reported(err) {
				t.Fatalf("Fail returned %v, not marked as told", err)
			}
			stale := time.Duration(0)
			if end == "stale" {
				stale = 50 * time.Millisecond
			}
			h.Fail("fetch", errors.New("the consumer group fails: unable to dial"), stale)
			h.Fail("fetch", errors.New("the consumer group fails: unable to dial"), stale)
			h.OK("brokers") // the fetches still fail
			if logs.Lines("working again") != 0 {
				t.Fatalf("recovered while a key still fails:\n%s", logs.String())
			}
			if end == "ok" {
				h.OK("fetch")
			} else {
				time.Sleep(100 * time.Millisecond)
				h.OK("brokers") // the probe's next success finds the fetch run over
			}
			got := logs.String()
			if n := strings.Count(got, "\n"); n != 3 ||
				logs.Lines(`level=WARN msg="kafka x: cannot reach Kafka; retrying" err="no broker answers"`) != 1 ||
				logs.Lines(`level=WARN msg="kafka x: cannot reach Kafka; retrying (repeated)" err="the consumer group fails: unable to dial" failures=3`) != 1 ||
				logs.Lines(`level=INFO msg="kafka x: working again" recovered_after=`) != 1 {
				t.Fatalf("want the first failure, the summary of the other two, then the recovery:\n%s", got)
			}
			if !strings.Contains(strings.Split(strings.TrimSpace(got), "\n")[2], "working again") {
				t.Fatalf("the recovery is not the last line:\n%s", got)
			}
		})
	}
}

// TestHealthStaleRunEndsInAFailure: a run that went stale ends when
// another failure comes; the component is still failing, so its streak
// goes on: no "working again" line between two failures of one outage.
func TestHealthStaleRunEndsInAFailure(t *testing.T) {
	logs := &testutil.LogBuffer{}
	h := NewHealth(time.Hour)
	h.Tell(slog.New(slog.NewTextHandler(logs, nil)), "kafka x: cannot reach Kafka; retrying", "kafka x: working again")
	h.Fail("group", errors.New("the consumer group fails: unable to dial"), 20*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the group's run is stale now
	h.Fail("brokers", errors.New("no broker answers"), 0)
	h.Fail("group", errors.New("the consumer group fails: unable to dial"), 20*time.Millisecond)
	if n := logs.Lines("working again"); n != 0 {
		t.Fatalf("recovered in the middle of an outage:\n%s", logs.String())
	}
	h.OK("brokers")
	h.OK("group")
	if n := logs.Lines("working again"); n != 1 {
		t.Fatalf("%d recoveries at the end of the outage, want 1:\n%s", n, logs.String())
	}
}
