package spooldir

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

const (
	progressName  = ".sluice-spool-progress.json"
	progressEvery = time.Second
	minBackoff    = 250 * time.Millisecond
	readBuffer    = 64 << 10
)

// progress is how far the source got in one file: every line before Pos
// was committed. It applies only to the same file, unchanged.
type progress struct {
	File  string `json:"file"`
	Pos   int64  `json:"pos"`
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime"`
}

// errChanged marks a file that changed while it was read.
var errChanged = errors.New("changed while being read")

type reader struct {
	s      *Source
	p      flow.Processor
	log    *slog.Logger
	failed map[string]bool // files left alone until a restart
	saved  progress
	events []event.Event
}

func newReader(s *Source, p flow.Processor) (*reader, error) {
	st, err := os.Stat(s.dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", s.dir)
	}
	if err := os.MkdirAll(s.trackerDir, 0o755); err != nil {
		return nil, fmt.Errorf("tracker directory: %w", err)
	}
	r := &reader{s: s, p: p, log: s.env.Log().With("source", s.env.Name), failed: map[string]bool{}}
	if data, err := os.ReadFile(r.progressPath()); err == nil {
		if err := json.Unmarshal(data, &r.saved); err != nil {
			r.log.Warn("spooldir source ignores an unreadable progress file; an unfinished file is read from its start", "file", r.progressPath(), "err", err)
			r.saved = progress{}
		}
	}
	return r, nil
}

func (r *reader) progressPath() string { return filepath.Join(r.s.trackerDir, progressName) }

