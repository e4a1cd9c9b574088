package taildirsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// minRead and maxRead bound one read of a file.
const (
	minRead = 4 << 10
	maxRead = 4 << 20
)

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
	if tf.cl != nil {
		return t.readRecords(ctx, tf, size)
	}
	return t.readLines(ctx, tf, size)
}

// readRoom is how many bytes a read at off needs to take what the file
// holds there, and one more to see its end: a live file that grew by a
// line is read into a slab of that size, not of a whole batch's (on a
// node, hundreds of live container logs each made a batch's slab of
// garbage, over 100 KB, per append). The size is asked again when the last
// one known is behind off: the file grows while it is read.
func (t *tailer) readRoom(tf *tailFile, off int64) int {
	if tf.size <= off {
		if st, err := tf.f.Stat(); err == nil && st.Size() > tf.size {
			tf.size, tf.lastGrowth = st.Size(), time.Now()
		}
	}
	return int(min(max(tf.size-off, 0), maxRead)) + 1
}

// readLines is readFile for a file of lines.
func (t *tailer) readLines(ctx context.Context, tf *tailFile, size int64) bool {
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
		want := max(min(t.limit*t.avgLine+t.avgLine, maxRead, len(carry)+t.readRoom(tf, tf.pos+int64(len(carry)))),
			minRead, min(2*len(carry), limit+2), len(carry))
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
	if f := openKey(tf.path, tf.key); f != nil {
		tf.f = f
		return true
	}
	t.rescan[tf.dir] = true
	// Renamed while closed (a rotation right after the file went idle):
	// it is still in its directory under another name.
	ents, err := os.ReadDir(tf.dir)
	if err != nil {
		return false
	}
	for _, ent := range ents {
		if !ent.Type().IsRegular() {
			continue
		}
		if info, err := ent.Info(); err != nil || keyOf(info) != tf.key {
			continue
		}
		if f := openKey(filepath.Join(tf.dir, ent.Name()), tf.key); f != nil {
			t.log.Debug("taildir source found a file renamed while it was closed", "file", tf.path, "now", ent.Name())
			tf.f = f
			return true
		}
	}
	return false
}

// openKey opens path if it still holds the file key.
func openKey(path string, key fileKey) *os.File {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	st, err := f.Stat()
	if err != nil || keyOf(st) != key {
		_ = f.Close() // read only
		return nil
	}
	return f
}

// restart reads tf again from 0: it was truncated (copytruncate) or replaced
// in place. The lines between the position and the old end are then only
// in logrotate's copy, if there is one: findCopy looks for it.
func (t *tailer) restart(tf *tailFile, why string) {
	t.log.Info("taildir source reads a truncated file again from the start", "file", tf.path, "pos", tf.pos, "reason", why)
	t.findCopy(tf)
	tf.pos, tf.sig, tf.tail, tf.piece = 0, sig{}, tf.tail[:0], 0
	if tf.cl != nil {
		tf.cl.st = recState{}
		t.release(tf)
	}
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
			size: -1, lastGrowth: time.Now(), gone: true, seen: tf.seen, link: tf.link}
		if tf.cl != nil {
			cp.cl = &recFile{format: tf.cl.format, st: tf.cl.st}
		}
		t.files[key] = cp
		t.dirty[cp] = true
		return
	}
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
