package taildir

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/fsnotify/fsnotify"
	"github.com/sluicehq/sluice/internal/atomicfile"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

const (
	// Headers of the pieces of a line longer than maxLineLength: the piece's
	// number, from 1, and whether it is the line's last piece.
	pieceHeader     = "linePiece"
	lastPieceHeader = "linePieceLast"
	// minRead and maxRead bound one read of a file.
	minRead = 4 << 10
	maxRead = 4 << 20
	// sigLen is how many bytes before a file's position are summed to
	// notice that the file was truncated and rewritten past the position:
	// enough to span several lines, so lines that repeat do not fool it.
	sigLen = 1024
	// rescanEvery is how many poll intervals pass between full rescans of
	// the directories when they are watched (the watch makes them needless
	// but for lost notifications).
	rescanEvery = 10
	// drainTimeout bounds how long a stop spends reading rotated files.
	drainTimeout = 5 * time.Second
)

// fileKey identifies a file whatever its name.
type fileKey struct{ dev, ino uint64 }

// tailFile is the state of one followed file.
type tailFile struct {
	key   fileKey
	path  string // last name it was seen under
	dir   string // directory it was last seen in
	group *group
	f     *os.File // nil while closed (idle)

	pos        int64  // every line before pos is committed
	sig        sig    // the bytes just before pos
	tail       []byte // up to sigLen bytes just before pos, when known
	size       int64  // size at the last look
	lastGrowth time.Time
	seen       uint64 // scan generation it was last seen in
	gone       bool   // no longer under a matching name: read to the end, then dropped
	flush      bool   // idle: send a partial last line as it is
	piece      int    // pieces already sent of the line at pos, split for being too long (0 at a line's start)
	// spill is set on the source's own copy of the unread lines of a file
	// rotated away before a stop (see spill.go): path is the original's,
	// and base+pos is the offset in it.
	spill string
	base  int64
}

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
	dirs    []string // the groups' directories, each once
	saved   []position
	fps     map[position]fingerprint
	startup bool
	gen     uint64

	dirty     map[*tailFile]bool
	rescan    map[string]bool
	stopping  bool // the agent closed the intake: nothing more can be put
	posDirty  bool
	lastSaved []byte
	avgLine   int
	limit     int // the most lines in one batch (flow.Batching)
	events    []event.Event
}

