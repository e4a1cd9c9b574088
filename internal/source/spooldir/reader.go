package spooldirsource

import (
	"bufio"
	"context"
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

	"github.com/sluicehq/sluice/internal/atomicfile"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

const (
	minBackoff = 250 * time.Millisecond
	readBuffer = 64 << 10
)

// errChanged marks a file that changed while it was read.
var errChanged = errors.New("changed while being read")

// leftFile is a file the source stops reading and leaves where it is for
// the operator: it changed while it was read, or it is no longer the file
// the saved progress was for. What was delivered of it stays delivered.
type leftFile struct {
	msg   string // what the source does, for the log message
	why   string // what happened to the file
	todo  string // what the operator does next
	pos   int64  // bytes delivered
	lines int64  // lines delivered
}

func (l *leftFile) Error() string { return l.why }

const (
	todoChanged = "stop whatever writes to the file; then restart the source (restart the agent, or reload a changed " +
		"config of this source) and it continues after the last delivered line, or move the file out of spoolDir to drop the rest"
	todoCannotContinue = "move the file out of spoolDir; or, to have it read from its start as a new file, " +
		"give it a new name (lines delivered before may then come again)"
)

type reader struct {
	s        *Source
	p        flow.Processor
	log      *slog.Logger
	throttle *logthrottle.Throttle
	// streaks of refused puts, failed saves of the progress file, and
	// failed listings of the directory
	puts, saves, lists *logthrottle.Streak
	failed             map[string]fileKey // files left alone until a restart (or until they leave the directory)
	prog               *progress
	limit              int // the most lines in one batch (flow.Batching)
	events             []event.Event
	arena              event.HeaderArena // the events' headers
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
	r := &reader{s: s, p: p, log: s.env.Log().With("source", s.env.Name), failed: map[string]fileKey{},
		throttle: logthrottle.New(30*time.Second, 1), limit: s.batch.Limit(p)}
	r.puts = flow.PutStreak(r.log, "spooldir source could not put a batch; retrying", "spooldir source puts batches again")
	r.saves = &logthrottle.Streak{Log: r.log, Level: slog.LevelError,
		Failed: "spooldir source cannot save its progress; reading waits until it can", Recovered: "spooldir source saves its progress again"}
	r.lists = &logthrottle.Streak{Log: r.log, Level: slog.LevelWarn,
		Failed: "spooldir source cannot list its directory", Recovered: "spooldir source lists its directory again"}
	path := filepath.Join(s.trackerDir, progressName)
	r.prog, err = loadProgress(path)
	if err != nil {
		// Going on without it would read the files begun again from
		// their start: the operator decides.
		return nil, fmt.Errorf("cannot read the progress file %s (%w); it records how far the source got in the files "+
			"it had begun: repair it, or remove it to have those files read again from their start (their delivered lines then come twice)",
			path, err)
	}
	if err := r.importFlume(); err != nil {
		return nil, fmt.Errorf("continue from Flume's progress in %s: %w", s.trackerDir, err)
	}
	if r.prune() {
		if err := r.prog.save(); err != nil {
			return nil, fmt.Errorf("save progress in %s: %w", path, err)
		}
	}
	return r, nil
}

// prune forgets the progress of files no longer in the directory (moved
// away by the operator, or marked done just before a crash).
func (r *reader) prune() bool {
	return r.prog.prune(func(e *entry) bool {
		if _, err := os.Lstat(e.File); err != nil {
			return !errors.Is(err, fs.ErrNotExist)
		}
		if r.s.trackerMarks {
			if _, err := os.Stat(r.markPath(e.File)); err == nil {
				return false
			}
		}
		return true
	})
}

func (r *reader) run(ctx context.Context) {
	for ctx.Err() == nil {
		path, ok := r.next(ctx)
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
		var left *leftFile
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.As(err, &left):
			r.fail(path)
			r.s.counters.GenericProcessingFail.Add(1)
			r.log.Warn(left.msg, "file", path, "change", left.why, "delivered_lines", left.lines,
				"delivered_bytes", left.pos, "next", left.todo)
		default:
			r.fail(path)
			r.s.counters.GenericProcessingFail.Add(1)
			r.log.Error("spooldir source cannot finish a file; it is left in place and skipped until the source restarts",
				"file", path, "err", err)
		}
	}
}

