package taildirsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/sluicehq/sluice/internal/containerlog"
	"github.com/sluicehq/sluice/internal/event"
)

// recFile is the state of a file read as container log records (format
// cri, docker, or auto once decided).
//
// Rotation: the kubelet renames 0.log to 0.log.<time> and the runtime
// starts a new 0.log, so the last line of the old file may go on in the new
// one (its last record partial, the next in the new file). The file that
// takes a rotated file's name is its successor: before the successor is
// read, the old file is read to its end, and what it holds after its last
// clean point (the line in progress and what followed it) is read again in
// front of the successor's bytes. Both positions move once the joined line
// is committed: the old file's to its end, the new one's past the line's
// last record. A stop in between keeps the old file's rest in a spill file
// that names its successor, so the next start joins them the same way.
type recFile struct {
	format containerlog.Format // Unknown until format = auto has seen the first line
	st     recState            // at the file's position
	// detectAt is where the file's records start (after a spill file's header).
	detectAt int64

	pred      *tailFile // the file this one replaced under its name, not taken over yet
	succ      *tailFile // the file that replaced this one: its line in progress goes on there
	carry     []byte    // from's bytes after its position, read in front of this file's
	from      *tailFile
	carriedBy *tailFile // the file whose carry holds this one's last bytes
}

// newRecFile returns the record state of a file of group g, or nil when g
// reads lines.
func newRecFile(g *group) *recFile {
	if g == nil {
		return nil
	}
	switch g.format {
	case "cri":
		return &recFile{format: containerlog.CRI}
	case "docker":
		return &recFile{format: containerlog.Docker}
	case "auto":
		return &recFile{}
	}
	return nil
}

func parseFormat(s string) containerlog.Format {
	switch s {
	case "cri":
		return containerlog.CRI
	case "docker":
		return containerlog.Docker
	}
	return containerlog.Unknown
}

// pending reports whether tf holds more than its bytes after the position
// show: a line in progress, another file's bytes, or a file to take over.
func (cl *recFile) pending() bool {
	return cl != nil && (cl.st.pieces != [containerlog.Streams]int{} || len(cl.carry) > 0 || cl.pred != nil)
}

// held reports whether tf must stay open for another file: its last bytes
// go on in its successor.
func (cl *recFile) held() bool { return cl != nil && (cl.succ != nil || cl.carriedBy != nil) }

