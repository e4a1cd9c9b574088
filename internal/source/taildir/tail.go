package taildirsource

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kubelet"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

const (
	// rescanEvery is how many poll intervals pass between full rescans of
	// the directories when they are watched (the watch makes them needless
	// but for lost notifications).
	rescanEvery = 10
	// drainTimeout bounds how long a stop spends reading rotated files.
	drainTimeout = 5 * time.Second
	// newFileSave is how soon the position file holds a new file.
	newFileSave = 100 * time.Millisecond
)

// tailer follows the files of one source; only its goroutine touches it.
type tailer struct {
	s        *Source
	p        flow.Processor
	log      *slog.Logger
	throttle *logthrottle.Throttle
	puts     *logthrottle.Streak // refused puts
	note     *notifier

	files   map[fileKey]*tailFile
	byPath  map[string]*tailFile
	dirs    map[string]bool // the directories followed: the groups' own, and those their wildcards match now
	saved   []position
	fps     map[position]fingerprint
	startup bool
	// truncatedAtStart are the saved files found at start with other bytes
	// before their position, as they were saved: their copies are looked
	// for once every file is found.
	truncatedAtStart []*tailFile
	gen              uint64

	dirty     map[*tailFile]bool
	rescan    map[string]bool
	stopping  bool // the agent closed the intake: nothing more can be put
	posDirty  bool
	lastSaved []byte
	avgLine   int
	limit     int // the most lines in one batch (flow.Batching)
	events    []event.Event
	arena     event.HeaderArena // the events' headers
	built     recCounts         // what buildRecords saw in the batch it last built

	static    map[string]bool // directories of groups without wildcards
	globDirs  map[string]bool // directories the groups' wildcards match now
	parents   map[string]bool // directories above those, where new ones appear
	watched   map[string]bool
	unwatched map[string]bool // directories that could not be watched: listed every poll
	expandDue bool
	globs     bool
	// rotated holds, by the name they had, the container log files
	// renamed away whose successor (the file that takes the name) has
	// not come yet.
	rotated map[string]*tailFile
	// newFiles: a file was found since the position file was written.
	newFiles bool
	lastSave time.Time // some group's directory has wildcards

	kube *kubelet.Cache // with kubernetesMetadata = kubelet; owned by the goroutine of run
}

func newTailer(s *Source, p flow.Processor, saved []position) *tailer {
	t := &tailer{
		s: s, p: p, log: s.env.Log().With("source", s.env.Name), throttle: logthrottle.New(30*time.Second, 1),
		files: map[fileKey]*tailFile{}, byPath: map[string]*tailFile{},
		saved: saved, fps: loadFingerprints(s.positionFile), dirty: map[*tailFile]bool{}, rescan: map[string]bool{},
		avgLine: 128, limit: s.batch.Limit(p), dirs: map[string]bool{}, static: map[string]bool{}, globDirs: map[string]bool{},
		parents: map[string]bool{}, watched: map[string]bool{}, unwatched: map[string]bool{},
		rotated: map[string]*tailFile{},
	}
	t.puts = flow.PutStreak(t.log, "taildir source could not put a batch; retrying", "taildir source puts batches again")
	for _, g := range s.groups {
		if !g.glob {
			t.dirs[g.dir], t.static[g.dir] = true, true
		} else {
			t.globs = true
		}
	}
	return t
}

// open sets up the directory watch and finds the files, applying the saved
// positions. Errors are only those that make the source unusable.
func (t *tailer) open() error {
	if t.s.watch {
		n, err := newNotifier(t.s.env.Name, t.log)
		if err != nil {
			t.log.Warn("taildir source cannot watch directories; polling instead", "every", t.s.pollInterval, "err", err)
		} else {
			t.note = n
			for d := range t.dirs {
				if err := n.add(d); err != nil {
					t.log.Warn("taildir source cannot watch a directory; polling instead", "dir", d, "every", t.s.pollInterval, "err", err)
					n.close()
					t.note = nil
					clear(t.watched)
					break
				}
				t.watched[d] = true
			}
		}
	}
	t.expand()
	t.startup = true
	for d := range t.dirs {
		t.scanDir(d)
	}
	clear(t.rescan)
	t.recoverRotated()
	for _, was := range t.truncatedAtStart {
		t.findCopy(was)
	}
	t.truncatedAtStart = nil
	t.loadSpills()
	t.startup, t.saved, t.fps = false, nil, nil
	t.posDirty = true
	return nil
}

func (t *tailer) close() {
	if t.note != nil {
		t.note.close()
		t.note = nil
	}
	for _, tf := range t.files {
		if tf.f != nil {
			_ = tf.f.Close() // read only
			tf.f = nil
		}
	}
}

