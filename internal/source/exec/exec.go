// Package execsource is Flume's exec source ("exec"): it runs a command and turns
// each line the command writes to stdout into an event.
//
// Lines are put as soon as they are read, every complete line in hand in one
// batch, up to the batch limit (flow.Batching: batchSize when set, else the
// channels' transactionCapacity; one read of the pipe, at most 64 KiB, bounds
// it too), so batchTimeout is only an upper bound that is always met. When the channel is full the source stops reading the pipe,
// which blocks the command once the pipe buffer fills, and retries the same
// batch: unlike Flume's, this source does not lose lines on a full channel.
package execsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

const (
	readBuffer = 64 << 10
	// maxLine bounds a line held in memory; a longer one is put in pieces.
	maxLine = 16 << 20
	// stopGrace is how long a command has to exit after SIGTERM before it
	// (and its process group) gets SIGKILL.
	stopGrace = 5 * time.Second
)

// fullBackoff paces the attempts of a batch the channels refused.
var fullBackoff = flow.PutBackoff{Min: 10 * time.Millisecond, Max: time.Second}

// Source is the exec source. Build it with New.
type Source struct {
	env             flow.Env
	args            []string
	command         string
	restart         bool
	restartThrottle time.Duration
	logStderr       bool
	batch           flow.Batching
	batchTimeout    time.Duration
	counters        *metrics.SourceCounters
	retry           *flow.Retry // puts a batch until the channels take it

	worker flow.Worker // the reading goroutine
}

// New builds an exec source from Flume's properties command, shell, restart
// (false), restartThrottle (10000 ms), logStdErr (false), batchSize (20;
// left unset, batches grow to the channels' transactionCapacity:
// flow.Batching), batchTimeout (3000 ms) and charset (UTF-8).
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	s.command = p.Required("command")
	if shell := strings.Fields(p.String("shell", "")); len(shell) > 0 {
		s.args = append(shell, s.command)
	} else {
		s.args = strings.Fields(s.command)
	}
	s.restart = p.Bool("restart", false)
	s.restartThrottle = time.Duration(p.Int64("restartThrottle", 10000)) * time.Millisecond
	if s.restartThrottle < 0 {
		p.Errorf("restartThrottle", "must not be negative")
	}
	s.logStderr = p.Bool("logStdErr", false)
	s.batch = flow.ReadBatching(p, "batchSize", 20)
	s.batchTimeout = time.Duration(p.IntRange("batchTimeout", 3000, 1, math.MaxInt32)) * time.Millisecond
	checkCharset(p)
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.retry = flow.NewRetry(env.Log(), "exec", env.Name, s.counters, fullBackoff, true)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// checkCharset accepts the charsets in which a byte 0x0A is always a newline
// and a line's bytes survive Flume's decode-then-encode unchanged, so bytes
// can be passed through as read.
func checkCharset(p *config.Props) {
	v := p.String("charset", "UTF-8")
	cs := strings.ToUpper(strings.TrimSpace(v))
	switch {
	case cs == "UTF-8", cs == "UTF8", cs == "US-ASCII", cs == "ASCII",
		strings.HasPrefix(cs, "ISO-8859-"), strings.HasPrefix(cs, "WINDOWS-125"), strings.HasPrefix(cs, "CP125"):
		return
	}
	p.Errorf("charset", "charset %q is not supported; use UTF-8, US-ASCII, ISO-8859-x or windows-125x", v)
}

// BatchSize reports batchSize, so the agent can check it against the
// channels' transactionCapacity.
func (s *Source) BatchSize() int { return s.batch.Size() }

// Start runs the command in a goroutine that Stop ends.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.worker.Running() {
		return fmt.Errorf("exec %s: already started", s.env.Name)
	}
	if len(s.args) == 0 {
		return fmt.Errorf("exec %s: empty command", s.env.Name)
	}
	s.counters.Started()
	s.worker.Go("exec source "+s.env.Name, func(ctx context.Context) { s.loop(ctx, p) })
	return nil
}

// Stop terminates the command's process group (SIGTERM, then SIGKILL after
// a grace period) and waits for the source's goroutines.
func (s *Source) Stop(ctx context.Context) error {
	if !s.worker.Running() {
		return nil
	}
	defer s.counters.Stopped()
	defer s.retry.Stop()
	if err := s.worker.Stop(ctx); err != nil {
		return fmt.Errorf("exec %s: stop: %w", s.env.Name, err)
	}
	return nil
}

func (s *Source) loop(ctx context.Context, p flow.Processor) {
	log := s.env.Log().With("source", s.env.Name, "command", s.command)
	for {
		code, err := s.runOnce(ctx, p, log)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Error("exec source command failed", "err", err)
		}
		if !s.restart {
			log.Info("exec source command exited", "exit_code", code)
			return
		}
		log.Info("exec source restarting the command", "exit_code", code, "in", s.restartThrottle)
		t := time.NewTimer(s.restartThrottle)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// runOnce runs the command until it exits or ctx ends, putting its lines.
func (s *Source) runOnce(ctx context.Context, p flow.Processor, log *slog.Logger) (int, error) {
	cmd := exec.CommandContext(ctx, s.args[0], s.args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return -1, err
	}
	stderr := &stderrLog{log: log, enabled: s.logStderr}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start %q: %w", s.command, err)
	}
	pid := cmd.Process.Pid
	rerr := s.read(ctx, stdout, p)
	if rerr != nil && ctx.Err() == nil {
		// Stop reading means the command would block forever: end it.
		_ = syscall.Kill(-pid, syscall.SIGTERM) // fails only when the group is gone already
	}
	werr := cmd.Wait()
	// Whatever the leader left behind in its group goes too.
	_ = syscall.Kill(-pid, syscall.SIGKILL) // usually nothing is left: ESRCH
	stderr.flush()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if rerr != nil && ctx.Err() == nil {
		return code, rerr
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) && ctx.Err() == nil {
		return code, werr
	}
	return code, nil
}

