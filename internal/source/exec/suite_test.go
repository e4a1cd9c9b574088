package execsource_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/source/exec"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestSourceSuite runs the part of the source contract that applies to
// the exec source, which has no sender to answer: a command whose output
// meets a full channel is held back (its pipe is not read) and loses no
// line.
func TestSourceSuite(t *testing.T) {
	sourcetest.RunSourceSuite(t, sourcetest.Harness{
		Type: "exec", New: execsource.New,
		Props: map[string]string{
			"shell":   "/bin/sh -c",
			"command": `i=0; while [ $i -lt 500 ]; do printf 'seq-%04d\n' $i; i=$((i+1)); done`,
		},
		Generated: 500,
	})
}
