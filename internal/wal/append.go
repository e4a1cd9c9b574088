package wal

// Appending: Append, AppendPositions, AppendBatch and AppendAsync frame
// records, place them in segments and queue them for the writer (writer.go);
// wait blocks until a ticket is durable or a failure cut it off.

import (
	"fmt"
	"sync"
)

// chunk is the part of an Append's buffer that goes into one segment.
type chunk struct {
	seg        uint64
	start, end int
}

// pending is one Append waiting for the writer.
type pending struct {
	seq    uint64
	buf    *[]byte
	pooled bool // buf came from bufPool and goes back to it
	chunks []chunk
	one    [1]chunk // backing array for the common single-chunk case
	end    Position // position after its last record
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

const maxPooledBuf = 16 << 20

// Append writes recs as consecutive records and returns once they are
// durable, with the position of the first. The records of one call are
// contiguous in one segment unless together they exceed a segment.
func (l *Log) Append(recs ...[]byte) (Position, error) {
	var one [1]Position
	var pos []Position
	if len(recs) > 0 {
		pos = one[:]
	}
	err := l.append(pos, recs)
	return one[0], err
}

// AppendPositions is Append that also reports where each record went: pos
// must be nil or have len(recs), and receives each record's position.
func (l *Log) AppendPositions(pos []Position, recs ...[]byte) error {
	if pos != nil && len(pos) != len(recs) {
		return fmt.Errorf("wal: AppendPositions got %d positions for %d records", len(pos), len(recs))
	}
	return l.append(pos, recs)
}

func (l *Log) append(pos []Position, recs [][]byte) error {
	p, err := l.frame(recs)
	if err != nil || p == nil {
		return err
	}
	return l.enqueueWait(p, pos, len(recs), func(i int) int64 { return FrameSize(len(recs[i])) })
}

// Ticket names an AppendAsync for WaitDurable.
type Ticket uint64

// AppendAsync queues recs as Append does but returns at once, without
// waiting for them to be written or synced, and without starting a write
// pass of their own: they go out with the next pass another Append starts
// (sharing its write and its fdatasync), or when WaitDurable is called for
// them, or at the latest LazyDelay later. A crash before they are synced
// loses them. It suits records whose loss only repeats work, such as the
// file channel's take records: at low rates each take record then costs
// no fdatasync of its own. It fails only when the log has already failed
// or is closed; a later write or sync error sticks as usual.
func (l *Log) AppendAsync(recs ...[]byte) (Ticket, error) {
	p, err := l.frame(recs)
	if err != nil || p == nil {
		return 0, err
	}
	seq, err := l.enqueue(p, nil, len(recs), func(i int) int64 { return FrameSize(len(recs[i])) }, true)
	if err != nil {
		return 0, err
	}
	l.st.appends.Add(1)
	l.st.records.Add(uint64(len(recs)))
	return Ticket(seq), nil
}

// WaitDurable blocks until the records of the AppendAsync that returned t
// are durable, and returns the log's sticky error if they never will be.
// The zero Ticket is durable at once.
func (l *Log) WaitDurable(t Ticket) error {
	if t == 0 {
		return nil
	}
	return l.wait(uint64(t))
}

// frame checks recs and frames them into a pooled buffer (nil for no
// records). It runs outside the lock, so callers checksum in parallel.
func (l *Log) frame(recs [][]byte) (*pending, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	capacity := l.opts.SegmentSize - SegmentHeaderSize
	total := 0
	for _, r := range recs {
		if len(r) > MaxRecordSize || FrameSize(len(r)) > capacity {
			return nil, fmt.Errorf("%w: %d bytes (segment size %d)", ErrRecordTooLarge, len(r), l.opts.SegmentSize)
		}
		total += FrameHeaderSize + len(r)
	}
	bp := bufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	if cap(buf) < total {
		buf = make([]byte, 0, total)
	}
	for _, r := range recs {
		buf = appendFrame(buf, r)
	}
	*bp = buf
	return &pending{buf: bp, pooled: true}, nil
}

// AppendBatch appends the records of b, as Append does, and reports each
// record's position in pos (nil, or b.Len() long). The log writes b's
// buffer itself: b must not change until AppendBatch returns.
func (l *Log) AppendBatch(b *Batch, pos []Position) error {
	n := b.Len()
	if pos != nil && len(pos) != n {
		return fmt.Errorf("wal: AppendBatch got %d positions for %d records", len(pos), n)
	}
	if n == 0 {
		return nil
	}
	capacity := l.opts.SegmentSize - SegmentHeaderSize
	for i := range n {
		if FrameSize(b.PayloadLen(i)) > capacity {
			return fmt.Errorf("%w: %d bytes (segment size %d)", ErrRecordTooLarge, b.PayloadLen(i), l.opts.SegmentSize)
		}
	}
	return l.enqueueWait(&pending{buf: &b.buf}, pos, n, func(i int) int64 { return FrameSize(b.PayloadLen(i)) })
}

// nudge wakes the writer.
func (l *Log) nudge() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// enqueue queues p's n framed records (frame(i) is the size of record i)
// and returns its ticket without waiting. p's buffer belongs to the writer
// until wait(ticket) returns; a pooled one it releases itself. A lazy one
// does not wake the writer (see AppendAsync).
func (l *Log) enqueue(p *pending, pos []Position, n int, frame func(int) int64, lazy bool) (uint64, error) {
	total := int64(len(*p.buf))
	capacity := l.opts.SegmentSize - SegmentHeaderSize
	l.mu.Lock()
	if l.err != nil || l.closing {
		err := l.err
		if err == nil {
			err = ErrClosed
		}
		l.mu.Unlock()
		if p.pooled {
			putBuf(p.buf)
		}
		return 0, err
	}
	l.place(p, n, frame, pos, total, capacity)
	p.end = l.tail
	l.nextSeq++
	p.seq = l.nextSeq
	l.queue = append(l.queue, p)
	if lazy {
		if !l.lazyArmed {
			l.lazyArmed = true
			l.lazyTimer.Reset(l.opts.LazyDelay)
		}
		l.mu.Unlock()
		return p.seq, nil
	}
	l.passWanted = true
	l.mu.Unlock()
	l.nudge()
	return p.seq, nil
}

// wait blocks until the Append with ticket seq is durable, or the log
// failed and the writer is done with that Append's buffer. A ticket whose
// records a failure cut off fails with that failure's error, also after
// the log recovered.
func (l *Log) wait(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.takenSeq < seq {
		// It may be a lazy AppendAsync no pass has taken yet.
		l.passWanted = true
		l.nudge()
	}
	for l.doneSeq < seq || (l.durableSeq < seq && l.err == nil) {
		l.cond.Wait()
	}
	for i := len(l.lost) - 1; i >= 0; i-- {
		if r := l.lost[i]; seq >= r.from && seq <= r.to {
			return r.err
		}
	}
	if l.durableSeq < seq {
		return l.err
	}
	return nil
}

// enqueueWait is enqueue then wait, counting the Append once durable.
func (l *Log) enqueueWait(p *pending, pos []Position, n int, frame func(int) int64) error {
	seq, err := l.enqueue(p, pos, n, frame, false)
	if err == nil {
		err = l.wait(seq)
	}
	if err != nil {
		return err
	}
	l.st.appends.Add(1)
	l.st.records.Add(uint64(n))
	return nil
}

// place assigns the records of p their positions, rotating segments as
// needed. Lock mu.
func (l *Log) place(p *pending, nrec int, frame func(int) int64, pos []Position, total, capacity int64) {
	end := l.opts.SegmentSize
	if l.tail.Offset+total > end && total <= capacity {
		// Start a new segment so the whole batch stays in one.
		l.tail = Position{Segment: l.tail.Segment + 1, Offset: SegmentHeaderSize}
	}
	if l.tail.Offset+total <= end {
		p.one[0] = chunk{seg: l.tail.Segment, start: 0, end: int(total)}
		p.chunks = p.one[:]
		o := l.tail.Offset
		for i := range nrec {
			if i < len(pos) {
				pos[i] = Position{Segment: l.tail.Segment, Offset: o}
			}
			o += frame(i)
		}
		l.tail.Offset = o
		return
	}
	// Larger than a segment: split at record boundaries.
	bufOff := 0
	c := chunk{seg: l.tail.Segment}
	for i := range nrec {
		n := frame(i)
		if l.tail.Offset+n > end {
			if c.end > c.start {
				p.chunks = append(p.chunks, c)
			}
			l.tail = Position{Segment: l.tail.Segment + 1, Offset: SegmentHeaderSize}
			c = chunk{seg: l.tail.Segment, start: bufOff, end: bufOff}
		}
		if i < len(pos) {
			pos[i] = l.tail
		}
		l.tail.Offset += n
		bufOff += int(n)
		c.end = bufOff
	}
	p.chunks = append(p.chunks, c)
}

func putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBuf {
		*bp = (*bp)[:0]
		bufPool.Put(bp)
	}
}
