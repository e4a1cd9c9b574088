package hdfssink

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/panics"
)

// finisher renames or uploads closed files in the background, with
// hdfs.threadsPoolSize goroutines, retrying failures with a doubling wait
// up to hdfs.retryInterval (hdfs.closeTries bounds the tries of one run;
// the journal keeps the file for the next start either way).
type finisher struct {
	w       *Writer
	workers int

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*finishItem
	busy    int
	pending int64 // bytes queued or being finished
	stopped bool
	failing time.Time // since when every finish has failed; zero when one worked
	lastErr error
	streak  *logthrottle.Streak // tells a run of failed finishes, and its end

	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

type finishItem struct {
	rec   *record
	size  int64
	tries int
	next  time.Time
}

// healthGrace is how long finishing may fail before /healthz says so.
var healthGrace = 30 * time.Second

func newFinisher(w *Writer) *finisher {
	f := &finisher{w: w, workers: max(1, w.opt.Threads), streak: &logthrottle.Streak{Log: w.log, Level: slog.LevelWarn,
		Failed: "hdfs: finishing a file failed; retrying", Recovered: "hdfs: finishing files again"}}
	f.cond = sync.NewCond(&f.mu)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

func (f *finisher) start() {
	for range f.workers {
		f.wg.Add(1)
		panics.Go("hdfs sink "+f.w.c.Name+": finisher", f.run)
	}
	// A ticker wakes the workers when a retry falls due.
	f.wg.Add(1)
	panics.Go("hdfs sink "+f.w.c.Name+": finisher timer", func() {
		defer f.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-t.C:
				f.cond.Broadcast()
			}
		}
	})
}

func (f *finisher) add(rec *record, size int64) {
	f.mu.Lock()
	f.queue = append(f.queue, &finishItem{rec: rec, size: size})
	f.pending += size
	f.mu.Unlock()
	f.cond.Signal()
}

// next takes the first item due, waiting for one; nil when stopped.
func (f *finisher) next() *finishItem {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if f.stopped {
			return nil
		}
		now := time.Now()
		for i, it := range f.queue {
			if !it.next.After(now) {
				f.queue = append(f.queue[:i], f.queue[i+1:]...)
				f.busy++
				return it
			}
		}
		f.cond.Wait()
	}
}

func (f *finisher) run() {
	defer f.wg.Done()
	for {
		it := f.next()
		if it == nil {
			return
		}
		start := time.Now()
		err := f.w.store.finish(f.ctx, it.rec, f.w.j)
		if err == nil {
			err = f.w.j.remove(it.rec)
		}
		f.mu.Lock()
		f.busy--
		if err == nil {
			f.pending -= it.size
			f.failing, f.lastErr = time.Time{}, nil
			f.mu.Unlock()
			f.w.c.finishLatency.Observe(time.Since(start))
			f.w.c.ConnectionClosed.Add(1)
			f.w.c.closed.Add(1)
			f.w.log.Debug("hdfs: finished file", "file", it.rec.Target, "took", time.Since(start))
			f.streak.Ok("store", f.w.store.String())
			f.cond.Broadcast()
			continue
		}
		if f.failing.IsZero() {
			f.failing = time.Now()
		}
		f.lastErr = err
		it.tries++
		stopped := f.stopped
		giveUp := f.w.opt.CloseTries > 0 && it.tries >= f.w.opt.CloseTries
		if giveUp || stopped {
			f.pending -= it.size
		} else {
			wait := min(time.Second<<min(it.tries-1, 20), max(f.w.opt.RetryInterval, time.Second))
			it.next = time.Now().Add(wait)
			f.queue = append(f.queue, it)
		}
		f.mu.Unlock()
		f.w.c.ConnectionFailed.Add(1)
		f.w.c.failed.Add(1)
		if stopped {
			continue
		}
		if giveUp {
			f.w.log.Error("hdfs: gave up finishing a file after hdfs.closeTries tries; it stays in the staging journal and is finished at the next start",
				"file", it.rec.Target, "tries", it.tries, "err", err)
		} else {
			f.streak.Fail(err, "file", it.rec.Target, "store", f.w.store.String())
		}
		f.cond.Broadcast()
	}
}

// pushback returns an error while more closed bytes wait to be finished
// than the sink may hold back, so the batch stays in the channel.
func (f *finisher) pushback() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.w.opt.MaxPendingBytes > 0 && f.pending > f.w.opt.MaxPendingBytes {
		return fmt.Errorf("hdfs: %d bytes of closed files wait to be finished in %s (last error: %v); taking no more events until the store takes them",
			f.pending, f.w.store, f.lastErr)
	}
	return nil
}

func (f *finisher) health() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failing.IsZero() && time.Since(f.failing) > healthGrace {
		return fmt.Errorf("hdfs sink cannot finish files in %s for %s (%d waiting): %v",
			f.w.store, time.Since(f.failing).Round(time.Second), len(f.queue)+f.busy, f.lastErr)
	}
	return nil
}

// drain waits until every queued file is finished or ctx ends, stops the
// workers, and returns how many files were left.
func (f *finisher) drain(ctx context.Context) int {
	done := make(chan struct{})
	panics.Go("hdfs sink "+f.w.c.Name+": stop", func() {
		f.mu.Lock()
		for (len(f.queue) > 0 || f.busy > 0) && !f.stopped {
			f.cond.Wait()
		}
		f.mu.Unlock()
		close(done)
	})
	select {
	case <-done:
	case <-ctx.Done():
	}
	f.mu.Lock()
	f.stopped = true
	left := len(f.queue) + f.busy
	f.mu.Unlock()
	f.cancel()
	f.cond.Broadcast()
	f.wg.Wait()
	<-done
	f.streak.Stop()
	return left
}
