package taildir

import (
	"os"
	"path/filepath"
	"slices"
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
				f.Close()
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