func (r *reader) run(ctx context.Context) {
	for ctx.Err() == nil {
		path, ok := r.next()
		if !ok {
			t := time.NewTimer(r.s.pollDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		err := r.consume(ctx, path)
		switch {
		case err == nil, ctx.Err() != nil:
		default:
			r.failed[path] = true
			r.s.counters.GenericProcessingFail.Add(1)
			r.log.Error("spooldir source cannot finish a file; it is left in place and skipped until the source restarts",
				"file", path, "err", err)
		}
	}
}

// next picks the next file to read by consumeOrder, or reports none.
func (r *reader) next() (string, bool) {
	ents, err := os.ReadDir(r.s.dir)
	if err != nil {
		r.log.Warn("spooldir source cannot list its directory", "dir", r.s.dir, "err", err)
		return "", false
	}
	type cand struct {
		path  string
		mtime time.Time
	}
	var cands []cand
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || strings.HasSuffix(name, r.s.suffix) ||
			!r.s.include.MatchString(name) || r.s.ignore.MatchString(name) {
			continue
		}
		path := filepath.Join(r.s.dir, name)
		if r.failed[path] {
			continue
		}
		if r.s.trackerMarks {
			if _, err := os.Stat(r.markPath(path)); err == nil {
				continue
			}
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		cands = append(cands, cand{path, info.ModTime()})
	}
	if len(cands) == 0 {
		return "", false
	}
	// A file started before a restart is finished first.
	for _, c := range cands {
		if c.path == r.saved.File {
			return c.path, true
		}
	}
	switch r.s.consumeOrder {
	case "random":
		return cands[rand.IntN(len(cands))].path, true
	case "youngest":
		slices.SortFunc(cands, func(a, b cand) int {
			if c := b.mtime.Compare(a.mtime); c != 0 {
				return c
			}
			return strings.Compare(a.path, b.path)
		})
	default:
		slices.SortFunc(cands, func(a, b cand) int {
			if c := a.mtime.Compare(b.mtime); c != 0 {
				return c
			}
			return strings.Compare(a.path, b.path)
		})
	}
	return cands[0].path, true
}

func (r *reader) markPath(path string) string {
	return filepath.Join(r.s.trackerDir, filepath.Base(path)+r.s.suffix)
}

// consume reads path from its saved progress (or its start) to its end,
// putting its lines, then marks it done.
func (r *reader) consume(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	cur := progress{File: path, Size: st.Size(), MTime: st.ModTime().UnixNano()}
	if r.saved.File == path {
		if r.saved.Size == cur.Size && r.saved.MTime == cur.MTime {
			cur.Pos = r.saved.Pos
			r.log.Info("spooldir source continues a file after its last committed line", "file", path, "pos", cur.Pos)
		} else {
			r.log.Warn("spooldir source reads a file from its start: it changed since the last run", "file", path)
		}
	}
	if _, err := f.Seek(cur.Pos, io.SeekStart); err != nil {
		return err
	}
	lr := &lineReader{r: bufio.NewReaderSize(f, readBuffer), off: cur.Pos, start: cur.Pos, max: r.s.maxLineLength, policy: r.s.decodePolicy}
	lastSave := time.Now()
	defer func() {
		// Whatever happens, keep what was committed (a done file clears it).
		if cur.File != "" && cur != r.saved {
			r.save(cur)
		}
	}()
	for ctx.Err() == nil {
		bodies, ends, err := r.readBatch(lr, cur.Size)
		if len(bodies) > 0 {
			if !r.put(ctx, path, bodies) {
				return ctx.Err()
			}
			cur.Pos = ends
			if time.Since(lastSave) >= progressEvery {
				r.save(cur)
				lastSave = time.Now()
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, errChanged) {
				return fmt.Errorf("file %s %w: it grew past its size of %d bytes when reading started", path, errChanged, cur.Size)
			}
			r.s.counters.EventReadFail.Add(1)
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	now, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("file %s %w: %v", path, errChanged, err)
	}
	if now.Size() != cur.Size || now.ModTime().UnixNano() != cur.MTime {
		return fmt.Errorf("file %s %w: its size went from %d to %d bytes, its modification time from %s to %s",
			path, errChanged, cur.Size, now.Size(), time.Unix(0, cur.MTime).Format(time.RFC3339Nano), now.ModTime().Format(time.RFC3339Nano))
	}
	if err := r.done(path); err != nil {
		return err
	}
	r.saved = progress{}
	cur = progress{}
	if err := writeAtomic(r.progressPath(), []byte("{}")); err != nil {
		r.log.Warn("spooldir source cannot clear its progress file", "file", r.progressPath(), "err", err)
	}
	return nil
}

// readBatch reads up to batchSize lines and returns their bodies and the
// offset after the last. Reading past size means the file grew.
func (r *reader) readBatch(lr *lineReader, size int64) ([][]byte, int64, error) {
	var bodies [][]byte
	for len(bodies) < r.s.batchSize {
		body, err := lr.next()
		if lr.off > size {
			return bodies, lr.start, errChanged
		}
		if err != nil {
			return bodies, lr.start, err
		}
		bodies = append(bodies, body)
		lr.start = lr.off
	}
	return bodies, lr.start, nil
}

// put sends one batch, retrying while the channel is full (250 ms, doubling
// up to maxBackoff, as Flume does), and reports whether it was committed.
func (r *reader) put(ctx context.Context, path string, bodies [][]byte) bool {
	c := r.s.counters
	n := len(bodies)
	c.EventReceived.Add(int64(n))
	c.AppendBatchReceived.Add(1)
	now := event.Now()
	backoff := minBackoff
	for {
		r.events = r.events[:0]
		for _, b := range bodies {
			e := event.Event{Body: b, ReceivedAt: now}
			if r.s.fileHeader || r.s.basenameHeader {
				e.Headers = make(map[string]string, 2)
				if r.s.fileHeader {
					e.Headers[r.s.fileHeaderKey] = path
				}
				if r.s.basenameHeader {
					e.Headers[r.s.basenameHeaderKey] = filepath.Base(path)
				}
			}
			r.events = append(r.events, e)
		}
		err := r.p.Process(ctx, r.events)
		clear(r.events)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, flow.ErrChannelFull) || errors.Is(err, flow.ErrClosed) {
			c.ChannelWriteFail.Add(1)
		} else {
			c.GenericProcessingFail.Add(1)
		}
		r.log.Warn("spooldir source could not put a batch; retrying", "file", path, "events", n, "retry_in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		backoff = min(2*backoff, r.s.maxBackoff)
	}
	c.EventAccepted.Add(int64(n))
	c.AppendBatchAccepted.Add(1)
	return true
}

// done marks a fully committed file: deleted, renamed with fileSuffix, or
// recorded in trackerDir.
func (r *reader) done(path string) error {
	switch {
	case r.s.deleteImmediate:
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("delete done file: %w", err)
		}
	case r.s.trackerMarks:
		mark := r.markPath(path)
		if err := writeAtomic(mark, nil); err != nil {
			return fmt.Errorf("record done file in %s: %w", r.s.trackerDir, err)
		}
	default:
		dest := path + r.s.suffix
		if _, err := os.Stat(dest); err == nil {
			return fmt.Errorf("cannot rename it to %s: that file exists (a file name was used twice)", dest)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Rename(path, dest); err != nil {
			return fmt.Errorf("rename done file: %w", err)
		}
		if err := syncDir(r.s.dir); err != nil {
			return err
		}
	}
	r.log.Info("spooldir source finished a file", "file", path)
	return nil
}

func (r *reader) save(p progress) {
	data, _ := json.Marshal(p)
	if err := writeAtomic(r.progressPath(), data); err != nil {
		r.log.Warn("spooldir source cannot save its progress", "file", r.progressPath(), "err", err)
		return
	}
	r.saved = p
}

// lineReader is Flume's LINE deserializer: a line ends at '\n' (a '\r'
// before it stays in the body, as in Flume); a line longer than max
// characters (UTF-16 units, as Java counts them) is cut into pieces of max
// characters, each an event; the last line needs no '\n'.
type lineReader struct {
	r      *bufio.Reader
	off    int64 // file offset of the next byte
	start  int64 // file offset after the last line returned
	max    int
	policy string // fail, replace or ignore (bytes that are not UTF-8)
}

func (lr *lineReader) next() ([]byte, error) {
	var out []byte
	chars := 0
	got := false
	for {
		c, err := lr.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && got {
				return out, nil
			}
			return nil, err
		}
		got = true
		if c == '\n' {
			lr.off++
			return out, nil
		}
		if c < utf8.RuneSelf {
			lr.off++
			out = append(out, c)
			chars++
		} else {
			lr.r.UnreadByte()
			p, _ := lr.r.Peek(utf8.UTFMax)
			ru, size := utf8.DecodeRune(p)
			if ru == utf8.RuneError && size <= 1 {
				size = 1
				switch lr.policy {
				case "replace":
					out = utf8.AppendRune(out, utf8.RuneError)
					chars++
				case "ignore":
				default:
					return nil, fmt.Errorf("byte %d is not UTF-8 (set decodeErrorPolicy to REPLACE or IGNORE to read such files)", lr.off)
				}
			} else {
				out = append(out, p[:size]...)
				chars++
				if ru > 0xFFFF {
					chars++
				}
			}
			lr.r.Discard(size)
			lr.off += int64(size)
		}
		if chars >= lr.max {
			// Cut here; a newline right after the cut ends this piece
			// (Flume would send an empty event for it).
			if b, err := lr.r.Peek(1); err == nil && b[0] == '\n' {
				lr.r.Discard(1)
				lr.off++
			}
			return out, nil
		}
	}
}

// writeAtomic replaces path with data: temporary file, fsync, rename, fsync
// of the directory.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
