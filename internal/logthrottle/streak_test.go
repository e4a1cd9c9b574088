package logthrottle

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// plain renders records without time, for exact comparison.
func plain(out *lines) *slog.Logger {
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}}))
}

// step is one event of a table test: after advancing the clock by wait,
// a failure ("fail E"), a success ("ok") or a stop ("stop").
type step struct {
	wait time.Duration
	do   string
}

func TestStreakRule(t *testing.T) {
	const every = 30 * time.Second
	fail := func(wait time.Duration, e string) step { return step{wait, "fail " + e} }
	ok := func(wait time.Duration) step { return step{wait, "ok"} }
	first := func(e string) string { return `level=WARN msg="x: delivery failed" addr=h:1 err=` + e }
	summary := func(e string, n int, d string) string {
		return fmt.Sprintf(`level=WARN msg="x: delivery failed (repeated)" addr=h:1 err=%s failures=%d failing_for=%s`, e, n, d)
	}
	recovered := func(d string, n int) string {
		return fmt.Sprintf(`level=INFO msg="x: delivering again" recovered_after=%s failures=%d`, d, n)
	}
	cases := []struct {
		name  string
		hold  time.Duration
		steps []step
		want  []string
	}{
		{
			name:  "success without a streak says nothing",
			steps: []step{ok(0), ok(time.Second)},
		},
		{
			name:  "one failure, then recovery: no summary, one recovered line",
			steps: []step{fail(0, "refused"), ok(100 * time.Millisecond)},
			want:  []string{first("refused"), recovered("100ms", 1)},
		},
		{
			name: "a short streak: the summary of what was held back comes before the recovery",
			steps: []step{fail(0, "refused"), fail(100*time.Millisecond, "refused"), fail(200*time.Millisecond, "reset"),
				ok(400 * time.Millisecond)},
			want: []string{first("refused"), summary("reset", 3, "700ms"), recovered("700ms", 3)},
		},
		{
			name: "a long streak: one summary per interval while it lasts, none after the recovery",
			steps: []step{fail(0, "refused"), fail(5*time.Second, "refused"), fail(25*time.Second, "refused"),
				fail(5*time.Second, "refused"), fail(5*time.Second, "refused"), fail(25*time.Second, "timeout"),
				ok(2 * time.Second), ok(time.Hour)},
			want: []string{first("refused"), summary("refused", 3, "30s"), summary("timeout", 6, "1m5s"), recovered("1m7s", 6)},
		},
		{
			name: "two streaks are told apart, each from its own start",
			steps: []step{fail(0, "refused"), fail(time.Second, "refused"), ok(time.Second),
				fail(time.Minute, "timeout"), ok(3 * time.Second)},
			want: []string{first("refused"), summary("refused", 2, "2s"), recovered("2s", 2),
				first("timeout"), recovered("3s", 1)},
		},
		{
			name:  "a stop while failing writes what is held back, once; the recovery later still comes",
			steps: []step{fail(0, "refused"), fail(time.Second, "refused"), {time.Second, "stop"}, {0, "stop"}, ok(time.Second)},
			want:  []string{first("refused"), summary("refused", 2, "2s"), recovered("3s", 2)},
		},
		{
			name: "with Hold, a state that flaps is one streak, which ends once it held",
			hold: 10 * time.Second,
			steps: []step{fail(0, "low"), ok(time.Second), ok(time.Second), fail(time.Second, "low"), ok(time.Second),
				ok(5 * time.Second), ok(5 * time.Second), ok(time.Minute)},
			want: []string{first("low"), summary("low", 2, "4s"), recovered("4s", 2)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := &lines{}
			c := &clock{t: time.Unix(1e9, 0)}
			s := &Streak{Log: plain(out), Level: slog.LevelWarn, Failed: "x: delivery failed", Recovered: "x: delivering again",
				Every: every, Hold: tc.hold, Now: c.now}
			for _, st := range tc.steps {
				c.add(st.wait)
				switch {
				case strings.HasPrefix(st.do, "fail "):
					err := s.Fail(errors.New(strings.TrimPrefix(st.do, "fail ")), "addr", "h:1")
					if !Reported(err) {
						t.Fatalf("Fail returned %v, not marked reported", err)
					}
				case st.do == "ok":
					s.Ok()
				case st.do == "stop":
					s.Stop()
				}
			}
			got := out.get()
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// Every failure of a streak is accounted for: the first line counts one,
// and the last line of the streak carries the total.
func TestStreakCountsEveryFailure(t *testing.T) {
	out := &lines{}
	c := &clock{t: time.Unix(1e9, 0)}
	s := &Streak{Log: plain(out), Level: slog.LevelWarn, Failed: "f", Recovered: "r", Every: 10 * time.Second, Now: c.now}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				s.Fail(errors.New("e"))
				c.add(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if n := s.Failures(); n != 8000 {
		t.Fatalf("Failures %d, want 8000", n)
	}
	s.Ok()
	got := out.get()
	last := got[len(got)-1]
	if !strings.Contains(last, "msg=r ") || !strings.Contains(last, "failures=8000") {
		t.Fatalf("last line %q, want the recovery with failures=8000", last)
	}
	// 8 s of fake time at one summary per 10 s: the first line and the
	// summary at the recovery.
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(got), strings.Join(got, "\n"))
	}
	if s.Failing() || s.Failures() != 0 {
		t.Fatalf("after Ok: failing %v failures %d", s.Failing(), s.Failures())
	}
}

func TestReportedSurvivesWrapping(t *testing.T) {
	s := &Streak{Log: slog.New(slog.DiscardHandler), Level: slog.LevelWarn}
	base := errors.New("refused")
	err := fmt.Errorf("write 3 events: %w", s.Fail(base))
	if !Reported(err) || !errors.Is(err, base) || err.Error() != "write 3 events: refused" {
		t.Fatalf("wrapped reported error %v: Reported %v, Is base %v", err, Reported(err), errors.Is(err, base))
	}
	if Reported(base) || Reported(nil) {
		t.Fatal("an error no streak returned counts as reported")
	}
}

func TestRound(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1234567 * time.Nanosecond:             "1ms",
		1234 * time.Millisecond:               "1.2s",
		65*time.Second + 600*time.Millisecond: "1m6s",
	} {
		if got := Round(d); got != want {
			t.Errorf("Round(%v) = %s, want %s", d, got, want)
		}
	}
}
