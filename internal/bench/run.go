package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/agent"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Receive kinds: where a run's events come out of the pipeline.
const (
	ReceiveTCP   = "tcp"   // lines on a TCP listener (downstream of a tcp sink)
	ReceiveAvro  = "avro"  // an Avro RPC listener (downstream of an avro sink)
	ReceiveDir   = "dir"   // the files of a directory (a file_roll sink's)
	ReceiveKafka = "kafka" // a Kafka topic (downstream of a kafka sink)
	ReceiveNone  = "none"  // nothing: only send
)

// Receive says where a run's events come out.
type Receive struct {
	Kind string // one of the Receive constants; default tcp
	// Addr is the listen address of tcp and avro (default 127.0.0.1:0).
	Addr string
	// Dir is the directory of dir; empty makes a temporary one.
	Dir string
	// Brokers and Topic are the Kafka cluster and topic of kafka.
	Brokers, Topic string
}

// AgentConfig is an agent a run starts in this process before it sends.
// The run adds system properties the file may read with ${name}:
// bench.in.port (a free port for the source, unless the load has an
// address), bench.out.port (the receiver's port), bench.out.dir (the dir
// receiver's directory), bench.data.dir (an empty directory for a file
// channel) and bench.kafka.brokers and bench.kafka.topic.
type AgentConfig struct {
	File string
	Name string
	Sys  map[string]string
	// Binary, when set, runs the agent as a process of its own (this
	// sluice binary: `Binary agent -f File -n Name -D...`) instead of in
	// the bench's process, so the run can report the agent's own CPU time
	// and peak memory (Result.CPU, Result.PeakRSS). Env is added to its
	// environment (GOGC=..., say).
	Binary string
	Env    []string
}

// Options configure one run: a load, where it comes out, and optionally the
// agent in between.
type Options struct {
	Label   string
	Load    Load
	Receive Receive
	// Receiver, when set, is an open receiver to use instead of opening
	// the one Receive describes (the run does not close it).
	Receiver *Receiver
	Agent    *AgentConfig
	// Peer, instead of Agent, runs another agent between the sender and
	// the receiver as a process of its own: PeerRsyslog.
	Peer string
	// Drain is how long the run waits for the next delivery after the last
	// send before it counts what is missing as lost. Default 10 s.
	Drain time.Duration
	// Progress, when set, gets a progress line every second, rewritten in
	// place when ProgressTTY (a terminal), else a line every 10 s.
	Progress    io.Writer
	ProgressTTY bool
	// Metrics, when set, is read for the stage latencies after the run. A
	// run that starts an agent reads that agent's.
	Metrics *metrics.Registry
	// Logger receives the agent's logs (default: warnings to stderr).
	Logger *slog.Logger
	// TempDir holds bench.out.dir and bench.data.dir (default: os.MkdirTemp).
	TempDir string
}

// Result is the outcome of one run.
type Result struct {
	Label  string
	Config string // the agent's file, if the run started one
	Load   Load
	Report
	// Throughput is the distinct events delivered per second, from the
	// first send to the last arrival.
	Throughput float64
	Elapsed    time.Duration
	Acked      int           // events written or acknowledged by the source
	Retries    int           // calls refused by the source and sent again
	MaxLag     time.Duration // most a paced event went out after it was due
	// Stages are the agent's stage latencies (source, channel, sink,
	// end_to_end), the ones that saw events.
	Stages []metrics.StageLatency
	// CPU is the user and system CPU time the agent process used from the
	// first send to the last delivery, and PeakRSS its peak resident set
	// size (VmHWM) in bytes; both only for an agent run as a process
	// (AgentConfig.Binary, or a Peer).
	CPU     time.Duration
	PeakRSS int64
	// Switches is how many context switches the agent process's threads
	// made over the same span as CPU (threads alive at its end).
	Switches int64
	// PeakAnon is the largest anonymous RSS (RssAnon: heap and stacks,
	// not the executable's pages) seen in samples every 20 ms during the
	// run.
	PeakAnon int64
	// Round is the round of an interleaved preset this run belongs to, and
	// Base the label of the row it is compared with in that round.
	Round int
	Base  string
	Err   error // why the run ended early, if it did

	start  time.Time
	series []sample
}

