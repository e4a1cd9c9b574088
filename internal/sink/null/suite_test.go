package nullsink

import (
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		s, err := New(env, config.FromMap("a1.sinks.k1.", nil))
		if err != nil {
			t.Fatal(err)
		}
		return s, sinktest.Downstream{Note: "null discards every event: it has no downstream to refuse or hold a delivery"}
	})
}
