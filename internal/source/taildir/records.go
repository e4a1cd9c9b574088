package taildirsource

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/containerlog"
)

// Reading container log files (format cri, docker): every record is one
// piece of a line of one stream; the records of a stream marked partial are
// joined with the record that ends the line, and the line is one event.
//
// A file's position is always at a record boundary where no stream holds
// bytes read but not sent: a clean point. What follows it is cut into
// events by cutRecords, a function of the bytes and of the state at the
// clean point alone (recState), so that cutting again from the same point
// gives the same events in the same order. So a batch may end anywhere: the
// position stays at the last clean point, and recState.sent says how many
// of the events cut from there were committed already; they are skipped
// when cutting again, after a restart too (the state is kept with the
// position). Two streams' lines may interleave (a stderr line between the
// pieces of a stdout line), and each is joined on its own stream.
//
// Memory is bounded: a line whose text would grow past maxLineLength is
// sent in pieces (linePiece, linePieceLast, as taildir does with long
// lines), cut at a record boundary where it can be, so that no piece holds
// more than maxLineLength bytes; and when the bytes since the last clean
// point pass maxLineLength and recordSlack (a stream's line that does not
// end while the other writes on), the lines in progress are sent as pieces
// so far, making a clean point.

// recordSlack is how far beyond maxLineLength a record may reach: the
// runtimes write records of 16 KiB of text (dockerd, containerd) or less,
// which JSON escaping may make a few times longer. A longer record (only
// containerd with max_container_log_line_size = -1 writes them) is sent
// raw, in pieces of maxLineLength, marked with the header formatError.
const recordSlack = 1 << 20

// joinChunk is the size of the buffers lines joined from several records
// are copied into, many to a buffer.
const joinChunk = 16 << 10

// recState is what cutting the records of a file needs to know of what was
// sent before its position: it is saved with the position.
type recState struct {
	// pieces counts, for each stream, the pieces already sent of the line
	// in progress at the position (0: no line in progress).
	pieces [containerlog.Streams]int
	// sent is how many events cut from the position were committed.
	sent int
	// flush: the file was found idle (or complete) and its last lines are
	// being sent as they are; it stays so until they all were.
	flush bool
}

// recLine is one event cut from records.
type recLine struct {
	body  []byte
	time  []byte // raw time of the first record of the event's text
	nanos int64
	off   int    // offset of that record in the data
	bad   string // not a record of the format: why; body holds the raw bytes
	piece int    // 0: a whole line; else the piece's number, from 1
	// (the small fields together, so that a line of the thousand a cut
	// makes is copied in fewer words)
	stream containerlog.Stream
	last   bool
	joined bool // a whole line of more than one record
	// mark is where the position goes, and the state it has there, once
	// this event and those before it are committed.
	mark recMark
}

// recMark is a position (bytes from the start of the data) and its state.
type recMark struct {
	off int
	st  recState
}

// pending is the part of a stream's line read but not sent: the text of
// the records read since the line began or since its last piece was sent,
// and the time and offset of the first of them.
type pending struct {
	text  []byte
	time  []byte
	nanos int64
	off   int
	recs  int  // records read since
	has   bool // a record was read since
}

// recCutter cuts records into events.
type recCutter struct {
	format containerlog.Format
	limit  int // maxLineLength
	slack  int // recordSlack (tests make it small)
}

// recordLimit is the longest record read as one, and how far past the last
// clean point lines in progress may reach before they are sent so far.
func (c recCutter) recordLimit() int { return c.limit + c.slack }

// cut cuts data, the bytes from a file's position (a clean point with
// state st), into at most maxEvents events after the st.sent already
// committed. atEnd says data reaches the file's end: then, with st.flush,
// a last record without a newline is read as it is, and the lines in
// progress at the end are sent as they are.
// It returns the events, how many bytes lead to the last clean point, and
// the state at that point (with sent counting the events returned that lie
// beyond it); each event's mark says the same for a batch that ends with
// it.
func (c recCutter) cut(data []byte, st recState, atEnd bool, maxEvents int) (out []recLine, consumed int, next recState) {
	return c.cutAppend(nil, data, st, atEnd, maxEvents)
}