func newTailer(s *Source, p flow.Processor, saved []position) *tailer {
	t := &tailer{
		s: s, p: p, log: s.env.Log().With("source", s.env.Name), throttle: logthrottle.New(30*time.Second, 1),
		files: map[fileKey]*tailFile{}, byPath: map[string]*tailFile{},
		saved: saved, fps: loadFingerprints(s.positionFile), dirty: map[*tailFile]bool{}, rescan: map[string]bool{},
		avgLine: 128, limit: s.batch.Limit(p),
	}
	t.puts = flow.PutStreak(t.log, "taildir source could not put a batch; retrying", "taildir source puts batches again")
	for _, g := range s.groups {
		if !slices.Contains(t.dirs, g.dir) {
			t.dirs = append(t.dirs, g.dir)
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
			for _, d := range t.dirs {
				if err := n.add(d); err != nil {
					t.log.Warn("taildir source cannot watch a directory; polling instead", "dir", d, "every", t.s.pollInterval, "err", err)
					n.close()
					t.note = nil
					break
				}
			}
		}
	}
	t.startup = true
	for _, d := range t.dirs {
		t.scanDir(d)
	}
	t.recoverRotated()
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
	polls := 0
	for {
		t.applyNotes()
		for d := range t.rescan {
			t.scanDir(d)
		}
		clear(t.rescan)
		busy := t.readDirty(ctx)
		if t.stopping {
			// The agent closed the intake; Stop follows.
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			t.drainGone()
			return
		}
		var wait <-chan time.Time
		if busy {
			wait = closedTimeChan
		}
		select {
		case <-ctx.Done():
			t.drainGone()
			return
		case <-kick:
		case <-poll.C:
			polls++
			if t.note == nil || polls%rescanEvery == 0 {
				for _, d := range t.dirs {
					t.rescan[d] = true
				}
			}
			for _, tf := range t.files {
				if tf.gone && tf.f != nil {
					t.dirty[tf] = true
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
		if !tf.gone || tf.f == nil {
			continue
		}
		for tf.spill == "" && !t.stopping && t.readFile(ctx, tf) {
		}
		rest = append(rest, tf)
	}
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

// applyNotes turns the notifications since the last call into files to read
// and directories to rescan.
func (t *tailer) applyNotes() {
	if t.note == nil {
		return
	}
	changed, overflow := t.note.take()
	if overflow {
		for _, d := range t.dirs {
			t.rescan[d] = true
		}
		for _, tf := range t.files {
			t.dirty[tf] = true
		}
	}
	for path, op := range changed {
		if op.Has(fsnotify.Write) && op&^fsnotify.Write == 0 {
			if tf := t.byPath[path]; tf != nil {
				t.dirty[tf] = true
				continue
			}
		}
		dir := filepath.Dir(path)
		if slices.Contains(t.dirs, dir) && (t.byPath[path] != nil || t.matches(dir, filepath.Base(path))) {
			t.rescan[dir] = true
		}
	}
}

func (t *tailer) matches(dir, name string) bool {
	for _, g := range t.s.groups {
		if g.dir == dir && g.re.MatchString(name) {
			return true
		}
	}
	return false
}

// scanDir lists dir, starts following new matching files, notices renamed
// ones, and marks the files that no longer match as gone.
func (t *tailer) scanDir(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.log.Warn("taildir source cannot list a directory", "dir", dir, "err", err)
		return
	}
	t.gen++
	for _, g := range t.s.groups {
		if g.dir != dir {
			continue
		}
		for _, ent := range ents {
			name := ent.Name()
			if !g.re.MatchString(name) {
				continue
			}
			path := filepath.Join(dir, name)
			st, err := os.Stat(path)
			if err != nil || !st.Mode().IsRegular() {
				continue
			}
			key := keyOf(st)
			tf := t.files[key]
			if tf != nil && tf.seen == t.gen {
				continue // claimed by an earlier group
			}
			if tf == nil {
				tf = t.newFile(key, path, g, st.Size())
			} else if tf.path != path {
				t.log.Info("taildir source follows a renamed file", "from", tf.path, "to", path, "pos", tf.pos)
				if t.byPath[tf.path] == tf {
					delete(t.byPath, tf.path)
				}
				tf.path = path
				t.posDirty = true
			}
			tf.dir, tf.seen, tf.gone = dir, t.gen, false
			t.byPath[path] = tf
			if st.Size() != tf.size || st.Size() != tf.pos {
				t.dirty[tf] = true
			}
		}
	}
	for key, tf := range t.files {
		if tf.dir != dir || tf.seen == t.gen || tf.gone {
			continue
		}
		tf.gone = true
		if t.byPath[tf.path] == tf {
			delete(t.byPath, tf.path)
		}
		if tf.f == nil {
			delete(t.files, key)
			delete(t.dirty, tf)
			t.posDirty = true
			continue
		}
		t.log.Debug("taildir source reads a file that no longer matches to its end", "file", tf.path)
		t.dirty[tf] = true
	}
}

// newFile starts following a file: from its saved position, from its end
// (skipToEnd, files present at start only), or from 0.
func (t *tailer) newFile(key fileKey, path string, g *group, size int64) *tailFile {
	tf := &tailFile{key: key, path: path, dir: g.dir, group: g, lastGrowth: time.Now(), size: -1}
	if t.startup {
		if p, ok := t.savedPos(key.ino, path); ok && t.sameFile(tf, p) {
			tf.pos = p.Pos
			t.log.Info("taildir source continues a file from its saved position", "file", path, "inode", key.ino, "pos", p.Pos)
		} else if ok {
			t.log.Info("taildir source reads a file from the start: its inode was reused on another device", "file", path, "inode", key.ino)
		} else if t.s.skipToEnd {
			tf.pos = size
		}
	}
	t.files[key] = tf
	t.posDirty = true
	return tf
}

// savedPos finds the saved position of inode ino, preferring an entry with
// the same path (inodes of files on different devices may collide), and
// takes it out of the saved list.
func (t *tailer) savedPos(ino uint64, path string) (position, bool) {
	best := -1
	for i, p := range t.saved {
		if p.Inode != ino {
			continue
		}
		if best < 0 || p.File == path {
			best = i
		}
	}
	if best < 0 {
		return position{}, false
	}
	p := t.saved[best]
	t.saved = slices.Delete(t.saved, best, best+1)
	return p, true
}

// sameFile checks a saved position against its fingerprint, if sluice wrote
// one: a file on another device is not the one saved; otherwise the saved
// bytes before the position are kept for readFile to compare.
func (t *tailer) sameFile(tf *tailFile, p position) bool {
	fp, ok := t.fps[p]
	if !ok {
		return true
	}
	if fp.Dev != tf.key.dev {
		return false
	}
	tf.sig = sig{n: fp.SigLen, sum: fp.SigSum}
	tf.piece = fp.Piece
	return true
}

// recoverRotated runs once at start: a saved file that no longer matches
// was most likely rotated away while the source was stopped. If a file with
// its inode is still in its directory and longer than the saved position,
// its unread tail is read (then the file is dropped). Each directory is
// listed once, and only when some saved file is missing from it.
func (t *tailer) recoverRotated() {
	byDir := map[string][]position{}
	for _, p := range t.saved {
		if dir := filepath.Dir(p.File); slices.Contains(t.dirs, dir) {
			byDir[dir] = append(byDir[dir], p)
		}
	}
	for dir, lost := range byDir {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		found := map[uint64]os.FileInfo{}
		paths := map[uint64]string{}
		for _, ent := range ents {
			path := filepath.Join(dir, ent.Name())
			if t.byPath[path] != nil {
				continue
			}
			st, err := os.Stat(path)
			if err != nil || !st.Mode().IsRegular() {
				continue
			}
			found[keyOf(st).ino], paths[keyOf(st).ino] = st, path
		}
		for _, p := range lost {
			st, ok := found[p.Inode]
			if !ok || st.Size() <= p.Pos || t.files[keyOf(st)] != nil {
				continue
			}
			path := paths[p.Inode]
			f, err := os.Open(path)
			if err != nil {
				continue
			}
			key := keyOf(st)
			tf := &tailFile{key: key, path: path, dir: dir, f: f, pos: p.Pos, size: -1, lastGrowth: time.Now(), gone: true}
			if !t.sameFile(tf, p) {
				_ = f.Close() // read only
				continue
			}
			t.log.Info("taildir source reads the rest of a file rotated while it was stopped", "file", path, "was", p.File, "pos", p.Pos)
			tf.group = t.groupOf(dir, filepath.Base(p.File))
			t.files[key] = tf
			t.dirty[tf] = true
		}
	}
}

func (t *tailer) groupOf(dir, name string) *group {
	var first *group
	for _, g := range t.s.groups {
		if g.dir != dir {
			continue
		}
		if g.re.MatchString(name) {
			return g
		}
		if first == nil {
			first = g
		}
	}
	return first
}

func keyOf(st os.FileInfo) fileKey {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return fileKey{dev: uint64(sys.Dev), ino: sys.Ino}
	}
	return fileKey{}
}

// readDirty reads every file marked dirty, at most maxBatchCount batches
// each, and reports whether some file still has lines to read.
func (t *tailer) readDirty(ctx context.Context) bool {
	if len(t.dirty) == 0 {
		return false
	}
	files := make([]*tailFile, 0, len(t.dirty))
	for tf := range t.dirty {
		files = append(files, tf)
	}
	slices.SortFunc(files, func(a, b *tailFile) int { return cmpString(a.path, b.path) })
	more := false
	for _, tf := range files {
		if ctx.Err() != nil || t.stopping {
			return false
		}
		if t.readFile(ctx, tf) {
			more = true
		} else {
			delete(t.dirty, tf)
			if tf.spill != "" {
				t.finishSpill(tf)
			}
		}
	}
	return more
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readFile sends the complete lines of tf after its position, in batches of
// at most the batch limit, and reports whether it stopped at maxBatchCount with
// more to read.
func (t *tailer) readFile(ctx context.Context, tf *tailFile) bool {
	if tf.f == nil && !t.reopen(tf) {
		return false
	}
	st, err := tf.f.Stat()
	if err != nil {
		t.log.Warn("taildir source cannot stat a file", "file", tf.path, "err", err)
		return false
	}
	size := st.Size()
	if size != tf.size {
		// A spill file is complete: its last line needs no newline.
		tf.size, tf.lastGrowth, tf.flush = size, time.Now(), tf.spill != ""
	}
	if size < tf.pos {
		t.restart(tf, fmt.Sprintf("the file is now %d bytes, shorter than the position", size))
	} else if size > tf.pos && tf.sig.n > 0 && !tf.sig.matches(tf.f, tf.pos) {
		t.restart(tf, "the bytes before the position changed")
	}
	if size == tf.pos {
		tf.flush = false
		return false
	}
	var carry []byte
	var batches int64
	limit := t.s.maxLineLength
	for ctx.Err() == nil {
		// Enough for a batch of average lines; more for a long line that
		// has no newline yet, doubling, but never more than a piece of the
		// limit needs (limit+2 bytes tell a line of exactly the limit,
		// "\r\n" included, from a longer one).
		want := max(min(t.limit*t.avgLine+t.avgLine, maxRead), minRead, min(2*len(carry), limit+2), len(carry))
		slab := make([]byte, want)
		n := copy(slab, carry)
		m, err := tf.f.ReadAt(slab[n:], tf.pos+int64(n))
		if err != nil && !errors.Is(err, io.EOF) {
			t.log.Warn("taildir source cannot read a file", "file", tf.path, "err", err)
			t.s.counters.EventReadFail.Add(1)
			return false
		}
		eof := n+m < len(slab)
		data := slab[:n+m]
		chunks, consumed, piece := splitLines(data, t.limit, limit, tf.piece, eof && tf.flush)
		if len(chunks) == 0 {
			if eof {
				return false // a partial line waits for its newline
			}
			carry = data
			continue
		}
		if !t.put(ctx, tf, slab, chunks) {
			return false
		}
		t.commit(tf, data, consumed, len(chunks))
		t.split(tf, chunks)
		tf.piece = piece
		carry = data[consumed:]
		batches++
		if eof && len(chunks) < t.limit {
			// Everything that could go went; the rest (a partial line)
			// waits for more, or for the file to be idle.
			if len(carry) == 0 {
				tf.flush = false
			}
			return false
		}
		if batches >= t.s.maxBatchCount {
			return true
		}
	}
	return false
}

// split counts and logs the lines of a committed batch that were split
// into pieces (each counted at its first piece).
func (t *tailer) split(tf *tailFile, chunks []chunk) {
	for _, c := range chunks {
		if c.piece != 1 {
			continue
		}
		t.s.splitLines.Add(1)
		t.throttle.Log(t.log, slog.LevelWarn, "split", "taildir source sends a line longer than maxLineLength in pieces",
			"file", tf.path, "maxLineLength", t.s.maxLineLength, "headers", pieceHeader+", "+lastPieceHeader)
	}
}

// reopen opens a closed file by its name again, if the name still holds
// the same file.
func (t *tailer) reopen(tf *tailFile) bool {
	f, err := os.Open(tf.path)
	if err != nil {
		t.rescan[tf.dir] = true
		return false
	}
	st, err := f.Stat()
	if err != nil || keyOf(st) != tf.key {
		_ = f.Close() // read only
		t.rescan[tf.dir] = true
		return false
	}
	tf.f = f
	return true
}

// restart reads tf again from 0: it was truncated (copytruncate) or replaced
// in place. The lines between the position and the old end are then only
// in logrotate's copy, if there is one: findCopy looks for it.
func (t *tailer) restart(tf *tailFile, why string) {
	t.log.Info("taildir source reads a truncated file again from the start", "file", tf.path, "pos", tf.pos, "reason", why)
	t.findCopy(tf)
	tf.pos, tf.sig, tf.tail, tf.piece = 0, sig{}, tf.tail[:0], 0
	t.posDirty = true
}

// findCopy looks in tf's directory for a file that is not followed, is
// longer than tf's position and holds tf's last bytes just before it: the
// copy copytruncate made before truncating tf. Its bytes after the position
// are read (then it is dropped, as a file that does not match).
func (t *tailer) findCopy(tf *tailFile) {
	if tf.pos == 0 || tf.sig.n == 0 {
		return
	}
	ents, err := os.ReadDir(tf.dir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		path := filepath.Join(tf.dir, ent.Name())
		if t.byPath[path] != nil || !ent.Type().IsRegular() {
			continue
		}
		st, err := os.Stat(path)
		if err != nil || st.Size() <= tf.pos || t.files[keyOf(st)] != nil {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if !tf.sig.matches(f, tf.pos) {
			_ = f.Close() // read only
			continue
		}
		t.log.Info("taildir source reads the rest of a truncated file from its copy", "file", tf.path, "copy", path, "pos", tf.pos)
		key := keyOf(st)
		cp := &tailFile{key: key, path: path, dir: tf.dir, group: tf.group, f: f, pos: tf.pos, sig: tf.sig, piece: tf.piece,
			size: -1, lastGrowth: time.Now(), gone: true, seen: tf.seen}
		t.files[key] = cp
		t.dirty[cp] = true
		return
	}
}

// sig sums the n bytes before a position.
type sig struct {
	n   int
	sum uint64
}

func sum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// matches reports whether the n bytes of f before pos still sum the same.
func (g sig) matches(f *os.File, pos int64) bool {
	if int64(g.n) > pos {
		return false
	}
	buf := make([]byte, g.n)
	n, _ := f.ReadAt(buf, pos-int64(g.n))
	return n == g.n && sum(buf) == g.sum
}

// commit moves tf's position past the consumed bytes of a committed batch.
func (t *tailer) commit(tf *tailFile, data []byte, consumed, lines int) {
	tf.pos += int64(consumed)
	k := min(consumed, sigLen)
	tf.tail = append(tf.tail, data[consumed-k:consumed]...)
	if over := len(tf.tail) - sigLen; over > 0 {
		tf.tail = append(tf.tail[:0], tf.tail[over:]...)
	}
	tf.sig = sig{n: len(tf.tail), sum: sum(tf.tail)}
	if lines > 0 {
		t.avgLine = max(16, (t.avgLine+consumed/lines)/2)
	}
	t.posDirty = true
}

// chunk is one event's body in a read buffer: a whole line, or a piece of
// a line longer than maxLineLength.
type chunk struct {
	lo, hi int
	piece  int  // 0 for a whole line; else the piece's number, from 1
	last   bool // the last piece of a split line
}

// splitLines cuts data into at most max events. Each line is one event, its
// body without the '\n' and a '\r' before it (as in Flume); a line whose body
// is longer than limit bytes is cut into pieces of limit bytes (fewer where
// a cut would split a UTF-8 character), its last piece holding the rest.
// piece is how many pieces of the line at data[0] were already sent; the
// returned piece is the same for the line at data[consumed:]. Bytes after
// the last newline are cut as far as they are surely longer than limit,
// and with partial the rest is a last line too.
func splitLines(data []byte, max, limit, piece int, partial bool) (chunks []chunk, consumed, nextPiece int) {
	pos := 0
	for len(chunks) < max && pos < len(data) {
		// Looking limit+2 bytes ahead is enough: a longer line is cut anyway.
		window := data[pos:min(len(data), pos+limit+2)]
		var end int
		next := -1
		if i := bytes.IndexByte(window, '\n'); i >= 0 {
			end, next = pos+i, pos+i+1
			if end > pos && data[end-1] == '\r' {
				end--
			}
		} else {
			rest := len(data) - pos
			switch {
			case rest >= limit+2 || (rest == limit+1 && data[len(data)-1] != '\r'):
				end = len(data) // longer than limit whatever follows: cut below
			case partial:
				end, next = len(data), len(data)
			default:
				return chunks, pos, piece
			}
		}
		if end-pos > limit {
			cut := cutAt(data[pos:], limit)
			piece++
			chunks = append(chunks, chunk{lo: pos, hi: pos + cut, piece: piece})
			pos += cut
			continue
		}
		c := chunk{lo: pos, hi: end}
		if piece > 0 {
			c.piece, c.last = piece+1, true
		}
		chunks = append(chunks, c)
		piece, pos = 0, next
	}
	return chunks, pos, piece
}

// cutAt returns where to cut b, longer than limit, into a piece of at most
// limit bytes: at limit, or before a UTF-8 character that would straddle it.
func cutAt(b []byte, limit int) int {
	if utf8.RuneStart(b[limit]) {
		return limit
	}
	for k := limit - 1; k > 0 && k > limit-utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k]) {
			if r, size := utf8.DecodeRune(b[k:]); (r != utf8.RuneError || size > 1) && k+size > limit {
				return k
			}
			break
		}
	}
	return limit
}

// put sends the chunks of slab as one batch, retrying while the channel is
// full, and reports whether they were committed (false only when the source
// is stopping). Each attempt builds its events afresh from the slab, so a
// retry does not see what interceptors made of the failed one.
func (t *tailer) put(ctx context.Context, tf *tailFile, slab []byte, chunks []chunk) bool {
	c := t.s.counters
	n := len(chunks)
	c.EventReceived.Add(int64(n))
	c.AppendBatchReceived.Add(1)
	now := event.Now()
	for attempt := 1; ; attempt++ {
		batch := t.build(tf, slab, chunks, now)
		err := t.p.Process(ctx, batch)
		clear(batch)
		if err == nil {
			t.puts.Ok()
			break
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, flow.ErrStopping) {
			// The agent is stopping or replacing the source: nothing more
			// will be put. run waits for Stop; the position stays, so the
			// next start reads on from here.
			t.stopping = true
			return false
		}
		if errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed) {
			c.ChannelWriteFail.Add(1)
		} else {
			c.GenericProcessingFail.Add(1)
		}
		wait := min(time.Duration(attempt)*t.s.backoffIncrement, t.s.maxBackoff)
		t.puts.Fail(err, "file", tf.path, "events", n, "retry_in", wait.String())
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return false
		}
	}
	c.EventAccepted.Add(int64(n))
	c.AppendBatchAccepted.Add(1)
	return true
}

