// Package hostile runs the hostile inputs of issue 13 against the real
// agent (cmd/sluice, built by the test) with every network source at its
// default limits, and checks what the agent promises under them: its peak
// RSS (VmHWM) stays under the documented bound (docs/operations.md,
// "Limits"), an honest client is served while the hostile one is at work,
// and every refused input is logged without flooding.
//
// The default run (go test ./internal/systemtest/hostile/) measures the memory
// rows on a smaller scale; the whole table, printed as input, response,
// peak RSS and honest client served, is
//
//	scripts/hostile.sh
//
// (SLUICE_HOSTILE=1 go test -run TestHostileTable -v -count=1 ./internal/systemtest/hostile/).
package hostile
