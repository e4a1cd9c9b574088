package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/config"
)

// Anchor is a published figure a preset prints beside its own rows. Zero
// fields were not published.
type Anchor struct {
	Label               string
	Throughput          float64 // events per second
	Mean, P50, P99, Max time.Duration
	Note                string // where the figure comes from
}

// PresetRun is one row a preset measures: a config from examples/ and the
// load sent through it.
type PresetRun struct {
	Label   string
	Config  string // file name in the examples directory; "" sends straight to the receiver (the floor)
	Load    Load
	Receive Receive
	// Peer runs another agent (PeerRsyslog) instead of Config's.
	Peer string
	// Base, when set, is the Label of the row this one is compared with
	// (throughput and CPU ratios, per round).
	Base string
}

// Preset reproduces one of the articles' tests with one command.
type Preset struct {
	Name  string
	Title string
	Short string // the pipeline, for a run whose load was changed
	// Runs are measured in order; with Together they run at the same time
	// (the floor beside the pipeline).
	Runs     []PresetRun
	Together bool
	// Process runs each agent as a process of its own (the sluice binary
	// running the bench, or the peer), so each row reports the agent's own
	// CPU time and peak memory.
	Process bool
	// Rounds repeats the rows in turn (row 1, row 2, ..., row 1, row 2,
	// ...): interleaved rounds, so a change in the machine's speed during
	// the run touches every row alike, and each round's ratios compare rows
	// measured a minute apart.
	Rounds  int
	Anchors []Anchor
	// Needs names a component type the preset's configs use that a build
	// may not have yet; its absence fails the preset with a clear message.
	Needs []string
}

const kib = 1024

// flumeTuned is the tuned Flume row of the 200 events/s, 1 KiB test.
var flumeTuned = Anchor{
	Label: "Flume, tuned (article)", Throughput: 200,
	Mean: 21 * time.Millisecond, P99: 46 * time.Millisecond, Max: 87 * time.Millisecond,
	Note: "the articles' tuned Flume agent: 200 events/s of 1 KiB, avg 21 ms, P99 46 ms, max 87 ms",
}

// floorPhase puts the floor's events halfway between the pipeline's, so
// the two senders in one process do not compete for a CPU at each event.
const floorPhase = 2500 * time.Microsecond

func latencyPreset(name string, d time.Duration) Preset {
	load := Load{Transport: SendNetcat, Rate: 200, Size: kib, Duration: d}
	floor := load
	floor.Phase = floorPhase
	return Preset{
		Name:  name,
		Title: fmt.Sprintf("200 events/s of 1 KiB for %v: netcat -> memory -> tcp", d),
		Short: "netcat -> memory -> tcp",
		Runs: []PresetRun{
			{Label: "sluice", Config: "bench-latency.properties", Load: load, Receive: Receive{Kind: ReceiveTCP}},
			{Label: "no agent (floor)", Load: floor, Receive: Receive{Kind: ReceiveTCP}},
		},
		Together: true,
		Anchors:  []Anchor{flumeTuned},
	}
}

func avroLatencyPreset(name string, d time.Duration) Preset {
	load := Load{Transport: SendAvro, Rate: 200, Size: kib, Duration: d}
	floor := load
	floor.Phase = floorPhase
	return Preset{
		Name:  name,
		Title: fmt.Sprintf("200 events/s of 1 KiB for %v: avro -> memory -> avro", d),
		Short: "avro -> memory -> avro",
		Runs: []PresetRun{
			{Label: "sluice", Config: "bench-latency-avro.properties", Load: load, Receive: Receive{Kind: ReceiveAvro}},
			{Label: "no agent (floor)", Load: floor, Receive: Receive{Kind: ReceiveAvro}},
		},
		Together: true,
		Anchors:  []Anchor{flumeTuned},
	}
}

