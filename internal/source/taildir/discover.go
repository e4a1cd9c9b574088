package taildirsource

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// applyNotes turns the notifications since the last call into files to read
// and directories to rescan.
func (t *tailer) applyNotes() {
	if t.note == nil {
		return
	}
	changed, overflow := t.note.take()
	if overflow {
		for d := range t.dirs {
			t.rescan[d] = true
		}
		for _, tf := range t.files {
			t.dirty[tf] = true
		}
		t.expandDue = len(t.parents) > 0
	}
	for path, op := range changed {
		if op.Has(fsnotify.Write) && op&^fsnotify.Write == 0 {
			if tf := t.byPath[path]; tf != nil {
				t.dirty[tf] = true
				continue
			}
		}
		dir := filepath.Dir(path)
		if t.parents[dir] || (t.globDirs[path] && op.Has(fsnotify.Remove)) {
			t.expandDue = true // a directory of a wildcard came or went
		}
		if t.dirs[dir] && (t.byPath[path] != nil || t.matches(dir, filepath.Base(path))) {
			t.rescan[dir] = true
		}
	}
}

func (t *tailer) matches(dir, name string) bool {
	for _, g := range t.s.groups {
		if g.hasDir(dir) && g.re.MatchString(name) {
			return true
		}
	}
	return false
}

// addDir starts following directory d: watches it (when the source
// watches) and lists it.
func (t *tailer) addDir(d string) {
	t.dirs[d] = true
	t.watchDir(d)
	t.rescan[d] = true
}

// watchDir watches d for changes. Where it cannot (the inotify watch limit
// reached), d is listed at every poll instead.
func (t *tailer) watchDir(d string) {
	if t.note == nil || t.watched[d] {
		return
	}
	if err := t.note.add(d); err != nil {
		t.unwatched[d] = true
		t.throttle.Log(t.log, slog.LevelWarn, "watch", "taildir source cannot watch a directory; it is listed every pollInterval instead",
			"dir", d, "every", t.s.pollInterval, "err", err)
		return
	}
	t.watched[d] = true
}

// expand finds the directories of the file groups with wildcards, as pods
// and containers come and go: a new one is watched and listed; the files
// of one that went are read to their end through their open descriptors,
// then dropped with their positions. The directories above them are
// watched too, so that a new pod's directory is found at once.
func (t *tailer) expand() {
	t.expandDue = false
	leaves, parents := map[string]bool{}, map[string]bool{}
	for _, g := range t.s.groups {
		if !g.glob {
			continue
		}
		for _, d := range globDirs(g.dir) {
			leaves[d] = true
		}
		pat := g.root
		rest := strings.Split(strings.TrimPrefix(g.dir, strings.TrimSuffix(g.root, "/")+"/"), "/")
		for _, part := range rest {
			for _, d := range globDirs(pat) {
				parents[d] = true
			}
			pat = filepath.Join(pat, part)
		}
	}
	for d := range parents {
		if !t.parents[d] {
			t.parents[d] = true
			t.watchDir(d)
		}
	}
	for d := range t.parents {
		if !parents[d] {
			delete(t.parents, d)
			t.unwatch(d)
		}
	}
	for d := range leaves {
		if !t.globDirs[d] {
			t.globDirs[d] = true
			if !t.dirs[d] {
				t.log.Debug("taildir source follows a new directory", "dir", d)
				t.addDir(d)
			}
		}
	}
	for d := range t.globDirs {
		if !leaves[d] {
			delete(t.globDirs, d)
			if !t.static[d] {
				t.dropDir(d)
			}
		}
	}
}

// globDirs returns the directories that match pattern.
func globDirs(pattern string) []string {
	names, _ := filepath.Glob(pattern)
	out := names[:0]
	for _, n := range names {
		if st, err := os.Stat(n); err == nil && st.IsDir() {
			out = append(out, n)
		}
	}
	return out
}

func (t *tailer) unwatch(d string) {
	if t.watched[d] {
		delete(t.watched, d)
		t.note.remove(d)
	}
}

// dropDir stops following directory d, which is gone: its files are read
// to their end through the descriptors still open, then dropped.
func (t *tailer) dropDir(d string) {
	delete(t.dirs, d)
	delete(t.unwatched, d)
	delete(t.rescan, d)
	t.unwatch(d)
	t.log.Debug("taildir source no longer follows a directory that is gone", "dir", d)
	for key, tf := range t.files {
		if tf.dir == d && !tf.gone {
			t.goneFile(key, tf)
		}
	}
}

// goneFile marks tf, no longer under a matching name, as gone: read to its
// end if it is open, else dropped.
func (t *tailer) goneFile(key fileKey, tf *tailFile) {
	tf.gone = true
	if t.byPath[tf.path] == tf {
		delete(t.byPath, tf.path)
	}
	if tf.f == nil && (tf.size < 0 || tf.size > tf.pos) {
		t.reopen(tf) // renamed away with lines not read yet: read them
	}
	if tf.cl != nil && tf.cl.succ == nil && tf.f != nil {
		t.rotated[tf.path] = tf // the file that takes its name may continue its last line
	}
	if tf.f == nil {
		t.forget(key, tf)
		return
	}
	t.log.Debug("taildir source reads a file that no longer matches to its end", "file", tf.path, "inode", tf.key.ino, "pos", tf.pos)
	t.dirty[tf] = true
}