// run follows the files until ctx ends, then writes the positions.
func (t *tailer) run(ctx context.Context) {
	defer t.close()
	defer t.savePositions()
	poll := time.NewTicker(t.s.pollInterval)
	defer poll.Stop()
	posTick := time.NewTicker(t.s.writePosInterval)
	defer posTick.Stop()
	idleTick := time.NewTicker(min(max(t.s.idleTimeout/4, 10*time.Millisecond), 5*time.Second))
	defer idleTick.Stop()
	var kick chan struct{}
	if t.note != nil {
		kick = t.note.kick
	}
	if t.kube != nil {
		// The first answer, so that the lines already in the files get
		// their pods' labels; from then on lookups never wait.
		tm := time.NewTimer(kubeletStartWait)
		select {
		case <-t.kube.Ready():
		case <-tm.C:
		case <-ctx.Done():
		}
		tm.Stop()
	}
	polls := 0
	for {
		t.applyNotes()
		if t.expandDue {
			t.expand()
		}
		for d := range t.rescan {
			t.scanDir(d)
		}
		clear(t.rescan)
		busy := t.readDirty(ctx)
		if t.newFiles && time.Since(t.lastSave) >= newFileSave {
			// A new file's inode is in the position file soon, so that
			// after a crash it is found again even if it was renamed.
			t.savePositions()
		}
		if t.stopping {
			// The agent closed the intake; Stop follows.
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			t.stop()
			return
		}
		var wait <-chan time.Time
		if busy {
			wait = closedTimeChan
		}
		select {
		case <-ctx.Done():
			t.stop()
			return
		case <-kick:
		case <-poll.C:
			polls++
			if t.note == nil || polls%rescanEvery == 0 {
				for d := range t.dirs {
					t.rescan[d] = true
				}
				t.expandDue = t.expandDue || t.globs
			}
			for d := range t.unwatched {
				t.rescan[d] = true
			}
			for _, tf := range t.files {
				if tf.gone && tf.f != nil {
					t.dirty[tf] = true
				} else if tf.link && !tf.gone {
					// Writes to a file behind a link are not seen in the
					// link's directory.
					if st, err := os.Stat(tf.path); err == nil && (st.Size() != tf.size || st.Size() != tf.pos) {
						t.dirty[tf] = true
					}
				}
			}
		case <-posTick.C:
			t.savePositions()
		case <-idleTick.C:
			t.checkIdle()
		case <-wait:
		}
	}
}

// stop runs when the source stops: the files that came since the last
// look are found (not read), so that their inodes are in the position file
// and a file renamed while the source is stopped is found again by inode;
// then drainGone.
func (t *tailer) stop() {
	t.applyNotes()
	t.expand()
	for d := range t.dirs {
		t.scanDir(d)
	}
	clear(t.rescan)
	t.drainGone()
}

// drainGone runs at stop: files that no longer match (rotated away,
// deleted) may be unreachable after a restart (compressed, removed), so
// their complete lines are sent now, through the descriptors still open,
// for at most drainTimeout. When the agent has closed the intake already
// (it does before every stop), they cannot be sent: their unread bytes are
// copied into the source's own spill files instead, read at the next start.
func (t *tailer) drainGone() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	var rest []*tailFile
	for _, tf := range t.files {
		if tf.gone && tf.f != nil {
			rest = append(rest, tf)
		}
	}
	// A file that replaced a rotated one first, as it reads the rotated
	// one's end in front of its own.
	slices.SortFunc(rest, func(a, b *tailFile) int {
		pa, pb := a.cl != nil && a.cl.pred != nil, b.cl != nil && b.cl.pred != nil
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return cmpString(a.path, b.path)
	})
	for _, tf := range rest {
		for tf.spill == "" && !t.stopping && t.files[tf.key] == tf && t.readFile(ctx, tf) {
		}
	}
	rest = slices.DeleteFunc(rest, func(tf *tailFile) bool { return t.files[tf.key] != tf || tf.f == nil })
	// What could not be sent is kept (a spill file being read keeps its
	// rest in a new one, so what it sent is not sent again).
	spillCtx, cancelSpill := context.WithTimeout(context.Background(), drainTimeout)
	defer cancelSpill()
	for _, tf := range rest {
		t.spillRest(spillCtx, tf)
	}
}

var closedTimeChan = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// checkIdle sends the partial last line of files idle for idleTimeout, then
// closes them; a file that no longer matches is dropped once closed.
func (t *tailer) checkIdle() {
	now := time.Now()
	for key, tf := range t.files {
		if tf.f == nil || tf.spill != "" || now.Sub(tf.lastGrowth) < t.s.idleTimeout || tf.cl.held() {
			continue // (a rotated file whose last line may go on in the next is closed once that one read it)
		}
		st, err := tf.f.Stat()
		if err == nil && st.Size() != tf.size {
			tf.size, tf.lastGrowth = st.Size(), now
			t.dirty[tf] = true
			continue
		}
		if err == nil && (st.Size() > tf.pos || tf.cl.pending()) && !tf.flush {
			tf.flush = true
			t.dirty[tf] = true
			continue // closed at a later check, once the partial line is sent
		}
		if t.dirty[tf] {
			continue
		}
		_ = tf.f.Close() // read only
		tf.f, tf.flush = nil, false
		t.log.Debug("taildir source closed an idle file", "file", tf.path, "inode", tf.key.ino, "pos", tf.pos, "size", tf.size, "gone", tf.gone)
		if tf.gone {
			t.forget(key, tf)
		}
	}
}
