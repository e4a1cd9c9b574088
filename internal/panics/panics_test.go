package panics

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

func TestCatch(t *testing.T) {
	if err := Catch(func() error { return nil }); err != nil {
		t.Fatalf("no panic: %v", err)
	}
	plain := errors.New("plain")
	if err := Catch(func() error { return plain }); !errors.Is(err, plain) {
		t.Fatalf("an error passes through: %v", err)
	}
	err := Catch(func() error {
		var m map[string]int
		m["x"] = 1 //nolint:staticcheck // SA5000: the runtime error this test needs
		return nil
	})
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("panic caught as %T %v", err, err)
	}
	var re runtime.Error
	if !errors.As(err, &re) {
		t.Errorf("a runtime error is not unwrapped: %v", err)
	}
	if !strings.Contains(err.Error(), "panic: assignment to entry in nil map") || !strings.Contains(string(pe.Stack), "TestCatch") {
		t.Errorf("error %q, stack:\n%s", err, pe.Stack)
	}
	err = Catch(func() error { panic("text") })
	if !errors.As(err, &pe) || pe.Value != "text" || pe.Unwrap() != nil {
		t.Errorf("panic(\"text\"): %#v", err)
	}
}

// TestGuardExits runs the test binary again to panic in goroutines started
// by Go and guarded by Guard: the process exits 70 with one JSON ERROR
// line naming the goroutine, the panic and the stack.
func TestGuardExits(t *testing.T) {
	for _, how := range []string{"Go", "Guard"} {
		t.Run(how, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestGuardChild$")
			cmd.Env = append(os.Environ(), "PANICS_CHILD="+how)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != ExitStatus {
				t.Fatalf("exit %v, want status %d; output:\n%s", err, ExitStatus, out)
			}
			var rec map[string]any
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil {
				t.Fatalf("want one JSON log line; output:\n%s", out)
			}
			if rec["level"] != "ERROR" || rec["goroutine"] != "sink k1: roll timer" || rec["panic"] != "boom" ||
				!strings.Contains(rec["stack"].(string), "TestGuardChild") || rec["exit_status"] != float64(70) {
				t.Errorf("log line %s", lines[0])
			}
		})
	}
}

func TestGuardChild(t *testing.T) {
	how := os.Getenv("PANICS_CHILD")
	if how == "" {
		t.Skip("run by TestGuardExits")
	}
	SetLogger(slog.New(slog.NewJSONHandler(os.Stdout, nil)))
	boom := func() { panic("boom") }
	switch how {
	case "Go":
		Go("sink k1: roll timer", boom)
	case "Guard":
		go func() {
			defer Guard("sink k1: roll timer")
			boom()
		}()
	}
	select {}
}

// BenchmarkCatch is what Catch adds to a call (BatchSink pays it once per
// batch):
//
//	go test -run '^$' -bench Catch -benchmem ./internal/panics/
func BenchmarkCatch(b *testing.B) {
	var n int
	f := func() error { n++; return nil }
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = f()
		}
	})
	b.Run("Catch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Catch(f)
		}
	})
}