// build makes the events of one batch: the bodies are slices of slab, and
// headers are made only when some are configured or the event is a piece
// of a split line.
func (t *tailer) build(tf *tailFile, slab []byte, chunks []chunk, now int64) []event.Event {
	g := tf.group
	headers := t.s.byteOffsetHeader || t.s.fileHeader || (g != nil && len(g.headers) > 0)
	t.events = t.events[:0]
	for _, c := range chunks {
		e := event.Event{Body: slab[c.lo:c.hi:c.hi], ReceivedAt: now}
		if headers || c.piece > 0 {
			e.Headers = make(map[string]string, 4)
			if g != nil {
				for k, v := range g.headers {
					e.Headers[k] = v
				}
			}
			if t.s.fileHeader {
				e.Headers[t.s.fileHeaderKey] = tf.path
			}
			if t.s.byteOffsetHeader {
				e.Headers["byteoffset"] = strconv.FormatInt(tf.base+tf.pos+int64(c.lo), 10)
			}
			if c.piece > 0 {
				e.Headers[pieceHeader] = strconv.Itoa(c.piece)
				e.Headers[lastPieceHeader] = strconv.FormatBool(c.last)
			}
		}
		t.events = append(t.events, e)
	}
	return t.events
}

// checkIdle sends the partial last line of files idle for idleTimeout, then
// closes them; a file that no longer matches is dropped once closed.
func (t *tailer) checkIdle() {
	now := time.Now()
	for key, tf := range t.files {
		if tf.f == nil || tf.spill != "" || now.Sub(tf.lastGrowth) < t.s.idleTimeout {
			continue
		}
		st, err := tf.f.Stat()
		if err == nil && st.Size() != tf.size {
			tf.size, tf.lastGrowth = st.Size(), now
			t.dirty[tf] = true
			continue
		}
		if err == nil && st.Size() > tf.pos && !tf.flush {
			tf.flush = true
			t.dirty[tf] = true
			continue // closed at a later check, once the partial line is sent
		}
		if t.dirty[tf] {
			continue
		}
		_ = tf.f.Close() // read only
		tf.f, tf.flush = nil, false
		t.log.Debug("taildir source closed an idle file", "file", tf.path, "pos", tf.pos)
		if tf.gone {
			delete(t.files, key)
			t.posDirty = true
		}
	}
}

