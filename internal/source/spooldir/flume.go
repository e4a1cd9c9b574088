package spooldirsource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hamba/avro/v2/ocf"
)

// Flume's spooling directory source records how far it got in the file it is
// reading in trackerDir/.flumespool-main.meta (the same trackerDir as
// sluice's by default: .flumespool), and deletes it when the file is done.
// A host switched from Flume while a file was half read has one: sluice
// continues that file after Flume's last committed line instead of sending
// its start again.
const flumeMetaName = ".flumespool-main.meta"

// flumeMetaImported is what the meta file is renamed to once read, so that
// it is used once: a later file of the same name must not inherit it.
const flumeMetaImported = flumeMetaName + ".sluice-imported"

// maxFlumeMeta bounds the progress file read: Flume appends a small block
// per committed batch and compacts the file when it starts.
const maxFlumeMeta = 64 << 20

// readFlumeMeta reads Flume's progress: an Avro container file whose "file"
// metadata names the file, and whose last TransferStateFileMeta record
// holds the byte offset after the last committed line.
func readFlumeMeta(r io.Reader) (target string, offset int64, err error) {
	// hamba/avro's ocf decoder panics on a block size out of range (found
	// by FuzzFlumeMeta): a damaged file must cost an error, not the agent.
	defer func() {
		if p := recover(); p != nil {
			target, offset, err = "", 0, fmt.Errorf("not an Avro container file (%v)", p)
		}
	}()
	b, err := io.ReadAll(io.LimitReader(r, maxFlumeMeta+1))
	if err != nil {
		return "", 0, err
	}
	if len(b) > maxFlumeMeta {
		return "", 0, fmt.Errorf("larger than %d bytes", maxFlumeMeta)
	}
	dec, err := ocf.NewDecoder(bytes.NewReader(b))
	if err != nil {
		return "", 0, err
	}
	target = string(dec.Metadata()["file"])
	if target == "" {
		return "", 0, errors.New("no \"file\" in its metadata")
	}
	var rec struct {
		Offset int64 `avro:"offset"`
	} // no record: the file's start
	for dec.HasNext() {
		if err := dec.Decode(&rec); err != nil {
			return "", 0, err
		}
	}
	if err := dec.Error(); err != nil {
		return "", 0, err
	}
	return target, rec.Offset, nil
}

// importFlume seeds the progress with Flume's, when Flume left some and
// sluice has none for that file, and sets Flume's file aside.
func (r *reader) importFlume() error {
	path := filepath.Join(r.s.trackerDir, flumeMetaName)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	target, offset, err := readFlumeMeta(f)
	_ = f.Close() // read only
	setAside := func() error {
		if err := os.Rename(path, filepath.Join(r.s.trackerDir, flumeMetaImported)); err != nil {
			return fmt.Errorf("set Flume's progress file aside: %w", err)
		}
		return nil
	}
	if err != nil {
		r.log.Warn("spooldir source cannot read the progress Flume left; the file Flume was reading will be read from its start",
			"meta", path, "err", err)
		return setAside()
	}
	// Flume's meta sits in this spoolDir's trackerDir, so its file is in
	// this spoolDir, whatever directory Flume's path was relative to.
	target = filepath.Join(r.s.dir, filepath.Base(target))
	st, err := os.Stat(target)
	switch {
	case err != nil:
		r.log.Info("spooldir source found Flume's progress in a file that is no longer there; nothing to continue", "file", target, "meta", path)
		return setAside()
	case offset < 0 || offset > st.Size():
		r.log.Warn("spooldir source found Flume's progress outside the file; reading it from its start",
			"file", target, "pos", offset, "size", st.Size())
		return setAside()
	case r.prog.get(target) != nil:
		return setAside() // sluice's own progress is newer
	}
	k := keyOf(st)
	r.prog.set(entry{File: target, Dev: k.dev, Ino: k.ino, Pos: offset, Size: st.Size(), MTime: st.ModTime().UnixNano()})
	if err := r.prog.save(); err != nil {
		return fmt.Errorf("save progress: %w", err)
	}
	r.log.Info("spooldir source continues the file Flume was reading, after Flume's last committed line", "file", target, "pos", offset)
	return setAside()
}
