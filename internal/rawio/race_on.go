//go:build race

package rawio

// raceEnabled: see useRaw.
const raceEnabled = true
