package sourcetest

import (
	"log/slog"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// newProcessor returns the real ChannelProcessor of a source whose only
// channel, required, is ch: no interceptors, the replicating selector.
func newProcessor(ch flow.Channel) (flow.Processor, error) {
	sel, err := flow.NewSelector(nil, map[string]flow.Channel{"c1": ch}, []string{"c1"})
	if err != nil {
		return nil, err
	}
	return flow.NewChannelProcessor(flow.ProcessorConfig{
		Source:   "r1",
		Selector: sel,
		Metrics:  metrics.NewRegistry("a1"),
		Logger:   slog.New(slog.DiscardHandler),
	}), nil
}