// read puts the lines of r until EOF. Lines end at "\n", "\r" or "\r\n", as
// Java's readLine splits them; a last line without an end is a line too.
func (s *Source) read(ctx context.Context, r io.Reader, p flow.Processor) error {
	lr := lineReader{buf: make([]byte, readBuffer)}
	limit := s.batch.Limit(p)
	b := batcher{s: s, p: p, events: make([]event.Event, 0, min(limit, flow.DefaultBatchSize))}
	for {
		n, err := r.Read(lr.buf[lr.w:])
		lr.w += n
		eof := err != nil
		if perr := lr.lines(eof, limit, func(slab []byte, bounds []int) error {
			return b.put(ctx, slab, bounds)
		}); perr != nil {
			return perr
		}
		if eof {
			if errors.Is(err, io.EOF) || errors.Is(err, exec.ErrWaitDelay) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read stdout: %w", err)
		}
		lr.makeRoom()
	}
}

// lineReader splits a byte stream into lines.
type lineReader struct {
	buf    []byte
	r, w   int  // unread input is buf[r:w]
	skipLF bool // the last line ended with '\r': a '\n' right after it is part of that end
	bounds []int
}

// lines calls put with every complete line in buf[r:w], in groups of at
// most batch lines: slab holds the group's bodies and bounds the start and
// end of each. At eof a trailing partial line counts as a line.
func (lr *lineReader) lines(eof bool, batch int, put func(slab []byte, bounds []int) error) error {
	for {
		lr.bounds = lr.bounds[:0]
		data := lr.buf[lr.r:lr.w]
		pos := 0
		for len(lr.bounds) < 2*batch {
			if lr.skipLF && pos < len(data) {
				if data[pos] == '\n' {
					pos++
				}
				lr.skipLF = false
			}
			i := bytes.IndexAny(data[pos:], "\r\n")
			if i < 0 {
				if eof && pos < len(data) {
					lr.bounds = append(lr.bounds, pos, len(data))
					pos = len(data)
				} else if len(data)-pos >= maxLine {
					lr.bounds = append(lr.bounds, pos, pos+maxLine)
					pos += maxLine
				}
				break
			}
			lr.bounds = append(lr.bounds, pos, pos+i)
			if data[pos+i] == '\r' {
				lr.skipLF = true
			}
			pos += i + 1
		}
		if len(lr.bounds) == 0 {
			lr.r += pos
			return nil
		}
		first, last := lr.bounds[0], lr.bounds[len(lr.bounds)-1]
		slab := make([]byte, last-first)
		copy(slab, data[first:last])
		for i := range lr.bounds {
			lr.bounds[i] -= first
		}
		if err := put(slab, lr.bounds); err != nil {
			return err
		}
		lr.r += pos
	}
}

// makeRoom moves unread input to the front and grows the buffer when a
// partial line fills it.
func (lr *lineReader) makeRoom() {
	if lr.r == lr.w {
		lr.r, lr.w = 0, 0
		return
	}
	if lr.w < len(lr.buf) {
		return
	}
	if lr.r > 0 {
		lr.w = copy(lr.buf, lr.buf[lr.r:lr.w])
		lr.r = 0
		return
	}
	nb := make([]byte, min(2*len(lr.buf), maxLine+readBuffer))
	lr.w = copy(nb, lr.buf[lr.r:lr.w])
	lr.r, lr.buf = 0, nb
}

// batcher puts batches, retrying until they commit or the source stops.
type batcher struct {
	s       *Source
	p       flow.Processor
	events  []event.Event
	scratch []event.Event
}

func (b *batcher) put(ctx context.Context, slab []byte, bounds []int) error {
	c := b.s.counters
	b.events = b.events[:0]
	now := event.Now()
	for i := 0; i < len(bounds); i += 2 {
		lo, hi := bounds[i], bounds[i+1]
		b.events = append(b.events, event.Event{Body: slab[lo:hi:hi], ReceivedAt: now})
	}
	n := len(b.events)
	c.EventReceived.Add(int64(n))
	err := b.s.retry.Put(ctx, b.p, func() []event.Event {
		b.scratch = append(b.scratch[:0], b.events...)
		return b.scratch
	}, nil)
	if errors.Is(err, flow.ErrStopping) {
		// The agent is stopping: nothing more will be put. The command's
		// output waits in the pipe until Stop ends it.
		<-ctx.Done()
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	c.EventAccepted.Add(int64(n))
	c.AppendBatchAccepted.Add(1)
	return nil
}

// stderrLog receives the command's stderr and logs it line by line when
// logStdErr is set (it is read either way, so the command never blocks on it).
type stderrLog struct {
	log     *slog.Logger
	enabled bool
	partial []byte
	n       int
}

func (w *stderrLog) Write(b []byte) (int, error) {
	if !w.enabled {
		return len(b), nil
	}
	data := b
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if len(w.partial)+len(data) > 64<<10 {
				data = data[:max(0, 64<<10-len(w.partial))]
			}
			w.partial = append(w.partial, data...)
			return len(b), nil
		}
		line := append(w.partial, data[:i]...)
		w.partial = w.partial[:0]
		w.emit(line)
		data = data[i+1:]
	}
}

func (w *stderrLog) emit(line []byte) {
	w.n++
	w.log.Info("exec source command stderr", "line", w.n, "text", string(bytes.TrimSuffix(line, []byte("\r"))))
}

func (w *stderrLog) flush() {
	if w.enabled && len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = nil
	}
}