// readRecords is readFile for a file of container log records: it sends
// the lines after tf's position in batches of at most the batch limit and reports
// whether it stopped at maxBatchCount with more to read.
func (t *tailer) readRecords(ctx context.Context, tf *tailFile, size int64) bool {
	cl := tf.cl
	if cl.carriedBy != nil {
		return false // its last bytes are read in front of its successor's
	}
	if cl.pred != nil && !t.takeOver(ctx, tf) {
		return false
	}
	if cl.format == containerlog.Unknown {
		if !t.detect(tf, size) {
			return false
		}
		if tf.cl == nil {
			return t.readLines(ctx, tf, size)
		}
	}
	if size == tf.pos && len(cl.carry) == 0 && !(tf.flush && cl.st.pieces != [containerlog.Streams]int{}) {
		tf.flush = false
		return false
	}
	cut := recCutter{format: cl.format, limit: t.s.maxLineLength, slack: recordSlack}
	// A file that has a successor does not end its line in progress: the
	// successor's first records may continue it.
	flushable := cl.succ == nil
	var batches int64
	grow := 0
	var recs []recLine // the events of the last cut, reused by the next
	for ctx.Err() == nil {
		prefix := cl.carry
		pl := len(prefix)
		st := cl.st
		if pl > 0 {
			st = cl.from.cl.st
		}
		st.flush = flushable && (st.flush || tf.flush)
		want := max(min(t.limit*t.avgLine+t.avgLine, maxRead, t.readRoom(tf, tf.pos)), minRead, grow)
		slab := make([]byte, pl+want)
		copy(slab, prefix)
		m, err := tf.f.ReadAt(slab[pl:], tf.pos)
		if err != nil && !errors.Is(err, io.EOF) {
			t.log.Warn("taildir source cannot read a file", "file", tf.path, "err", err)
			t.s.counters.EventReadFail.Add(1)
			return false
		}
		atEnd := m < want
		data := slab[:pl+m]
		out, consumed, next := cut.cutAppend(recs, data, st, atEnd, math.MaxInt)
		recs = out
		if len(out) == 0 && consumed == 0 && next.pieces == st.pieces && next.sent == st.sent {
			if atEnd {
				return false // a record or a line in progress waits for more
			}
			// Nothing could be cut: read more (a cut is sure within
			// twice the longest record).
			grow = min(2*max(want, minRead), 2*cut.recordLimit()+2)
			continue
		}
		grow = 0
		var xStart int64
		if pl > 0 {
			xStart = cl.from.base + cl.from.pos
		}
		yStart := tf.base + tf.pos
		base := 0
		for i := 0; i < len(out); {
			b := out[i:min(i+t.limit, len(out))]
			hs := t.recHeaders(tf, len(b))
			if !t.putBatch(ctx, tf, len(b), func(now int64) []event.Event {
				return t.buildRecords(tf, hs, b, data, pl, xStart, yStart, now)
			}) {
				return false
			}
			mk := b[len(b)-1].mark
			t.commitRecords(tf, data, pl, &base, mk.off, mk.st, len(b))
			t.countRecords(tf, b, t.built, pl, xStart, yStart)
			batches++
			i += len(b)
			if batches >= t.s.maxBatchCount && (i < len(out) || !atEnd) {
				return true
			}
		}
		t.commitRecords(tf, data, pl, &base, consumed, next, 0)
		if atEnd {
			if consumed == len(data) {
				tf.flush = false
			}
			return false
		}
	}
	return false
}

// commitRecords moves the position to off (bytes of data, from where *base
// is) with state st. data begins with pl bytes of the file tf took over.
func (t *tailer) commitRecords(tf *tailFile, data []byte, pl int, base *int, off int, st recState, lines int) {
	if off < *base {
		return
	}
	cl := tf.cl
	from := *base
	if from < pl {
		x := cl.from
		to := min(off, pl)
		if to > from {
			t.commit(x, data[from:], to-from, lines)
		}
		if off < pl {
			x.cl.st = st
			cl.carry = data[to:pl:pl]
			t.posDirty = true
			*base = off
			return
		}
		// Past the old file's bytes: it is read to its end.
		x.cl.st = recState{}
		t.finishCarry(tf)
		from = pl
	}
	if off > from {
		t.commit(tf, data[from:], off-from, lines)
	}
	if cl.st != st {
		cl.st = st
		t.posDirty = true
	}
	*base = off
}

// takeOver runs before tf, which took a rotated file's name, is first
// read: the rotated file is read to its end, and its bytes after its last
// clean point become tf's carry. It reports false when the source is
// stopping (tf is then not read).
func (t *tailer) takeOver(ctx context.Context, tf *tailFile) bool {
	cl := tf.cl
	x := cl.pred
	unlink := func() bool {
		cl.pred = nil
		if x != nil && x.cl != nil && x.cl.succ == tf {
			x.cl.succ = nil
			t.dirty[x] = true
		}
		return true
	}
	if x == nil || t.files[x.key] != x || x.cl == nil || x.cl.succ != tf || x.f == nil {
		return unlink()
	}
	for t.readFile(ctx, x) {
	}
	if ctx.Err() != nil || t.stopping {
		return false
	}
	cl.pred = nil
	st, err := x.f.Stat()
	if err != nil || st.Size() <= x.pos || x.cl.format != cl.format {
		return unlink()
	}
	n := st.Size() - x.pos
	if n > int64(2*(t.s.maxLineLength+recordSlack)) {
		return unlink()
	}
	b := make([]byte, n)
	if m, _ := x.f.ReadAt(b, x.pos); int64(m) != n {
		return unlink()
	}
	k := bytes.LastIndexByte(b, '\n')
	if k < 0 {
		return unlink() // only a record cut short: the old file sends it itself
	}
	cl.carry, cl.from = b[:k+1], x
	x.cl.carriedBy = tf
	t.log.Debug("taildir source continues a rotated file's last line in the file that replaced it",
		"file", tf.path, "inode", tf.key.ino, "rotated", x.key.ino, "pos", x.pos, "bytes", k+1)
	return true
}