// fail leaves path alone for as long as the same file is under its name.
func (r *reader) fail(path string) {
	var k fileKey
	if st, err := os.Stat(path); err == nil {
		k = keyOf(st)
	}
	r.failed[path] = k
}

// next picks the next file to read by consumeOrder, or reports none.
func (r *reader) next(ctx context.Context) (string, bool) {
	ents, err := os.ReadDir(r.s.dir)
	if err != nil {
		r.lists.Fail(err, "dir", r.s.dir)
		return "", false
	}
	r.lists.Ok("dir", r.s.dir)
	r.forgetGone(ctx, ents)
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
		info, err := e.Info()
		if err != nil {
			continue
		}
		if k, ok := r.failed[path]; ok && (k == fileKey{} || k == keyOf(info)) {
			continue
		}
		if r.s.trackerMarks {
			if _, err := os.Stat(r.markPath(path)); err == nil {
				continue
			}
		}
		cands = append(cands, cand{path, info.ModTime()})
	}
	if len(cands) == 0 {
		return "", false
	}
	// A file begun before a restart is finished first.
	for _, c := range cands {
		if r.prog.get(c.path) != nil {
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

// forgetGone forgets the failures and the progress of files no longer in
// the directory (ents, sorted by name): an operator moved them away, and a
// file given the same name later is a new file.
func (r *reader) forgetGone(ctx context.Context, ents []os.DirEntry) {
	gone := func(path string) bool {
		if filepath.Dir(path) != r.s.dir {
			return false
		}
		_, found := slices.BinarySearchFunc(ents, filepath.Base(path), func(e os.DirEntry, name string) int {
			return strings.Compare(e.Name(), name)
		})
		return !found
	}
	for path := range r.failed {
		if gone(path) {
			delete(r.failed, path)
		}
	}
	if r.prog.prune(func(e *entry) bool { return !gone(e.File) }) {
		r.saveProgress(ctx)
	}
}

func (r *reader) markPath(path string) string {
	return filepath.Join(r.s.trackerDir, filepath.Base(path)+r.s.suffix)
}

// consume reads path from its saved progress (or its start) to its end,
// putting its lines and recording the progress after every committed
// batch, then marks it done.
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
	key := keyOf(st)
	cur := entry{File: path, Dev: key.dev, Ino: key.ino, Size: st.Size(), MTime: st.ModTime().UnixNano()}
	if e := r.prog.get(path); e != nil {
		switch {
		case !e.sameFile(key):
			return &leftFile{msg: "spooldir source leaves a file it cannot continue", pos: e.Pos, lines: e.Lines, todo: todoCannotContinue,
				why: "the file under this name is not the one the source had begun to read (another inode)"}
		case e.Pos > cur.Size:
			return &leftFile{msg: "spooldir source leaves a file it cannot continue", pos: e.Pos, lines: e.Lines, todo: todoCannotContinue,
				why: fmt.Sprintf("it is %d bytes long, shorter than the %d bytes already delivered", cur.Size, e.Pos)}
		}
		cur.Pos, cur.Lines = e.Pos, e.Lines
		if e.Changed != "" {
			r.log.Info("spooldir source continues a file that changed while it was read, after its last delivered line",
				"file", path, "pos", cur.Pos, "lines", cur.Lines, "size", cur.Size, "change", e.Changed)
		} else {
			r.log.Info("spooldir source continues a file after its last committed line", "file", path, "pos", cur.Pos, "lines", cur.Lines)
		}
	}
	if _, err := f.Seek(cur.Pos, io.SeekStart); err != nil {
		return err
	}
	lr := &lineReader{r: bufio.NewReaderSize(f, readBuffer), off: cur.Pos, start: cur.Pos, max: r.s.maxLineLength, policy: r.s.decodePolicy, blob: r.s.maxBlob}
	for ctx.Err() == nil {
		bodies, end, err := r.readBatch(lr, f, cur.Size)
		if len(bodies) > 0 {
			if !r.put(ctx, path, bodies) {
				return ctx.Err()
			}
			cur.Pos = end
			cur.Lines += int64(len(bodies))
			r.prog.set(cur)
			if !r.saveProgress(ctx) {
				return ctx.Err()
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errChanged) {
			return r.changed(ctx, cur, fmt.Sprintf("it grew past the %d bytes it had when reading began", cur.Size))
		}
		if err != nil {
			r.s.counters.EventReadFail.Add(1)
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	now, err := os.Stat(path)
	switch {
	case err != nil:
		// Moved away or deleted: there is nothing left to leave in place.
		return &leftFile{msg: "spooldir source lost a file while it was read: it was removed or renamed; what it delivered stays delivered",
			why: err.Error(), pos: cur.Pos, lines: cur.Lines,
			todo: "to deliver the rest, put the file's bytes after delivered_bytes into a new file in spoolDir (tail -c +<delivered_bytes+1>)"}
	case keyOf(now) != key:
		return r.changed(ctx, cur, "another file (another inode) took its name")
	case now.Size() != cur.Size:
		return r.changed(ctx, cur, fmt.Sprintf("its size went from %d to %d bytes", cur.Size, now.Size()))
	case now.ModTime().UnixNano() != cur.MTime:
		return r.changed(ctx, cur, fmt.Sprintf("its modification time moved from %s to %s",
			time.Unix(0, cur.MTime).Format(time.RFC3339Nano), now.ModTime().Format(time.RFC3339Nano)))
	}
	if err := r.done(path); err != nil {
		return err
	}
	r.prog.remove(path)
	r.prune()
	r.saveProgress(ctx)
	return nil
}

// changed records that the file of cur changed while it was read (its
// progress stays) and returns the leftFile error that reports it.
func (r *reader) changed(ctx context.Context, cur entry, why string) error {
	cur.Changed = why
	r.prog.set(cur)
	r.saveProgress(ctx)
	return &leftFile{msg: "spooldir source stopped reading a file that changed while it was read; what it delivered stays delivered, " +
		"and the file is left in place, not marked done, until the source restarts",
		why: why, todo: todoChanged, pos: cur.Pos, lines: cur.Lines}
}

// saveProgress writes the progress file, retrying while it cannot (reading
// waits meanwhile, so a crash never repeats more than the batch in flight),
// and reports false only when the source is stopping.
func (r *reader) saveProgress(ctx context.Context) bool {
	backoff := minBackoff
	for {
		err := r.prog.save()
		if err == nil {
			r.s.progressErr.Store(nil)
			r.saves.Ok("file", r.prog.path)
			return true
		}
		r.s.progressErr.Store(&err)
		r.saves.Fail(err, "file", r.prog.path, "retry_in", backoff.String())
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		backoff = min(2*backoff, r.s.maxBackoff)
	}
}

// readBatch reads up to the batch limit of lines and returns their bodies and the
// offset after the last. Reading past size means the file grew; so does a
// last line without a newline when the file is longer by now.
func (r *reader) readBatch(lr *lineReader, f *os.File, size int64) ([][]byte, int64, error) {
	var bodies [][]byte
	nbytes := 0
	for len(bodies) < r.limit && nbytes < maxBatchBytes {
		body, err := lr.next()
		if lr.off > size {
			return bodies, lr.start, errChanged
		}
		if err != nil {
			return bodies, lr.start, err
		}
		if lr.atEOF {
			if st, err := f.Stat(); err != nil || st.Size() != size {
				return bodies, lr.start, errChanged
			}
		}
		bodies = append(bodies, body)
		nbytes += len(body)
		lr.start = lr.off
	}
	return bodies, lr.start, nil
}

// maxBatchBytes cuts a batch of large events (blobs) before the limit: 100
// blobs of 100 MB would otherwise be one 10 GB batch in memory.
const maxBatchBytes = 64 << 20

// put sends one batch, retrying while the channel is full (250 ms, doubling
// up to maxBackoff, as Flume does), and reports whether it was committed.
func (r *reader) put(ctx context.Context, path string, bodies [][]byte) bool {
	c := r.s.counters
	n := len(bodies)
	c.EventReceived.Add(int64(n))
	c.AppendBatchReceived.Add(1)
	now := event.Now()
	retry := flow.Retry{RetryAll: true, Counters: c, Streak: r.puts, Backoff: flow.PutBackoff{Min: minBackoff, Max: r.s.maxBackoff}}
	err := retry.Put(ctx, r.p, func() []event.Event {
		r.events = r.events[:0]
		for _, b := range bodies {
			e := event.Event{Body: b, ReceivedAt: now}
			if r.s.fileHeader || r.s.basenameHeader {
				e.Headers = r.arena.Make(2)
				if r.s.fileHeader {
					e.Headers.Set(r.s.fileHeaderKey, path)
				}
				if r.s.basenameHeader {
					e.Headers.Set(r.s.basenameHeaderKey, filepath.Base(path))
				}
			}
			r.events = append(r.events, e)
		}
		return r.events
	}, func() []any { return []any{"file", path} })
	if errors.Is(err, flow.ErrStopping) {
		// The agent is stopping or replacing the source: nothing more
		// will be put; wait for Stop, which reads on from here next time.
		<-ctx.Done()
	}
	if err != nil {
		return false
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
		if err := atomicfile.WriteFile(mark, nil, 0o600); err != nil {
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
		if err := atomicfile.SyncDir(r.s.dir); err != nil {
			return err
		}
	}
	r.log.Info("spooldir source finished a file", "file", path)
	return nil
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
	atEOF  bool   // the last line returned ended at the end of the file, not at a newline
	blob   int    // > 0: Flume's BlobDeserializer, pieces of at most blob bytes instead of lines
}

func (lr *lineReader) next() ([]byte, error) {
	if lr.blob > 0 {
		return lr.nextBlob()
	}
	var out []byte
	chars := 0
	got := false
	lr.atEOF = false
	for {
		c, err := lr.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && got {
				lr.atEOF = true
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
			_ = lr.r.UnreadByte() // right after a ReadByte: cannot fail
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
			_, _ = lr.r.Discard(size) // peeked above: cannot fail
			lr.off += int64(size)
		}
		if chars >= lr.max {
			// Cut here; a newline right after the cut ends this piece
			// (Flume would send an empty event for it).
			if b, err := lr.r.Peek(1); err == nil && b[0] == '\n' {
				_, _ = lr.r.Discard(1) // peeked above: cannot fail
				lr.off++
			}
			return out, nil
		}
	}
}

// nextBlob is Flume's BlobDeserializer: the next blob bytes of the file, or
// what is left of it, as they are (no decoding); an empty file gives no
// event. A file longer than blob bytes comes in several events, as in Flume.
func (lr *lineReader) nextBlob() ([]byte, error) {
	lr.atEOF = false
	out := make([]byte, 0, min(lr.blob, readBuffer))
	for len(out) < lr.blob {
		chunk := min(lr.blob-len(out), readBuffer)
		if cap(out)-len(out) < chunk {
			out = slices.Grow(out, chunk)
		}
		n, err := io.ReadFull(lr.r, out[len(out):len(out)+chunk])
		out = out[:len(out)+n]
		lr.off += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if len(out) == 0 {
				return nil, io.EOF
			}
			lr.atEOF = true
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