// Run performs one run: it opens the receiver, starts the agent if asked,
// sends the load, waits for the deliveries, and reports.
func Run(ctx context.Context, opt Options) (*Result, error) {
	if opt.Drain <= 0 {
		opt.Drain = 10 * time.Second
	}
	if opt.Receive.Kind == "" {
		opt.Receive.Kind = ReceiveTCP
	}
	tmp := opt.TempDir
	if tmp == "" && (opt.Agent != nil || opt.Peer != "") {
		d, err := os.MkdirTemp("", "sluice-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer func() { _ = os.RemoveAll(d) }()
		tmp = d
	}
	sys := map[string]string{}
	recv := opt.Receiver
	if recv == nil {
		var err error
		recv, err = openReceiver(ctx, &opt.Receive, tmp, sys)
		if err != nil {
			return nil, err
		}
		defer recv.Close()
	}

	res := &Result{Label: opt.Label}
	load := opt.Load
	var agentProc *proc
	if opt.Peer != "" {
		if opt.Peer != PeerRsyslog {
			return nil, fmt.Errorf("bench: unknown peer %q", opt.Peer)
		}
		port, err := pickPort()
		if err != nil {
			return nil, err
		}
		_, out, _ := net.SplitHostPort(recv.Addr())
		if out == "" {
			return nil, errors.New("bench: the rsyslog peer forwards over TCP: it needs the tcp receiver")
		}
		load.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p, err := startRsyslog(ctx, tmp, strconv.Itoa(port), out)
		if err != nil {
			return nil, err
		}
		agentProc = p
		res.Config = "rsyslogd " + RsyslogPath
	} else if opt.Agent != nil && opt.Agent.Binary != "" {
		res.Config = opt.Agent.File
		if load.Addr == "" {
			port, err := pickPort()
			if err != nil {
				return nil, err
			}
			sys["bench.in.port"] = strconv.Itoa(port)
			load.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		sys["bench.data.dir"] = tmp
		for k, v := range opt.Agent.Sys {
			sys[k] = v
		}
		p, err := startSluiceProc(ctx, opt.Agent.Binary, opt.Agent, sys, tmp, load.Addr)
		if err != nil {
			return nil, err
		}
		agentProc = p
	} else if opt.Agent != nil {
		res.Config = opt.Agent.File
		if load.Addr == "" {
			port, err := pickPort()
			if err != nil {
				return nil, err
			}
			sys["bench.in.port"] = strconv.Itoa(port)
			load.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		if tmp != "" {
			sys["bench.data.dir"] = tmp
		}
		for k, v := range opt.Agent.Sys {
			sys[k] = v
		}
		log := opt.Logger
		if log == nil {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		a, err := agent.New(agent.Options{File: opt.Agent.File, Name: opt.Agent.Name, Sys: sys, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("bench: agent %s in %s: %w", opt.Agent.Name, opt.Agent.File, err)
		}
		if err := a.Start(ctx); err != nil {
			return nil, fmt.Errorf("bench: start agent %s: %w", opt.Agent.Name, err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = a.Stop(sctx)
		}()
		opt.Metrics = a.Metrics()
	} else if load.Addr == "" {
		if opt.Receive.Kind != ReceiveTCP && opt.Receive.Kind != ReceiveAvro && opt.Receive.Kind != ReceiveOTLP {
			return nil, errors.New("bench: no address to send to (--to) and no agent to start (-f)")
		}
		load.Addr = recv.Addr() // no pipeline: the floor of the machine
		switch opt.Receive.Kind {
		case ReceiveAvro:
			load.Transport = SendAvro
		case ReceiveOTLP:
			load.Transport = SendOTLP
		}
	}
	gen, err := NewGenerator(load)
	if err != nil {
		return nil, err
	}
	gen.refuseLimit = opt.Drain
	res.Load = gen.Load()

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	if opt.Progress != nil {
		go func() {
			defer close(progressDone)
			progress(opt.Progress, opt.ProgressTTY, opt.Label, gen, recv, stopProgress)
		}()
	} else {
		close(progressDone)
	}
	var cpu0 time.Duration
	var sw0 int64
	stopAnon, anon := make(chan struct{}), make(chan int64, 1)
	if agentProc != nil {
		defer func() { _ = agentProc.stop() }() // the report is made; how it exits adds nothing
		if cpu0, err = procCPU(agentProc.pid()); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if sw0, err = procSwitches(agentProc.pid()); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		go watchAnon(agentProc.pid(), stopAnon, anon)
	}
	res.Err = gen.Run(ctx)
	if opt.Receive.Kind != ReceiveNone {
		want := gen.Sent()
		for _, u := range gen.unsentRanges() {
			want -= int(u.n)
		}
		waitDeliveries(ctx, recv, want, opt.Drain)
	}
	if agentProc != nil {
		cpu1, err := procCPU(agentProc.pid())
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		res.CPU = cpu1 - cpu0
		sw1, err := procSwitches(agentProc.pid())
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		res.Switches = sw1 - sw0
		close(stopAnon)
		res.PeakAnon = <-anon
		if res.PeakRSS, err = procPeakRSS(agentProc.pid()); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if err := agentProc.stop(); err != nil && res.Err == nil {
			res.Err = err
		}
	}
	close(stopProgress)
	<-progressDone

	res.start = gen.start
	res.Report = recv.rec.report(gen.Sent(), gen.unsentRanges())
	res.Acked, res.Retries, res.MaxLag = gen.Acked(), gen.Retries(), gen.MaxLag()
	if opt.Receive.Kind == ReceiveNone {
		res.Lost = 0
	}
	if !res.LastArrival.IsZero() {
		res.Elapsed = res.LastArrival.Sub(gen.start)
		if res.Elapsed > 0 {
			res.Throughput = float64(res.Received) / res.Elapsed.Seconds()
		}
	}
	if opt.Metrics != nil {
		// A sink records its latencies just after its downstream took the
		// batch: give it a moment to catch up with the receiver.
		waitStages(ctx, opt.Metrics, uint64(res.Received))
		for _, s := range opt.Metrics.LatencySnapshot() {
			if s.Count > 0 {
				res.Stages = append(res.Stages, s)
			}
		}
		// In the order an event passes them.
		order := map[metrics.Stage]int{metrics.StageSource: 0, metrics.StageChannel: 1, metrics.StageSink: 2, metrics.StageEndToEnd: 3}
		slices.SortStableFunc(res.Stages, func(a, b metrics.StageLatency) int { return order[a.Stage] - order[b.Stage] })
	}
	res.series = recv.rec.series()
	return res, nil
}

// openReceiver opens the receiver rc asks for and notes its address or
// directory in sys.
func openReceiver(ctx context.Context, rc *Receive, tmp string, sys map[string]string) (*Receiver, error) {
	addr := rc.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var (
		r   *Receiver
		err error
	)
	switch rc.Kind {
	case ReceiveTCP:
		r, err = Listen(addr)
	case ReceiveAvro:
		r, err = ListenAvro(addr)
	case ReceiveOTLP:
		r, err = ListenOTLP(addr)
	case ReceiveDir:
		if rc.Dir == "" {
			if tmp == "" {
				return nil, errors.New("bench: the dir receiver needs a directory (--dir)")
			}
			rc.Dir = tmp + "/out"
			if err := os.MkdirAll(rc.Dir, 0o755); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
		}
		sys["bench.out.dir"] = rc.Dir
		r, err = WatchDir(rc.Dir, 0)
	case ReceiveKafka:
		if rc.Topic == "" {
			rc.Topic = "sluice-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		}
		if rc.Brokers == InProcessKafka {
			addrs, stop, err := startFakeKafka(rc.Topic)
			if err != nil {
				return nil, err
			}
			rc.Brokers = addrs
			defer func() {
				if r != nil {
					r.onClose = stop
				} else {
					stop()
				}
			}()
		}
		sys["bench.kafka.brokers"], sys["bench.kafka.topic"] = rc.Brokers, rc.Topic
		r, err = ConsumeKafka(ctx, rc.Brokers, rc.Topic)
	case ReceiveNone:
		r = NewReceiver()
	default:
		return nil, fmt.Errorf("bench: unknown receiver %q: use tcp, avro, otlp, dir, kafka or none", rc.Kind)
	}
	if err != nil {
		return nil, err
	}
	if a := r.Addr(); a != "" {
		_, port, _ := net.SplitHostPort(a)
		sys["bench.out.port"] = port
	}
	return r, nil
}

// waitDeliveries waits until want events arrived, ctx ends, or drain passes
// without an arrival.
func waitDeliveries(ctx context.Context, r *Receiver, want int, drain time.Duration) {
	last, lastChange := r.Count(), time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		n := r.Count()
		if n >= want {
			return
		}
		if n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) > drain {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-r.rec.arrived:
		case <-t.C:
		}
	}
}

// waitStages waits up to a second until the end_to_end histograms have
// seen n events.
func waitStages(ctx context.Context, reg *metrics.Registry, n uint64) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var seen uint64
		for _, s := range reg.LatencySnapshot() {
			if s.Stage == metrics.StageEndToEnd {
				seen += s.Count
			}
		}
		if seen >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// progress prints a line every second until stop: elapsed time, events
// sent and delivered, the delivery rate and the latency of the last second.
func progress(w io.Writer, tty bool, label string, g *Generator, r *Receiver, stop <-chan struct{}) {
	every, start, end := 10*time.Second, "", "\n"
	if tty {
		every, start, end = time.Second, "\r\033[K", ""
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var buf []int64
	began := time.Now()
	prev, prevAt := 0, began
	if label != "" {
		label += ": "
	}
	for {
		select {
		case <-stop:
			if tty {
				fmt.Fprint(w, start)
			}
			return
		case <-t.C:
		}
		var distinct, dups int
		buf, distinct, dups = r.rec.takeRecent(buf)
		now := time.Now()
		rate := float64(distinct-prev) / now.Sub(prevAt).Seconds()
		prev, prevAt = distinct, now
		var rep Report
		slices.Sort(buf)
		rep.fill(buf)
		fmt.Fprintf(w, "%s%s%5.0fs  sent %d  delivered %d  dup %d  %.0f ev/s  latest ms: p50 %s p99 %s max %s%s",
			start, label, now.Sub(began).Seconds(), g.Sent(), distinct, dups, rate, fmtMs(rep.P50), fmtMs(rep.P99), fmtMs(rep.Max), end)
	}
}

func pickPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// fmtMs prints d in milliseconds with 3 decimals below 10 ms, 1 above.
func fmtMs(d time.Duration) string {
	ms := float64(d) / 1e6
	if ms < 10 {
		return strconv.FormatFloat(ms, 'f', 3, 64)
	}
	return strconv.FormatFloat(ms, 'f', 1, 64)
}
