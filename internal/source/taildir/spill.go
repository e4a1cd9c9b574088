package taildirsource

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/atomicfile"
	"github.com/sluicehq/sluice/internal/containerlog"
)

// Spill files keep the unread lines of files rotated away (or deleted)
// across a stop. The agent closes a source's intake before it stops it, so
// at Stop those lines can no longer be put; and logrotate may compress or
// delete the rotated file before the next start, taking them along. So
// Stop copies them, through the descriptor still open, into a file of the
// source's own beside the position file, and moves the rotated file's
// position past them; the next start sends them, then deletes the copy.
//
// A spill file is positionFile + ".spill-" + a unique suffix: one JSON
// line (spillHeader), then the bytes of the original file from Pos to its
// end at the stop.
type spillHeader struct {
	File  string `json:"file"`            // the original file's last path
	Pos   int64  `json:"pos"`             // its offset of the first byte after this line
	Piece int    `json:"piece,omitempty"` // pieces already sent of the line at Pos
	// Of a file of container log records: its format, the record state
	// at Pos (as the position file's side file keeps it), and the inode of
	// the file that replaced it under its name, whose first records may
	// continue its last line (recFile).
	Format string `json:"format,omitempty"`
	Pieces []int  `json:"pieces,omitempty"`
	Sent   int    `json:"sent,omitempty"`
	Flush  bool   `json:"flush,omitempty"`
	Next   uint64 `json:"next,omitempty"`
}

// maxSpillHeader bounds the header line a spill file may start with.
const maxSpillHeader = 64 << 10

func spillPrefix(positionFile string) string { return filepath.Base(positionFile) + ".spill-" }

// spillRest copies the bytes of tf after its position into a new spill
// file and moves the position past them, so the next start sends them
// even if tf is gone by then. tf may itself be a spill file being read:
// its rest goes into a new one and it is deleted.
func (t *tailer) spillRest(ctx context.Context, tf *tailFile) {
	st, err := tf.f.Stat()
	if err != nil || st.Size() <= tf.pos {
		return
	}
	end := st.Size()
	h := spillHeader{File: tf.path, Pos: tf.base + tf.pos, Piece: tf.piece}
	if cl := tf.cl; cl != nil {
		if cl.format != containerlog.Unknown {
			h.Format = cl.format.String()
		}
		var fp fingerprint
		fp.keepRecState(cl.st)
		h.Pieces, h.Sent, h.Flush = fp.Pieces, fp.Sent, fp.Flush
		if cl.succ != nil {
			h.Next = cl.succ.key.ino
		}
	}
	hdr, _ := json.Marshal(h)
	dir := filepath.Dir(t.s.positionFile)
	name := filepath.Join(dir, spillPrefix(t.s.positionFile)+strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.FormatUint(tf.key.ino, 36))
	n, err := writeSpill(ctx, name, hdr, io.NewSectionReader(tf.f, tf.pos, end-tf.pos))
	if err != nil {
		t.log.Error("taildir source cannot keep the unread lines of a file rotated away; they are lost if it is compressed or deleted before the next start",
			"file", tf.path, "pos", tf.base+tf.pos, "bytes", end-tf.pos, "err", err)
		return
	}
	t.log.Info("taildir source keeps the unread lines of a file rotated away for its next start",
		"file", tf.path, "pos", tf.base+tf.pos, "bytes", n, "copy", name)
	tf.pos += n
	tf.sig, tf.tail, tf.piece = sig{}, tf.tail[:0], 0
	if tf.spill == "" {
		// The position saved keeps the bytes before it, as every other
		// does: a file given this one's inode while the source is stopped
		// (the kubelet compresses a rotated log, then deletes it) is then
		// told apart from it and read from its start. Without them it was
		// taken for this file, read from this position, and not joined to
		// the file it continues.
		k := min(tf.pos, sigLen)
		buf := make([]byte, k)
		if m, _ := tf.f.ReadAt(buf, tf.pos-k); int64(m) == k {
			tf.tail = append(tf.tail, buf...)
			tf.sig = sig{n: int(k), sum: sum(buf)}
		}
	}
	if tf.cl != nil {
		// Its rest is the spill file's now, line in progress and successor too.
		tf.cl.st = recState{}
		t.release(tf)
	}
	t.posDirty = true
	if tf.spill != "" {
		t.dropSpill(tf)
	}
}