// finishCarry ends tf's carry: the file it came from was read to its end.
func (t *tailer) finishCarry(tf *tailFile) {
	cl := tf.cl
	x := cl.from
	cl.carry, cl.from = nil, nil
	if x == nil || x.cl == nil {
		return
	}
	x.cl.carriedBy, x.cl.succ = nil, nil
	if x.spill != "" && x.f != nil {
		t.finishSpill(x)
	} else {
		t.dirty[x] = true // closed once idle; a record cut short at its end is sent then
	}
}

// release unlinks tf from the files it continues or that continue it,
// when it is dropped or read again from the start: each then ends its
// lines in progress on its own.
func (t *tailer) release(tf *tailFile) {
	cl := tf.cl
	if cl == nil {
		return
	}
	if x := cl.from; x != nil && x.cl != nil {
		x.cl.carriedBy, x.cl.succ = nil, nil
		t.dirty[x] = true
	}
	if x := cl.pred; x != nil && x.cl != nil && x.cl.succ == tf {
		x.cl.succ = nil
		t.dirty[x] = true
	}
	if y := cl.succ; y != nil && y.cl != nil {
		if y.cl.pred == tf {
			y.cl.pred = nil
		}
		if y.cl.from == tf {
			y.cl.carry, y.cl.from = nil, nil
		}
	}
	if y := cl.carriedBy; y != nil && y.cl != nil && y.cl.from == tf {
		y.cl.carry, y.cl.from = nil, nil
	}
	cl.pred, cl.succ, cl.carry, cl.from, cl.carriedBy = nil, nil, nil, nil, nil
}

// detect decides the format of an auto file from its first line, and
// reports false while that line is not complete.
func (t *tailer) detect(tf *tailFile, size int64) bool {
	buf := make([]byte, min(64<<10, max(size-tf.cl.detectAt, 0)))
	n, _ := tf.f.ReadAt(buf, tf.cl.detectAt)
	line := buf[:n]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	} else if n == 0 || (n < 64<<10 && !tf.flush) {
		return false
	}
	f := containerlog.Detect(line)
	if f == containerlog.Unknown {
		t.log.Info("taildir source reads a file as plain lines: its first line is not a CRI or Docker record (format = auto)", "file", tf.path)
		tf.cl = nil
		return true
	}
	t.log.Debug("taildir source reads a file of container log records", "file", tf.path, "format", f.String())
	tf.cl.format = f
	return true
}

// recHeaders are the headers every event of a batch of tf gets beyond its
// own: the file group's, and what the path and the kubelet say of the pod.
type recHeaderSet struct {
	pod, kube [][2]string
}

func (t *tailer) recHeaders(tf *tailFile, n int) recHeaderSet {
	var hs recHeaderSet
	if t.s.kubeMeta == "none" {
		return hs
	}
	pm := t.podOf(tf)
	hs.pod = pm.headers
	if t.kube != nil && pm.ok {
		if t.kubeHeaders(pm) {
			hs.kube = pm.kube
		} else {
			t.s.kubeMiss.Add(int64(n))
		}
	}
	return hs
}

