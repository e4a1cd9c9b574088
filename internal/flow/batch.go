package flow

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// LineOptions configures a LineBatcher.
type LineOptions struct {
	// BatchSize is the most lines in one batch (default 100).
	BatchSize int
	// BatchDuration cuts a batch this long after its first line arrived
	// (0: no limit). The batcher never waits for input once it has a line,
	// so a batch is normally cut well before this; it bounds the time spent
	// on one very large batch.
	BatchDuration time.Duration
	// MaxLineLength is the most bytes a line may have, its newline included
	// (0: unlimited). A longer line is discarded and reported with a
	// *LineTooLongError, as Flume's netcat source does with max-line-length.
	MaxLineLength int
	// TrimCR drops a '\r' before the '\n', for CRLF input.
	TrimCR bool
	// BufferSize is the size of the read buffer (default 64 KiB). It bounds
	// the bytes of one batch, except for a single line longer than it.
	BufferSize int
}

// LineTooLongError reports a line longer than MaxLineLength, which the
// batcher discarded up to and including its newline.
type LineTooLongError struct {
	Max int // MaxLineLength
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("line exceeds the maximum length (%d chars, including newline)", e.Max)
}

// LineBatcher cuts a byte stream (a TCP connection, a child's stdout) into
// batches of newline-terminated lines with adaptive batching: Next waits
// for one complete line, then adds every further complete line that is
// already buffered, and returns when it has BatchSize lines, when
// BatchDuration has passed since the first, or when no further complete line
// is immediately available. So a lone line goes at once, and under load the
// batches fill by themselves. It is the line reader of the netcat, syslog and
// exec sources.
//
// A LineBatcher belongs to one goroutine.
type LineBatcher struct {
	r       *bufio.Reader
	opt     LineOptions
	scratch []byte // the start of a line longer than the read buffer
	offs    []int  // start and end of each line of the batch in the buffer
	err     error  // sticky read error, returned once the buffered lines are out
}

// NewLineBatcher returns a batcher reading r.
func NewLineBatcher(r io.Reader, opt LineOptions) *LineBatcher {
	if opt.BatchSize <= 0 {
		opt.BatchSize = 100
	}
	if opt.BufferSize < 16 {
		opt.BufferSize = 64 << 10
	}
	return &LineBatcher{r: bufio.NewReaderSize(r, opt.BufferSize), opt: opt}
}

// Next returns the next batch of lines, without their line endings,
// appended to dst[:0]. The bodies of one batch share one newly allocated
// slab, so they stay valid (and may be handed to the pipeline) after later
// calls.
//
// It blocks until a complete line arrives or the reader fails. When the
// input ends with an unterminated line, that line is returned as the last
// one. Errors:
//   - *LineTooLongError: a line longer than MaxLineLength was discarded. The
//     lines before it came in the previous batch; the caller reports the
//     error to its sender (netcat answers "FAILED: Event exceeds the maximum
//     length (N chars, including newline)") and calls Next again.
//   - the reader's error (io.EOF at the end of the input), once every line
//     before it was returned; later calls return it again.
func (b *LineBatcher) Next(dst [][]byte) ([][]byte, error) {
	dst = dst[:0]
	if b.err != nil {
		return dst, b.err
	}
	max := b.opt.MaxLineLength
	// Wait until the buffer holds a complete line.
	var buf []byte
	for {
		buf, _ = b.r.Peek(b.r.Buffered())
		if bytes.IndexByte(buf, '\n') >= 0 {
			break
		}
		if max > 0 && len(b.scratch)+len(buf) >= max {
			return dst, b.skipLine()
		}
		if len(buf) == b.r.Size() {
			// A line longer than the buffer: set its start aside.
			b.scratch = append(b.scratch, buf...)
			_, _ = b.r.Discard(len(buf))
			continue
		}
		if _, err := b.r.Peek(len(buf) + 1); err != nil {
			b.err = err
			buf, _ = b.r.Peek(b.r.Buffered())
			if len(b.scratch)+len(buf) == 0 {
				return dst, err
			}
			line := make([]byte, 0, len(b.scratch)+len(buf))
			line = append(append(line, b.scratch...), buf...)
			line = b.trim(line)
			b.scratch = b.scratch[:0]
			_, _ = b.r.Discard(len(buf))
			return append(dst, line[:len(line):len(line)]), nil
		}
	}
	start := time.Now()

	// Collect the complete lines already buffered.
	b.offs = b.offs[:0]
	pos, total := 0, 0
	first := -1 // length of the first line's part in buf when it began in scratch
	if len(b.scratch) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if max > 0 && len(b.scratch)+i+1 > max {
			_, _ = b.r.Discard(i + 1)
			b.scratch = b.scratch[:0]
			return dst, &LineTooLongError{Max: max}
		}
		first = i
		pos = i + 1
		total = len(b.scratch) + i
	}
	n := 0
	if first >= 0 {
		n = 1
	}
	for n < b.opt.BatchSize {
		i := bytes.IndexByte(buf[pos:], '\n')
		if i < 0 {
			break
		}
		if max > 0 && i+1 > max {
			if n > 0 {
				break // report it on the next call, after these lines
			}
			_, _ = b.r.Discard(pos + i + 1)
			return dst, &LineTooLongError{Max: max}
		}
		end := pos + i
		if b.opt.TrimCR && end > pos && buf[end-1] == '\r' {
			end--
		}
		b.offs = append(b.offs, pos, end)
		total += end - pos
		pos += i + 1
		n++
		if b.opt.BatchDuration > 0 && n%64 == 0 && time.Since(start) >= b.opt.BatchDuration {
			break
		}
	}

	// Copy the lines into one slab, then release the buffer.
	slab := make([]byte, total)
	at := 0
	if first >= 0 {
		k := copy(slab, b.scratch)
		k += copy(slab[k:], buf[:first])
		line := b.trim(slab[:k])
		dst = append(dst, line[:len(line):len(line)])
		at = k
		b.scratch = b.scratch[:0]
	}
	for j := 0; j < len(b.offs); j += 2 {
		k := copy(slab[at:], buf[b.offs[j]:b.offs[j+1]])
		dst = append(dst, slab[at:at+k:at+k])
		at += k
	}
	_, _ = b.r.Discard(pos)
	return dst, nil
}

func (b *LineBatcher) trim(line []byte) []byte {
	if b.opt.TrimCR && len(line) > 0 && line[len(line)-1] == '\r' {
		return line[:len(line)-1]
	}
	return line
}

// skipLine discards input through the next newline and reports the line
// as too long.
func (b *LineBatcher) skipLine() error {
	b.scratch = b.scratch[:0]
	for {
		_, err := b.r.ReadSlice('\n')
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			b.err = err
			break
		}
	}
	return &LineTooLongError{Max: b.opt.MaxLineLength}
}