// writeSpill writes hdr, a newline and what src holds into a new file at
// path (temporary file, fsync, rename, fsync of the directory), copying
// until ctx ends, and returns how many bytes of src it kept.
func writeSpill(ctx context.Context, path string, hdr []byte, src io.Reader) (int64, error) {
	var n int64
	err := atomicfile.Write(path, 0o600, func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 1<<20)
		w.Write(hdr)
		w.WriteByte('\n')
		buf := make([]byte, 1<<20)
		for ctx.Err() == nil {
			m, rerr := src.Read(buf)
			if m > 0 {
				if _, err := w.Write(buf[:m]); err != nil {
					return err
				}
				n += int64(m)
			}
			if rerr != nil {
				if !errors.Is(rerr, io.EOF) {
					return rerr
				}
				break
			}
		}
		return w.Flush()
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// loadSpills starts reading the spill files a previous stop left: each is
// followed as a file that no longer matches, from after its header, and
// sent to its end (a last line without a newline too).
func (t *tailer) loadSpills() {
	dir := filepath.Dir(t.s.positionFile)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := spillPrefix(t.s.positionFile)
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), prefix) || !ent.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, ent.Name())
		tf, err := t.openSpill(path)
		if err != nil {
			t.log.Error("taildir source cannot read a file of lines it kept from a rotated file; it is left as it is",
				"copy", path, "err", err)
			continue
		}
		t.log.Info("taildir source sends the lines it kept of a file rotated away before its last stop",
			"file", tf.path, "pos", tf.base+tf.pos, "copy", path)
		t.files[tf.key] = tf
		t.dirty[tf] = true
		// The file that replaced it may continue its last line.
		if y := t.byPath[tf.path]; tf.cl != nil && tf.next != 0 && y != nil && y.key.ino == tf.next && y.cl != nil && y.pos == 0 && y.cl.pred == nil {
			y.cl.pred, tf.cl.succ = tf, y
		}
	}
}

func (t *tailer) openSpill(path string) (*tailFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	line, err := bufio.NewReaderSize(f, maxSpillHeader).ReadSlice('\n')
	var h spillHeader
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err == nil && (h.File == "" || h.Pos < 0 || h.Piece < 0 || h.Sent < 0 || len(h.Pieces) > 2) {
		err = errors.New("the header names no file")
	}
	var st os.FileInfo
	if err == nil {
		st, err = f.Stat()
	}
	if err != nil {
		_ = f.Close() // read only
		return nil, fmt.Errorf("not a spill file: %w", err)
	}
	start := int64(len(line))
	dir := filepath.Dir(h.File)
	tf := &tailFile{key: keyOf(st), path: h.File, dir: dir, group: t.groupOf(dir, filepath.Base(h.File)), f: f,
		pos: start, base: h.Pos - start, piece: h.Piece, size: -1, lastGrowth: time.Now(), gone: true, flush: true,
		spill: path, next: h.Next}
	if tf.cl = newRecFile(tf.group); tf.cl != nil || h.Format != "" {
		if tf.cl == nil {
			tf.cl = &recFile{}
		}
		tf.cl.format = parseFormat(h.Format)
		tf.cl.detectAt = start
		tf.cl.st = fingerprint{Pieces: h.Pieces, Sent: h.Sent, Flush: h.Flush}.recState()
	}
	return tf, nil
}

// finishSpill deletes a spill file once everything in it was sent.
func (t *tailer) finishSpill(tf *tailFile) {
	st, err := tf.f.Stat()
	if err != nil || tf.pos < st.Size() {
		return // more to send: a put failed, the next poll retries
	}
	t.log.Info("taildir source sent the lines it kept of a file rotated away", "file", tf.path, "copy", tf.spill)
	t.dropSpill(tf)
}

// dropSpill stops following a spill file and deletes it.
func (t *tailer) dropSpill(tf *tailFile) {
	_ = tf.f.Close() // read only
	tf.f = nil
	delete(t.files, tf.key)
	delete(t.dirty, tf)
	if err := os.Remove(tf.spill); err != nil {
		t.log.Warn("taildir source cannot delete a file of lines it kept; its lines are sent again at the next start",
			"copy", tf.spill, "err", err)
		return
	}
	if err := atomicfile.SyncDir(filepath.Dir(tf.spill)); err != nil {
		t.log.Warn("taildir source cannot sync the directory of a file of lines it deleted; after a crash the file may be back and its lines sent again",
			"copy", tf.spill, "err", err)
	}
}
