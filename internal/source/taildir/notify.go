package taildirsource

import (
	"errors"
	"log/slog"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/internal/panics"
)

// notifier collects directory notifications from fsnotify into a set of
// changed paths, so that a burst of writes to one file is one entry however
// many events it makes, and the kernel's queue is drained while the tailer
// is busy putting batches.
type notifier struct {
	w    *fsnotify.Watcher
	log  *slog.Logger
	kick chan struct{} // capacity 1: something changed
	done chan struct{}

	mu       sync.Mutex
	changed  map[string]fsnotify.Op
	overflow bool // events were lost: rescan everything
}

func newNotifier(name string, log *slog.Logger) (*notifier, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	n := &notifier{w: w, log: log, kick: make(chan struct{}, 1), done: make(chan struct{}), changed: map[string]fsnotify.Op{}}
	panics.Go("taildir source "+name+": directory watch", n.run)
	return n, nil
}

func (n *notifier) add(dir string) error { return n.w.Add(dir) }

// remove stops watching dir; a directory deleted is no longer watched
// anyway, so errors do not matter.
func (n *notifier) remove(dir string) { _ = n.w.Remove(dir) }

func (n *notifier) run() {
	defer close(n.done)
	for {
		select {
		case ev, ok := <-n.w.Events:
			if !ok {
				return
			}
			n.mu.Lock()
			n.changed[ev.Name] |= ev.Op
			n.mu.Unlock()
		case err, ok := <-n.w.Errors:
			if !ok {
				return
			}
			n.mu.Lock()
			n.overflow = true
			n.mu.Unlock()
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				n.log.Warn("taildir source file watch error; rescanning", "err", err)
			}
		}
		select {
		case n.kick <- struct{}{}:
		default:
		}
	}
}

// take returns and clears what changed since the last call.
func (n *notifier) take() (map[string]fsnotify.Op, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.changed) == 0 && !n.overflow {
		return nil, false
	}
	c, o := n.changed, n.overflow
	n.changed, n.overflow = map[string]fsnotify.Op{}, false
	return c, o
}

func (n *notifier) close() {
	_ = n.w.Close() // ends the watcher's goroutine, awaited next
	<-n.done
}