// savePositions writes the position file if a position changed.
func (t *tailer) savePositions() {
	if !t.posDirty {
		return
	}
	entries := make([]position, 0, len(t.files))
	fps := make([]fingerprint, 0, len(t.files))
	for _, tf := range t.files {
		if tf.spill != "" {
			continue // not a file of the groups: the spill file itself says what is left
		}
		entries = append(entries, position{Inode: tf.key.ino, Pos: tf.pos, File: tf.path})
		fps = append(fps, fingerprint{Dev: tf.key.dev, Inode: tf.key.ino, Pos: tf.pos, File: tf.path, SigLen: tf.sig.n, SigSum: tf.sig.sum, Piece: tf.piece})
	}
	slices.SortFunc(entries, func(a, b position) int { return cmpString(a.File, b.File) })
	slices.SortFunc(fps, func(a, b fingerprint) int { return cmpString(a.File, b.File) })
	data := encodePositions(entries)
	t.posDirty = false
	if bytes.Equal(data, t.lastSaved) {
		return
	}
	// The side file first: if only it is written, its entries no longer
	// match the old positions and are ignored.
	fpData, _ := json.Marshal(fps)
	err := atomicfile.WriteFile(sidecar(t.s.positionFile), fpData, 0o600)
	if err == nil {
		err = atomicfile.WriteFile(t.s.positionFile, data, 0o600)
	}
	if err != nil {
		t.posDirty = true
		t.log.Error("taildir source cannot write its position file", "file", t.s.positionFile, "err", err)
		return
	}
	t.lastSaved = data
}
