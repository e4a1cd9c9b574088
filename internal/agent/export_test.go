package agent

import "github.com/sluicehq/sluice/internal/flow"

// SetSinkTypeForTest makes type name build sinks with f until the returned
// function undoes it.
func SetSinkTypeForTest(name string, f flow.SinkFactory) (undo func()) {
	old, had := sinkTypes[name]
	sinkTypes[name] = f
	return func() {
		if had {
			sinkTypes[name] = old
		} else {
			delete(sinkTypes, name)
		}
	}
}