// forget drops tf and its position.
func (t *tailer) forget(key fileKey, tf *tailFile) {
	if t.rotated[tf.path] == tf {
		delete(t.rotated, tf.path)
	}
	t.release(tf)
	delete(t.files, key)
	delete(t.dirty, tf)
	t.posDirty = true
}

// scanDir lists dir, starts following new matching files, notices renamed
// ones, and marks the files that no longer match as gone.
func (t *tailer) scanDir(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if t.globDirs[dir] && !t.static[dir] && errors.Is(err, fs.ErrNotExist) {
			t.expandDue = true // a pod's directory removed: expand drops it
			return
		}
		t.log.Warn("taildir source cannot list a directory", "dir", dir, "err", err)
		return
	}
	t.gen++
	for _, g := range t.s.groups {
		if !g.hasDir(dir) {
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
				tf = t.newFile(key, dir, path, g, st.Size())
				old := t.byPath[path]
				if old == nil {
					old = t.rotated[path] // renamed away before this one came
				}
				if old != nil && old != tf && old.cl != nil && tf.cl != nil && old.cl.succ == nil {
					// The file that had this name was rotated: its last line
					// may go on here.
					tf.cl.pred, old.cl.succ = old, tf
					delete(t.rotated, path)
				}
				if lst, err := os.Lstat(path); err == nil && lst.Mode()&os.ModeSymlink != 0 {
					tf.link = true
				}
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
		t.goneFile(key, tf)
	}
}

// newFile starts following a file: from its saved position, from its end
// (skipToEnd, files present at start only), or from 0.
func (t *tailer) newFile(key fileKey, dir, path string, g *group, size int64) *tailFile {
	tf := &tailFile{key: key, path: path, dir: dir, group: g, lastGrowth: time.Now(), size: -1, cl: newRecFile(g)}
	if t.startup {
		if p, ok := t.savedPos(key.ino, path); ok && t.sameFile(tf, p) && t.sameBytes(tf, path, p.Pos) {
			tf.pos = p.Pos
			t.log.Info("taildir source continues a file from its saved position", "file", path, "inode", key.ino, "pos", p.Pos, "sent", tf.sentState())
		} else if ok && tf.sig.n > 0 {
			// The saved file was deleted and its inode given to this one
			// (a rotated file compressed while the source was stopped), or
			// it is the same file truncated in place (copytruncate while
			// the source was stopped, or just before it stopped, unseen):
			// then the lines after the position are in logrotate's copy,
			// which findCopy looks for once every file is found.
			t.log.Info("taildir source reads a file from the start: its inode was reused, or it was truncated", "file", path, "inode", key.ino)
			was := *tf
			was.pos = p.Pos
			if tf.cl != nil {
				cl := *tf.cl
				was.cl = &cl
			}
			t.truncatedAtStart = append(t.truncatedAtStart, &was)
			tf.sig, tf.piece = sig{}, 0
			if tf.cl != nil {
				tf.cl.st = recState{}
			}
		} else if ok {
			t.log.Info("taildir source reads a file from the start: its inode was reused on another device", "file", path, "inode", key.ino)
		} else if t.s.skipToEnd {
			tf.pos = size
		}
	}
	// Opened at once: a file renamed before its first read is still read
	// through this descriptor (a rotation soon after a restart).
	tf.f = openKey(path, key)
	t.files[key] = tf
	t.posDirty, t.newFiles = true, true
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
	if tf.cl != nil {
		tf.cl.st = fp.recState()
	}
	return true
}

// sameBytes checks, when the saved position has a signature, that the
// bytes before the position are still those: otherwise the file is not the
// one the position was saved for.
func (t *tailer) sameBytes(tf *tailFile, path string, pos int64) bool {
	if tf.sig.n == 0 {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return true // readFile finds out
	}
	defer f.Close()
	return tf.sig.matches(f, pos)
}

// recoverRotated runs once at start: a saved file that no longer matches
// was most likely rotated away while the source was stopped. If a file with
// its inode is still in its directory and longer than the saved position,
// its unread tail is read (then the file is dropped). Each directory is
// listed once, and only when some saved file is missing from it.
func (t *tailer) recoverRotated() {
	byDir := map[string][]position{}
	for _, p := range t.saved {
		if dir := filepath.Dir(p.File); t.dirs[dir] {
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
			tf.group = t.groupOf(dir, filepath.Base(p.File))
			tf.cl = newRecFile(tf.group)
			if !t.sameFile(tf, p) {
				_ = f.Close() // read only
				continue
			}
			t.log.Info("taildir source reads the rest of a file rotated while it was stopped", "file", path, "was", p.File, "pos", p.Pos)
			if y := t.byPath[p.File]; y != nil && y.pos == 0 && y.cl != nil && tf.cl != nil && y.cl.pred == nil && y.cl.st == (recState{}) {
				// The file under its name now replaced it (while the source
				// was stopped, or before a crash it took over nothing yet):
				// its first records may continue the last line.
				y.cl.pred, tf.cl.succ = tf, y
			}
			t.files[key] = tf
			t.dirty[tf] = true
		}
	}
}

func (t *tailer) groupOf(dir, name string) *group {
	var first *group
	for _, g := range t.s.groups {
		if !g.hasDir(dir) {
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
