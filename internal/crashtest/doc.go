// Package crashtest holds end-to-end tests of the real agent binary around
// its process: signals, exit codes, /healthz. TestCrashKill9 kills an agent
// with a file channel under load with SIGKILL, again and again; TestCrashMixed
// mixes SIGKILL, SIGTERM and SIGHUP with a changed config; both check that
// every event acknowledged to the sender is delivered (scripts/crash-test.sh
// runs their full versions). The stop and reload tests check what SIGTERM
// and SIGHUP do to intake, to each channel type's events and to the exit
// status.
package crashtest