// cutAppend is cut appending the events to out (a buffer of an earlier
// cut, so that cutting a read of a thousand lines does not grow a new one).
func (c recCutter) cutAppend(out []recLine, data []byte, st recState, atEnd bool, maxEvents int) (_ []recLine, consumed int, next recState) {
	out = out[:0]
	flush := st.flush && atEnd
	var pend [containerlog.Streams]pending
	pieces := st.pieces
	gen := 0 // events cut so far, the skipped included
	clean, cleanGen := 0, 0
	cleanPieces := pieces
	full := false
	// emit takes a pointer: a line is a dozen words, copied once, into out.
	emit := func(l *recLine) {
		switch {
		case full:
		case gen < st.sent:
			gen++ // committed before
		case len(out) == maxEvents:
			full = true
		default:
			gen++
			l.mark = recMark{off: clean, st: recState{pieces: cleanPieces, sent: gen - cleanGen, flush: st.flush}}
			out = append(out, *l)
		}
	}
	// The text of lines joined from several records goes into one buffer
	// for many lines rather than one allocation each.
	var joins []byte
	join := func(a, b []byte) []byte {
		if n := len(joins); n >= len(a) && len(a) > 0 && &joins[n-len(a)] == &a[0] && cap(joins)-n >= len(b) {
			// a is the last text joined: b goes on after it.
			joins = append(joins, b...)
			return joins[n-len(a) : len(joins) : len(joins)]
		}
		if cap(joins)-len(joins) < len(a)+len(b) {
			joins = make([]byte, 0, max(joinChunk, len(a)+len(b)))
		}
		n := len(joins)
		joins = append(append(joins, a...), b...)
		return joins[n:len(joins):len(joins)]
	}
	// send sends stream s's pending text: as a whole line (end, no piece
	// sent before, short enough), else as pieces of at most limit bytes,
	// the last marked when end. Before the end, the first bytes of a
	// character the next record completes are kept for the next piece
	// (unless all: a line forced out is sent whole so far).
	send := func(s containerlog.Stream, end, all bool) {
		p := &pend[s]
		text := p.text
		if end && pieces[s] == 0 && len(text) <= c.limit {
			emit(&recLine{body: text, stream: s, time: p.time, nanos: p.nanos, off: p.off, joined: p.recs > 1})
			pend[s] = pending{}
			return
		}
		piece := func(b []byte, last bool) {
			pieces[s]++
			emit(&recLine{body: b[:len(b):len(b)], stream: s, time: p.time, nanos: p.nanos, off: p.off, piece: pieces[s], last: last})
		}
		for len(text) > c.limit {
			n := cutAt(text, c.limit)
			piece(text[:n], false)
			text = text[n:]
		}
		if end || all {
			piece(text, end)
			if end {
				pieces[s] = 0
			}
			pend[s] = pending{}
			return
		}
		k := incompleteTail(text)
		if len(text) > k {
			piece(text[:len(text)-k], false)
		}
		if k == 0 {
			pend[s] = pending{}
			return
		}
		p.text = append([]byte(nil), text[len(text)-k:]...)
	}
	anyPending := func() bool {
		return pend[0].has || pend[1].has
	}
	force := func() {
		for s := range pend {
			if pend[s].has {
				send(containerlog.Stream(s), false, true)
			}
		}
	}
	bad := func(raw []byte, off int, why string) {
		if len(raw) <= c.limit {
			emit(&recLine{body: raw, off: off, bad: why})
			return
		}
		for k := 1; len(raw) > 0; k++ {
			n := len(raw)
			if n > c.limit {
				n = cutAt(raw, c.limit)
			}
			emit(&recLine{body: raw[:n:n], off: off, bad: why, piece: k, last: n == len(raw)})
			raw = raw[n:]
		}
	}
	parser := containerlog.Parser{Format: c.format}
	pos := 0
	for pos < len(data) && !full {
		rest := data[pos:]
		window := rest[:min(len(rest), c.recordLimit()+1)]
		var raw []byte
		next := 0
		over := false
		if i := bytes.IndexByte(window, '\n'); i >= 0 {
			raw, next = rest[:i], pos+i+1
		} else if len(rest) > c.recordLimit() {
			n := cutAt(rest, c.limit)
			raw, next, over = rest[:n], pos+n, true
		} else if flush {
			raw, next = rest, len(data)
		} else {
			break // the record is not complete yet
		}
		var r containerlog.Record
		var err error
		if !over {
			err = parser.Parse(raw, &r)
		}
		if over {
			force()
			bad(raw, pos, "a record longer than maxLineLength and "+sizeText(c.slack)+" (sent raw, in pieces)")
		} else if err != nil {
			bad(bytes.TrimSuffix(raw, []byte("\r")), pos, "not a "+c.format.String()+" record: "+err.Error())
		} else if s := r.Stream; !r.Partial && !pend[s].has && pieces[s] == 0 && len(r.Text) <= c.limit {
			// A whole line in one record, nothing of its stream pending
			// (nine lines in ten): the line is the record's text, emitted
			// as emit does, made in place.
			switch {
			case gen < st.sent:
				gen++
			case len(out) == maxEvents:
				full = true
			default:
				gen++
				out = append(out, recLine{body: r.Text, stream: s, time: r.Time, nanos: r.Nanos, off: pos,
					mark: recMark{off: clean, st: recState{pieces: cleanPieces, sent: gen - cleanGen, flush: st.flush}}})
			}
		} else {
			p := &pend[s]
			if len(p.text) > 0 && len(p.text)+len(r.Text) > c.limit {
				send(s, false, false) // the piece so far, so that none holds more than limit
			}
			if !p.has {
				*p = pending{time: r.Time, nanos: r.Nanos, off: pos, has: true}
			}
			p.recs++
			if len(p.text) == 0 {
				p.text = r.Text
			} else {
				p.text = join(p.text, r.Text)
			}
			if !r.Partial {
				send(s, true, false)
			} else if len(p.text) > c.limit {
				send(s, false, false) // one record longer than limit
			}
		}
		pos = next
		if full {
			break
		}
		if anyPending() && pos-clean > c.recordLimit() {
			force()
			if full {
				break
			}
		}
		if !anyPending() {
			clean, cleanGen, cleanPieces = pos, gen, pieces
		}
	}
	if flush && pos == len(data) && !full {
		// The end of what there is: the lines in progress end here.
		for s := range pend {
			if pend[s].has || pieces[s] > 0 {
				if !pend[s].has {
					pend[s].off = pos // an empty last piece: no record, no time
				}
				send(containerlog.Stream(s), true, false)
			}
		}
		if !full {
			clean, cleanGen, cleanPieces = pos, gen, pieces
		}
	}
	next = recState{pieces: cleanPieces, sent: max(st.sent, gen) - cleanGen, flush: st.flush && (!atEnd || clean < len(data))}
	return out, clean, next
}

func sizeText(n int) string {
	if n%(1<<20) == 0 {
		return strconv.Itoa(n>>20) + " MiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// incompleteTail returns how many bytes at the end of b begin a UTF-8
// character that is not complete (0 to 3): a record may end inside one.
func incompleteTail(b []byte) int {
	for k := 1; k <= min(len(b), utf8.UTFMax-1); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}
