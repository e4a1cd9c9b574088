package bench

import (
	"fmt"
	"time"
)

// The peers harness (../shared/bench, issue 27) runs sluice with the
// settings a user writes: capacity 20000 and transactionCapacity 1000 on a
// memory or a file channel, the netcat source's batchSize left at its
// default. These presets are its three workloads with exactly its configs
// (examples/bench-harness-*.properties), the memory and the file row of each
// in interleaved rounds, each agent a process of its own, so that a change
// can be measured the harness's way without installing it. The senders and
// receivers are the bench's, not the harness's loadgen: 4 connections
// writing 256 KiB at a time (loadgen's buffer) as fast as the agent reads,
// and for W3 one connection paced at 200 events/s.
func init() {
	flood := Load{Transport: SendNetcat, Size: 256, Conns: 4, Count: 1_000_000, Batch: 1024}
	Presets = append(Presets,
		harnessPreset("harness-w1", "W1 tcp -> file", "file_roll", "bench-harness-%s-roll.properties", flood, ReceiveDir, 3),
		harnessPreset("harness-w2", "W2 tcp -> tcp", "tcp", "bench-harness-%s.properties", flood, ReceiveTCP, 3),
		harnessPreset("harness-w3", "W3 200 lines/s of 1 KiB for 60 s", "tcp", "bench-harness-%s.properties",
			Load{Transport: SendNetcat, Rate: 200, Size: kib, Duration: time.Minute}, ReceiveTCP, 1),
	)
}

func harnessPreset(name, workload, sink, config string, load Load, recv string, rounds int) Preset {
	return Preset{
		Name: name,
		Title: fmt.Sprintf("the peers harness's %s: netcat -> memory | file (capacity 20000, transactionCapacity 1000, "+
			"batchSize left at its default) -> %s, each agent a process of its own", workload, sink),
		Short: "netcat -> memory | file -> " + sink + ", the harness's configs",
		Runs: []PresetRun{
			{Label: "memory channel", Config: fmt.Sprintf(config, "memory"), Load: load, Receive: Receive{Kind: recv}},
			{Label: "file channel", Config: fmt.Sprintf(config, "file"), Load: load, Receive: Receive{Kind: recv}, Base: "memory channel"},
		},
		Process: true,
		Rounds:  rounds,
		Needs:   []string{"channel:file"},
	}
}