// buildRecords makes the events of a batch of lines; offsets below pl are
// in the file tf took over (from xStart), the others in tf (from yStart).
// data holds the bytes the lines were cut from.
//
// It runs for every line, so what does not depend on the line is done once
// a batch: the headers every line gets (the group's, the pod's, the
// file's) are listed once, the milliseconds of the whole batch are one
// string, each line's a part of it, and the headers of all the events are
// cut from the tailer's arena, each event's no more than it holds. Each
// event still gets headers of its own (an interceptor may change one
// event's headers).
func (t *tailer) buildRecords(tf *tailFile, hs recHeaderSet, lines []recLine, data []byte, pl int, xStart, yStart, now int64) []event.Event {
	// common: in the order that decides which wins when two have the same
	// name (the later).
	var common event.Headers
	if g := tf.group; g != nil {
		common = append(common, g.headers...)
	}
	for _, kv := range hs.pod {
		common = append(common, event.Header{Key: kv[0], Value: kv[1]})
	}
	for _, kv := range hs.kube {
		common = append(common, event.Header{Key: kv[0], Value: kv[1]})
	}
	if t.s.fileHeader {
		common = append(common, event.Header{Key: t.s.fileHeaderKey, Value: tf.path})
	}
	common.Dedupe()
	// A line's own headers are appended after the common ones, or set
	// over them when a common one has the same name.
	clash := false
	for _, k := range [...]string{"byteoffset", formatErrorHeader, streamHeader, timeHeader, timestampHeader, pieceHeader, lastPieceHeader} {
		clash = clash || common.Has(k)
	}
	base := len(common)
	if t.s.byteOffsetHeader {
		base++
	}
	// The raw time of a line is a part of data wherever the record held it
	// as it was (always in CRI, in Docker unless escaped): its header is
	// then that part of a string of data, not a copy. data is not written
	// after the read that filled it (bodies are parts of it too, capped,
	// and an event's body never holds a time its headers hold), so the
	// string stays what it was. The milliseconds, and the other raw times,
	// are parts of one string for the batch.
	var text string
	if len(data) > 0 {
		text = unsafe.String(&data[0], len(data))
	}
	var sb strings.Builder
	sb.Grow(14 * len(lines))
	var ms millisText
	var built recCounts
	t.events = t.events[:0]
	for i := range lines {
		l := &lines[i]
		n := base + 1
		if l.bad == "" && l.time != nil {
			n += 2
		}
		if l.piece > 0 {
			n += 2
		}
		h := append(t.arena.Make(n), common...)
		switch {
		case l.bad != "" || l.piece > 0:
			built.odd = true
		case l.joined:
			built.joined++
		}
		if t.s.byteOffsetHeader {
			off := yStart + int64(l.off-pl)
			if l.off < pl {
				off = xStart + int64(l.off)
			}
			h = addHeader(h, clash, "byteoffset", strconv.FormatInt(off, 10))
		}
		if l.bad != "" {
			h = addHeader(h, clash, formatErrorHeader, l.bad)
		} else if l.time == nil {
			h = addHeader(h, clash, streamHeader, l.stream.String())
		} else {
			var tm string
			if at, ok := within(data, l.time); ok {
				tm = text[at : at+len(l.time)]
			} else {
				at := sb.Len()
				sb.Write(l.time)
				tm = sb.String()[at:]
			}
			at := sb.Len()
			sb.Write(ms.format(l.nanos / 1e6))
			stamp := sb.String()[at:]
			if clash {
				h.Set(streamHeader, l.stream.String())
				h.Set(timeHeader, tm)
				h.Set(timestampHeader, stamp)
			} else {
				h = append(h, event.Header{Key: streamHeader, Value: l.stream.String()}, event.Header{Key: timeHeader, Value: tm},
					event.Header{Key: timestampHeader, Value: stamp})
			}
		}
		if l.piece > 0 {
			h = addHeader(h, clash, pieceHeader, strconv.Itoa(l.piece))
			h = addHeader(h, clash, lastPieceHeader, strconv.FormatBool(l.last))
		}
		t.events = append(t.events, event.Event{Body: l.body[:len(l.body):len(l.body)], Headers: h, ReceivedAt: now})
	}
	t.built = built
	return t.events
}

