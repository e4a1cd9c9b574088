package loggersink

import (
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		s, err := New(env, config.FromMap("a1.sinks.k1.", map[string]string{"maxBytesToLog": "32"}))
		if err != nil {
			t.Fatal(err)
		}
		return s, sinktest.Downstream{Note: "logger writes to the agent's log, which takes every line at once: nothing can refuse or hold a delivery"}
	})
}
