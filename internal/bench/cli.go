package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Usage is the help of `sluice bench`.
const Usage = `usage:
  sluice bench PRESET [--duration D] [--json] [--svg FILE]   reproduce one of the articles' tests
  sluice bench [-f FILE -n NAME [-DX=V]] --send T --to ADDR --receive R [options]
  sluice bench --list                                         list the presets

Each event carries its sequence number and send time; the report gives events
sent, delivered, lost and duplicated, throughput, and latency P50/P90/P99/P99.9/max,
with the agent's stage latencies (source, channel, sink, end_to_end) when it runs
in this process, or its CPU seconds, context switches and peak RSS when a preset
runs each agent as a process of its own (this binary; rsyslogd for the rsyslog row).

load:
  --send T        netcat (lines over TCP; alias tcp), avro, http (JSON handler),
                  syslog (RFC 5424 over TCP) or otlp (OTLP/gRPC logs)  (default netcat)
  --to ADDR       the source's host:port (default: the agent's ${bench.in.port})
  --rate N        events per second over all connections; 0 = as fast as possible (default 1000)
  --size BYTES    event body size, at least 40                     (default 1024)
  --conns N       connections                                      (default 1)
  --count N       stop after N events
  --duration D    stop after D, such as 30s or 10m  (default 10s when no --count)
  --batch N       events per avro/http/otlp call or line write (default 1 paced, 100 flooding)
receiver:
  --receive R     tcp (downstream of a tcp sink), avro (of an avro sink), otlp (of an
                  otlp sink, over gRPC), dir (a file_roll directory), kafka (a topic)
                  or none                                            (default tcp)
  --listen ADDR   where tcp, avro and otlp listen (default 127.0.0.1:${bench.out.port}, a free port)
  --dir DIR       the directory dir reads
  --kafka-brokers LIST  --kafka-topic T   the cluster and topic kafka consumes; the brokers
                  "kfake" start an in-process fake Kafka (franz-go's kfake) for the run,
                  in a bench build only: go build -tags kfake ./cmd/sluice
  --drain D       how long to wait for stragglers after the last send (default 10s)
  --rounds N      how many interleaved rounds of its rows a preset runs (its own default)
  --agent-binary PATH  the sluice binary a preset runs its agent processes with (default:
                  this one), to compare builds
  --agent-env K=V  an environment variable for the agent processes (repeatable), such as GOGC=50
  --compare PATH  run each sluice row again with this sluice binary, right after, as "ROW [B]",
                  with its ratios to ROW: two builds measured in the same run
agent in this process:
  -f FILE -n NAME  start the agent NAME of FILE first; the file may read
                  ${bench.in.port}, ${bench.out.port}, ${bench.out.dir}, ${bench.data.dir},
                  ${bench.kafka.brokers}, ${bench.kafka.topic}
  -DX=V           a system property for the file (with a preset too: its configs read
                  ${bench.capacity}, the channel capacity, 100000 unless given)
  --examples DIR  where presets find their configs (default: examples/ found upwards)
output:
  --json          print the report as JSON on stdout
  --svg FILE      write latency-over-time and latency-distribution charts
  --quiet         no progress line on stderr
`

