// Package crash holds end-to-end tests of the real agent binary around
// its process: signals, exit codes, /healthz. TestCrashKill9 kills an agent
// with a file channel under load with SIGKILL, again and again; TestCrashMixed
// mixes SIGKILL, SIGTERM and SIGHUP with a changed config; both check that
// every event acknowledged to the sender is delivered (scripts/crash-test.sh
// runs their full versions). The stop and reload tests check what SIGTERM
// and SIGHUP do to intake, to each channel type's events and to the exit
// status. TestEveryComponentSurvivesItsDefaults runs every source, channel
// and sink type with only its required keys past its timers (SLUICE_LONG=1
// past every timer up to 120 s); the panic tests check what a panic in a
// sink's delivery and one elsewhere do (components built only into the test
// binary with the tag sluice_faulty panic on purpose).
package crash
