//go:build sluice_faulty

package agent

import "github.com/sluicehq/sluice/internal/testutil/faulty"

// Components that panic on purpose, in test builds only (go build -tags
// sluice_faulty; testutil.AgentBinaryWithFaults): the panic policy's tests
// run them in the real binary.
func init() {
	sourceTypes["faulty_panic"] = faulty.NewSource
	sinkTypes["faulty_panic"] = faulty.NewSink
}
