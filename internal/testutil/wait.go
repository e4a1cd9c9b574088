package testutil

import (
	"testing"
	"time"
)

// pollEvery is how often WaitFor and Eventually check their condition:
// often enough that a test waits little past the moment it holds, seldom
// enough that a condition which reads a file or asks an HTTP endpoint
// leaves the two cores of a CI machine to the code under test.
const pollEvery = 10 * time.Millisecond

// WaitFor polls cond until it holds, or fails the test after d with what
// (a phrase: "the file channel to drain") in the message. A test that
// wants to show more on failure (an agent's log) does so in a t.Cleanup
// when t.Failed().
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(cond, d) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Eventually polls cond until it holds or timeout passes, and reports
// whether it held; cond is checked once more at the deadline, so a slow
// machine that reaches it while cond was last false still sees the end.
func Eventually(cond func() bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(pollEvery)
	}
	return cond()
}