// Main runs `sluice bench` with args (after "bench") and returns the exit
// code: 0 when every event sent was delivered, 1 when some were lost or the
// run failed, 2 for a bad command line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		send, to, receive, listen, dir, brokers, topic string
		file, name, presetName, examples, svg          string
		agentBin, compare                              string
		agentEnv                                       multiFlag
		rate                                           float64
		size, conns, count, batch, rounds              int
		duration, drain                                time.Duration
		asJSON, quiet, list                            bool
	)
	fs.StringVar(&send, "send", SendNetcat, "")
	fs.StringVar(&to, "to", "", "")
	fs.StringVar(&receive, "receive", ReceiveTCP, "")
	fs.StringVar(&listen, "listen", "", "")
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&brokers, "kafka-brokers", "127.0.0.1:9092", "")
	fs.StringVar(&topic, "kafka-topic", "", "")
	fs.StringVar(&file, "f", "", "")
	fs.StringVar(&file, "conf-file", "", "")
	fs.StringVar(&name, "n", "", "")
	fs.StringVar(&name, "name", "", "")
	fs.StringVar(&presetName, "preset", "", "")
	fs.StringVar(&examples, "examples", "", "")
	fs.StringVar(&svg, "svg", "", "")
	fs.Float64Var(&rate, "rate", 1000, "")
	fs.IntVar(&size, "size", 1024, "")
	fs.IntVar(&conns, "conns", 1, "")
	fs.IntVar(&count, "count", 0, "")
	fs.IntVar(&batch, "batch", 0, "")
	fs.IntVar(&rounds, "rounds", 0, "")
	fs.StringVar(&agentBin, "agent-binary", "", "")
	fs.StringVar(&compare, "compare", "", "")
	fs.Var(&agentEnv, "agent-env", "")
	fs.DurationVar(&duration, "duration", 0, "")
	fs.DurationVar(&drain, "drain", 10*time.Second, "")
	fs.BoolVar(&asJSON, "json", false, "")
	fs.BoolVar(&quiet, "quiet", false, "")
	fs.BoolVar(&list, "list", false, "")

	sys := map[string]string{}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-D") && len(a) > 2:
			k, v, _ := strings.Cut(a[2:], "=")
			sys[k] = v
		case a == "-h" || a == "--help" || a == "-help":
			fmt.Fprint(stdout, Usage)
			return 0
		}
	}
	// The flag package stops at the first positional argument (the preset),
	// so flags and positional arguments are separated first.
	flags, positional := splitArgs(fs, args)
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice bench: "+format+"\n\n%s", append(a, Usage)...)
		return 2
	}
	if err := fs.Parse(flags); err != nil {
		return bad("%v", err)
	}
	if list {
		for _, p := range Presets {
			fmt.Fprintf(stdout, "%-24s %s\n", p.Name, p.Title)
		}
		return 0
	}
	if len(positional) > 1 || len(positional) == 1 && presetName != "" {
		return bad("one preset at most, got %s", strings.Join(append(positional, presetName), ", "))
	}
	if len(positional) == 1 {
		presetName = positional[0]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var progress io.Writer
	if !quiet {
		progress = stderr
	}
	tty := isTerminal(stderr)

	var out *Outcome
	var err error
	if presetName != "" {
		p, ok := FindPreset(presetName)
		if !ok {
			var names []string
			for _, p := range Presets {
				names = append(names, p.Name)
			}
			return bad("unknown preset %q; presets: %s", presetName, strings.Join(names, ", "))
		}
		bin := agentBin
		if bin == "" {
			bin, _ = os.Executable()
		}
		out, err = RunPreset(ctx, p, PresetOptions{
			Examples: examples, Brokers: brokers, Progress: progress, ProgressTTY: tty, Drain: drain,
			Binary: bin, Rounds: rounds, Env: agentEnv, Sys: sys, Compare: compare,
			Override: func(l *Load) {
				if set["duration"] {
					l.Duration, l.Count = duration, 0
				}
				if set["count"] {
					l.Count, l.Duration = count, 0
				}
				if set["rate"] {
					l.Rate = rate
				}
				if set["size"] {
					l.Size = size
				}
				if set["conns"] {
					l.Conns = conns
				}
				if set["batch"] {
					l.Batch = batch
				}
			},
		})
	} else {
		if file != "" && name == "" || file == "" && name != "" {
			return bad("-f FILE and -n NAME go together")
		}
		if duration == 0 && count == 0 {
			duration = 10 * time.Second
		}
		opt := Options{
			Label:       "sluice",
			Load:        Load{Transport: send, Addr: to, Rate: rate, Size: size, Conns: conns, Count: count, Duration: duration, Batch: batch},
			Receive:     Receive{Kind: receive, Addr: listen, Dir: dir, Brokers: brokers, Topic: topic},
			Drain:       drain,
			Progress:    progress,
			ProgressTTY: tty,
		}
		title := fmt.Sprintf("%s -> %s", send, receive)
		if file != "" {
			opt.Agent = &AgentConfig{File: file, Name: name, Sys: sys}
			title = fmt.Sprintf("%s -> agent %s of %s -> %s", send, name, file, receive)
		} else if to == "" {
			opt.Label = "no agent (floor)"
		}
		var res *Result
		res, err = Run(ctx, opt)
		if err == nil {
			out = &Outcome{Title: title, Runs: []*Result{res}, Date: time.Now()}
		}
	}
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "bench: ") {
			msg = "bench: " + msg
		}
		fmt.Fprintf(stderr, "sluice %s\n", msg)
		return 1
	}
	if asJSON {
		if err := out.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
	} else {
		out.WriteText(stdout)
	}
	if svg != "" {
		f, err := os.Create(svg)
		if err == nil {
			err = out.WriteSVG(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench: write the chart: %v\n", err)
			return 1
		}
	}
	for _, r := range out.Runs {
		if r.Lost > 0 || r.Err != nil {
			return 1
		}
	}
	return 0
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// splitArgs splits args into flags (each with its value, if it takes one)
// and positional arguments, leaving out -D properties.
func splitArgs(fs *flag.FlagSet, args []string) (flags, positional []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-D") && len(a) > 2 {
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, positional
}

// isTerminal reports whether w is a character device (a terminal), where
// the progress line can be rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