// recCounts is what countRecords needs of a batch, counted while it was
// built (the lines are in the cache then): how many lines were joined, and
// whether any was a piece or not a record.
type recCounts struct {
	joined int64
	odd    bool
}

// within returns where b lies in data, when b is a part of it.
func within(data, b []byte) (int, bool) {
	at := cap(data) - cap(b) // b = data[at:...] keeps data's capacity
	if len(b) == 0 || at < 0 || at+len(b) > len(data) || &data[at] != &b[0] {
		return 0, false
	}
	return at, true
}

// millisText writes Unix milliseconds in decimal, as strconv.FormatInt
// does. Those of 2001 to 2286 (13 digits, the times the runtimes write)
// are written two digits at a time, and the first 8 digits (which change
// every 100 seconds) once for all the lines of the same 100 seconds.
type millisText struct {
	buf  [20]byte
	high int64 // ms / 1e5 whose digits buf[:8] holds; 0: none yet
}

// digitPairs holds "00" to "99".
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"

// format returns ms in decimal, in m's buffer (valid until the next call).
func (m *millisText) format(ms int64) []byte {
	if ms < 1e12 || ms >= 1e13 {
		m.high = 0
		return strconv.AppendInt(m.buf[:0], ms, 10)
	}
	d := &m.buf
	put := func(i int, v int64) { d[i], d[i+1] = digitPairs[2*v], digitPairs[2*v+1] }
	if high := ms / 1e5; high != m.high {
		m.high = high
		put(0, high/1e6)
		put(2, high/1e4%100)
		put(4, high/100%100)
		put(6, high%100)
	}
	low := ms % 1e5
	d[8] = byte('0' + low/1e4)
	put(9, low/100%100)
	put(11, low%100)
	return d[:13]
}

// addHeader appends header k to h, or sets it when h may already hold k.
func addHeader(h event.Headers, clash bool, k, v string) event.Headers {
	if clash {
		h.Set(k, v)
		return h
	}
	return append(h, event.Header{Key: k, Value: v})
}

// countRecords counts and logs (throttled) the lines of a committed batch
// that were split into pieces, joined from several records, or not records.
// c is what buildRecords saw of the batch: most batches hold no piece and
// no bad record, and need no look at each line.
func (t *tailer) countRecords(tf *tailFile, lines []recLine, c recCounts, pl int, xStart, yStart int64) {
	t.s.joinedLines.Add(c.joined)
	if !c.odd {
		return
	}
	for _, l := range lines {
		switch {
		case l.bad != "":
			if l.piece > 1 {
				continue
			}
			t.s.badRecords.Add(1)
			off := yStart + int64(l.off-pl)
			if l.off < pl {
				off = xStart + int64(l.off)
			}
			t.throttle.Log(t.log, slog.LevelWarn, "bad record", "taildir source sends a line that is not a record of its file's format as it is, with the header "+formatErrorHeader,
				"file", tf.path, "offset", off, "reason", l.bad)
		case l.piece == 1:
			t.s.splitLines.Add(1)
			t.throttle.Log(t.log, slog.LevelWarn, "split", "taildir source sends a line longer than maxLineLength in pieces",
				"file", tf.path, "maxLineLength", t.s.maxLineLength, "headers", pieceHeader+", "+lastPieceHeader)
		}
	}
}

// sentState describes a file's record state for a log line.
func (tf *tailFile) sentState() string {
	if tf.cl == nil {
		return ""
	}
	return fmt.Sprintf("pieces %v, events %d, flush %v", tf.cl.st.pieces, tf.cl.st.sent, tf.cl.st.flush)
}
