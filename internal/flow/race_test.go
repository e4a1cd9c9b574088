//go:build race

package flow_test

// raceEnabled: sync.Pool drops items at random under -race, so allocation
// counts are only checked without it.
const raceEnabled = true
