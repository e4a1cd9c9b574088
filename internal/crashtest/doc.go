// Package crashtest holds end-to-end crash tests of the real agent binary:
// TestCrashKill9 kills an agent with a file channel under load with
// SIGKILL, again and again, and checks that every event acknowledged to
// the sender is delivered (scripts/crash-test.sh runs the full version).
package crashtest