// Presets are the articles' tests.
var Presets = []Preset{
	latencyPreset("latency-200", 10*time.Minute),
	latencyPreset("latency-200-short", 30*time.Second),
	avroLatencyPreset("latency-200-avro-short", 30*time.Second),
	{
		Name:  "memory-vs-file",
		Title: "throughput, 4 connections of 256-byte lines as fast as they go: netcat -> memory | file -> tcp",
		Short: "netcat -> memory | file -> tcp",
		Runs: []PresetRun{
			{Label: "sluice, memory channel", Config: "bench-throughput-memory.properties",
				Load: Load{Transport: SendNetcat, Size: 256, Conns: 4, Count: 1_000_000, Batch: 500}, Receive: Receive{Kind: ReceiveTCP}},
			{Label: "sluice, file channel", Config: "bench-throughput-file.properties",
				Load: Load{Transport: SendNetcat, Size: 256, Conns: 4, Count: 1_000_000, Batch: 500}, Receive: Receive{Kind: ReceiveTCP}},
		},
		Anchors: []Anchor{
			{Label: "Flume, memory channel (article)", Throughput: 123_000, Note: "the articles' Flume memory channel"},
			{Label: "Flume, file channel (article)", Throughput: 20_000, Note: "the articles' Flume file channel (not verified, see flume-reference)"},
		},
		Needs: []string{"channel:file"},
	},
	throughputPreset("file-vs-memory-roll", "file_roll", "bench-throughput-%s-roll.properties", ReceiveDir),
	throughputPreset("file-vs-memory-tcp", "tcp", "bench-throughput-%s.properties", ReceiveTCP),
	{
		Name: "lowrate",
		Title: "200 events/s of 1 KiB for 60 s, one connection: netcat -> memory | file -> tcp, and rsyslog (imtcp -> omfwd), " +
			"each agent a process of its own: CPU seconds, peak RSS, latency",
		Short: "netcat -> memory | file -> tcp, rsyslog",
		Runs: []PresetRun{
			{Label: "sluice, memory channel", Config: "bench-latency.properties",
				Load: Load{Transport: SendNetcat, Rate: 200, Size: kib, Duration: time.Minute}, Receive: Receive{Kind: ReceiveTCP}},
			{Label: "sluice, file channel", Config: "bench-latency-file.properties", Base: "sluice, memory channel",
				Load: Load{Transport: SendNetcat, Rate: 200, Size: kib, Duration: time.Minute}, Receive: Receive{Kind: ReceiveTCP}},
			{Label: "rsyslog", Peer: PeerRsyslog, Base: "sluice, memory channel",
				Load: Load{Transport: SendNetcat, Rate: 200, Size: kib, Duration: time.Minute}, Receive: Receive{Kind: ReceiveTCP}},
		},
		Process: true,
		Rounds:  1,
		Needs:   []string{"channel:file"},
	},
	{
		Name:  "avro-kafka",
		Title: "avro -> memory -> kafka sink -> consumer, 4 connections of 1 KiB events as fast as they go",
		Short: "avro -> memory -> kafka -> consumer",
		Runs: []PresetRun{
			{Label: "sluice", Config: "bench-avro-kafka.properties",
				Load: Load{Transport: SendAvro, Size: kib, Conns: 4, Count: 200_000, Batch: 100}, Receive: Receive{Kind: ReceiveKafka}},
		},
		Needs: []string{"sink:kafka"},
	},
}

// throughputPreset is issue 17's pair: the same flood through the memory
// and the file channel, in interleaved rounds, each agent a process of its
// own (sink is the sink's name; config has %s for memory or file).
func throughputPreset(name, sink, config, recv string) Preset {
	load := Load{Transport: SendNetcat, Size: 256, Conns: 4, Count: 1_000_000, Batch: 500}
	return Preset{
		Name: name,
		Title: fmt.Sprintf("throughput, 4 connections of 256-byte lines as fast as they go: netcat -> memory | file -> %s, "+
			"each agent a process of its own, interleaved rounds", sink),
		Short: "netcat -> memory | file -> " + sink,
		Runs: []PresetRun{
			{Label: "memory channel", Config: fmt.Sprintf(config, "memory"), Load: load, Receive: Receive{Kind: recv}},
			{Label: "file channel", Config: fmt.Sprintf(config, "file"), Load: load, Receive: Receive{Kind: recv}, Base: "memory channel"},
		},
		Process: true,
		Rounds:  3,
		Needs:   []string{"channel:file"},
	}
}

