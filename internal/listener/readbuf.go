package listener

import (
	"context"
	"io"
	"sync"
	"time"
)

// SmallReadBuffer is the size of the buffer every stream connection owns.
// Reading into it costs an idle or slow connection little; a connection
// that needs more borrows a large buffer (see ReadBuffer).
const SmallReadBuffer = 4 << 10

// BigBuffers is a source's pool of large read buffers, all of one size:
// room for the longest message the source accepts, and large enough to
// read a busy sender in big blocks. Safe for concurrent use.
type BigBuffers struct {
	size int
	pool sync.Pool // *[]byte of size
}

// NewBigBuffers returns a pool of buffers of size bytes.
func NewBigBuffers(size int) *BigBuffers { return &BigBuffers{size: size} }

// Size is the size of each buffer in bytes.
func (b *BigBuffers) Size() int { return b.size }

func (b *BigBuffers) get() *[]byte {
	if bp, _ := b.pool.Get().(*[]byte); bp != nil {
		return bp
	}
	buf := make([]byte, b.size)
	return &buf
}

// ReadBuffer is the input buffer of one stream connection (netcat, syslog
// over TCP). It reads into a small buffer of its own; when a message in
// progress fills it, or a read fills it (a busy sender), it borrows a large
// one from the source's BigBuffers, paid for from the source's Budget, and
// it gives that back once a short read has been handled entirely. So what
// every connection together holds beyond its small buffer stays within the
// budget, whatever the clients send.
//
// The unread input is Buf[R:W]: the owner parses it there and moves R past
// what it handled. A ReadBuffer is used by one goroutine.
type ReadBuffer struct {
	Buf  []byte // the small buffer, or the borrowed large one
	R, W int

	c        *Conn
	bigs     *BigBuffers
	hold     Hold
	small    []byte
	big      *[]byte // the borrowed buffer, nil when reading into small
	lastRead int     // bytes the last Fill read
	filled   bool    // the last Fill filled the space it had
}

// NewReadBuffer returns c's buffer, borrowing large buffers from bigs
// against budget (nil: unlimited).
func NewReadBuffer(c *Conn, bigs *BigBuffers, budget *Budget) *ReadBuffer {
	small := make([]byte, SmallReadBuffer)
	return &ReadBuffer{Buf: small, small: small, c: c, bigs: bigs, hold: NewHold(budget)}
}

// Prepare makes room for the next Fill, so that need more bytes fit after
// the unread ones when the buffer allows it:
//   - an emptied buffer starts again at its front;
//   - a message in progress that fills the small buffer moves into a large
//     one, waiting for the budget as long as the progress timeout (at least
//     a second), with the connection Busy meanwhile, since the wait is the
//     agent's and not the sender's; Prepare returns false when the budget
//     has no room for it by then (or ctx ends), and the connection should
//     be closed;
//   - after a read that filled the buffer it moves into a large one if the
//     budget has room now, without waiting;
//   - a large buffer emptied after a short read is given back;
//   - unread input with fewer than need bytes of space after it moves to
//     the front.
func (b *ReadBuffer) Prepare(ctx context.Context, need int) bool {
	if b.R == b.W {
		b.R, b.W = 0, 0
	}
	switch {
	case b.big == nil && b.R == 0 && b.W == len(b.Buf):
		if !b.grow(ctx, true) {
			return false
		}
	case b.big == nil && b.filled:
		b.grow(ctx, false)
	case b.big != nil && b.R == b.W && b.lastRead < SmallReadBuffer:
		b.shrink()
	}
	if b.R > 0 && len(b.Buf)-b.W < need {
		b.W = copy(b.Buf, b.Buf[b.R:b.W])
		b.R = 0
	}
	return true
}

// Fill reads once from r into the space after W.
func (b *ReadBuffer) Fill(r io.Reader) (int, error) {
	space := len(b.Buf) - b.W
	n, err := r.Read(b.Buf[b.W:])
	b.W += n
	b.lastRead, b.filled = n, n == space
	return n, err
}

// FillNow reads what the connection holds now, without waiting
// (Conn.ReadNow), into the space after the unread bytes, moving them to the
// front first; after a read that filled the small buffer it moves into a
// large one if the budget has room now. A source calls it before cutting a
// batch short of its limit (flow.Batching), so that input that already
// arrived joins the batch instead of making one of its own.
//
// It reports whether Buf[R:W] changed: more bytes came, or the unread ones
// moved (R and Buf changed, even when nothing came). Then every slice of
// Buf and every offset taken before the call is stale: the caller looks at
// Buf[R:W] again. Called again right away, it moves nothing.
func (b *ReadBuffer) FillNow() (changed bool) {
	if b.R == b.W {
		b.R, b.W = 0, 0
	}
	if b.big == nil && b.filled && b.grow(context.Background(), false) {
		changed = true
	}
	if b.R > 0 {
		b.W = copy(b.Buf, b.Buf[b.R:b.W])
		b.R = 0
		changed = true
	}
	space := len(b.Buf) - b.W
	if space == 0 {
		return changed
	}
	n := b.c.ReadNow(b.Buf[b.W:])
	if n > 0 {
		b.W += n
		b.lastRead, b.filled = n, n == space
		changed = true
	}
	return changed
}

// Release gives back the large buffer and its bytes of the budget; call it
// when the connection ends.
func (b *ReadBuffer) Release() {
	if b.big != nil {
		b.bigs.pool.Put(b.big)
		b.big = nil
		b.Buf = b.small
		b.R, b.W = 0, 0
	}
	b.hold.Release()
}

// grow moves the unread input into a large buffer. With wait set it waits
// for the budget; else it takes the buffer only if it is free now.
func (b *ReadBuffer) grow(ctx context.Context, wait bool) bool {
	n := int64(b.bigs.size)
	if wait {
		b.c.Busy()
		wctx, cancel := context.WithTimeout(ctx, max(b.c.g.cfg.ProgressTimeout, time.Second))
		err := b.hold.Wait(wctx, n)
		cancel()
		b.c.Receiving()
		if err != nil {
			return false
		}
	} else if !b.hold.Try(n) {
		return false
	}
	bp := b.bigs.get()
	b.W = copy(*bp, b.Buf[b.R:b.W])
	b.R = 0
	b.Buf, b.big = *bp, bp
	return true
}

// shrink returns the large buffer once nothing is left in it.
func (b *ReadBuffer) shrink() {
	if b.big == nil || b.R != b.W {
		return
	}
	b.bigs.pool.Put(b.big)
	b.big, b.Buf = nil, b.small
	b.R, b.W = 0, 0
	b.hold.Release()
}