// FindPreset returns the preset named name.
func FindPreset(name string) (Preset, bool) {
	for _, p := range Presets {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

// Outcome is what a preset measured.
type Outcome struct {
	Preset  string
	Title   string
	Runs    []*Result
	Anchors []Anchor
	Date    time.Time
	Rounds  int // rounds of interleaved rows (Result.Round)
}

// PresetOptions adjust a preset run.
type PresetOptions struct {
	// Examples is the directory holding the configs (default: found from the
	// working directory upwards).
	Examples string
	// Override, when set, changes each run's load (a shorter duration, a
	// rate, a count) before it starts.
	Override func(*Load)
	// Receive overrides fields of each run's receiver (Kafka brokers).
	Brokers string
	// Progress gets the progress line of the first row of each step.
	Progress    io.Writer
	ProgressTTY bool
	Drain       time.Duration
	// Binary is the sluice binary a Process preset runs its agents with
	// (the CLI passes its own executable).
	Binary string
	// Compare, when set, is a second sluice binary: each sluice row of a
	// Process preset is run again with it, right after, labelled "[B]"
	// and compared with the same row of Binary in the same round, so two
	// builds are measured under the same conditions.
	Compare string
	// Rounds, when positive, overrides the preset's number of rounds.
	Rounds int
	// Env is added to the environment of agents run as processes, and Sys
	// to every agent's system properties (what its config reads with
	// ${name}, such as bench.capacity).
	Env []string
	Sys map[string]string
}

// RunPreset runs every row of p and returns them with p's anchors.
func RunPreset(ctx context.Context, p Preset, po PresetOptions) (*Outcome, error) {
	dir, err := findExamples(po.Examples)
	if err != nil {
		return nil, err
	}
	for _, need := range p.Needs {
		if err := checkType(dir, p, need); err != nil {
			return nil, err
		}
	}
	if p.Process && po.Binary == "" {
		return nil, fmt.Errorf("bench: preset %s runs each agent as a process: it needs the sluice binary (run it with `sluice bench`)", p.Name)
	}
	out := &Outcome{Preset: p.Name, Title: p.Title, Anchors: p.Anchors, Date: time.Now()}
	if po.Compare != "" && !p.Process {
		return nil, fmt.Errorf("bench: preset %s runs its agent in this process; --compare needs a preset whose agents are processes", p.Name)
	}
	opts := make([]Options, len(p.Runs))
	for i, r := range p.Runs {
		o := Options{Label: r.Label, Load: r.Load, Receive: r.Receive, Drain: po.Drain, ProgressTTY: po.ProgressTTY, Peer: r.Peer}
		if po.Override != nil {
			po.Override(&o.Load)
			if o.Load != r.Load {
				out.Title = p.Short + " (load changed on the command line)"
			}
		}
		if o.Receive.Kind == ReceiveKafka {
			o.Receive.Brokers = po.Brokers
		}
		if r.Config != "" {
			o.Agent = &AgentConfig{File: filepath.Join(dir, r.Config), Name: "a1", Sys: po.Sys}
			if p.Process {
				o.Agent.Binary, o.Agent.Env = po.Binary, po.Env
			}
		}
		opts[i] = o
	}
	rounds := max(p.Rounds, 1)
	if po.Rounds > 0 {
		rounds = po.Rounds
	}
	if p.Together {
		results := make([]*Result, len(opts))
		errs := make(chan error, len(opts))
		for i := range opts {
			if i == 0 {
				opts[i].Progress = po.Progress
			}
			go func() {
				var err error
				results[i], err = Run(ctx, opts[i])
				errs <- err
			}()
		}
		for range opts {
			if e := <-errs; e != nil && err == nil {
				err = e
			}
		}
		if err != nil {
			return nil, err
		}
		out.Runs = results
		return out, nil
	}
	for round := 1; round <= rounds; round++ {
		for i, o := range opts {
			o.Progress = po.Progress
			res, err := Run(ctx, o)
			if err != nil {
				return nil, err
			}
			res.Round, res.Base = round, p.Runs[i].Base
			out.Runs = append(out.Runs, res)
			if po.Compare == "" || o.Agent == nil {
				continue
			}
			b := o
			ac := *o.Agent
			ac.Binary = po.Compare
			b.Agent, b.Label = &ac, o.Label+" [B]"
			res, err = Run(ctx, b)
			if err != nil {
				return nil, err
			}
			res.Round, res.Base = round, o.Label
			out.Runs = append(out.Runs, res)
		}
	}
	out.Rounds = rounds
	return out, nil
}

// checkType fails with a clear message when a config of p uses the type
// need ("kind:type") and this build does not provide it.
func checkType(dir string, p Preset, need string) error {
	kind, typ, _ := strings.Cut(need, ":")
	for _, r := range p.Runs {
		if r.Config == "" {
			continue
		}
		file := filepath.Join(dir, r.Config)
		err := agent.Validate(file, "a1", nil)
		if err == nil {
			continue
		}
		var probs *config.Problems
		if errors.As(err, &probs) {
			for _, pr := range probs.Sorted() {
				// The agent's message for a Flume type it lacks: "Flume type
				// jdbc is not provided by sluice; ..." at KIND.NAME.type.
				if strings.HasSuffix(pr.Key, ".type") && strings.Contains(pr.Key, "."+kind+"s.") &&
					strings.Contains(strings.ToLower(pr.Msg), fmt.Sprintf("flume type %s is not provided", typ)) {
					return fmt.Errorf("bench: preset %s needs the %s %s, which this build of sluice does not provide yet (%s); nothing was measured", p.Name, typ, kind, pr.String())
				}
			}
		}
		return fmt.Errorf("bench: preset %s: %s is not a valid config: %w", p.Name, file, err)
	}
	return nil
}

// findExamples returns dir, or the first examples directory holding the
// presets' configs from the working directory upwards, then beside the
// executable.
func findExamples(dir string) (string, error) {
	const probe = "bench-latency.properties"
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, probe)); err != nil {
			return "", fmt.Errorf("bench: %s holds no %s: %w", dir, probe, err)
		}
		return dir, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			cand := filepath.Join(d, "examples")
			if _, err := os.Stat(filepath.Join(cand, probe)); err == nil {
				return cand, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("bench: cannot find examples/%s from the working directory or the executable; run from a sluice checkout or give --examples DIR", probe)
}
