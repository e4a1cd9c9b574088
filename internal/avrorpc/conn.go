package avrorpc

import (
	"bufio"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// stream is one side of a connection: reads with a stall deadline armed
// while a pack is in flight, writes with a deadline, and optional deflate
// (zlib, RFC 1950) over the whole stream both ways with a sync flush after
// each pack, as Flume's JZlibEncoder/JZlibDecoder do.
type stream struct {
	conn net.Conn
	r    *bufio.Reader
	w    io.Writer    // conn or the zlib writer
	zw   *zlib.Writer // nil without compression

	stall time.Duration

	mu       sync.Mutex
	armed    bool      // a pack is being read
	stopping bool      // reads must fail at once
	deadline time.Time // an absolute read deadline (client calls), if set
}

var longAgo = time.Unix(1, 0)

func newStream(conn net.Conn, deflate bool, level int, stall time.Duration) *stream {
	s := &stream{conn: conn, w: conn, stall: stall}
	var in io.Reader = readerFunc(s.readRaw)
	if deflate {
		in = &lazyInflater{src: in}
		s.zw, _ = zlib.NewWriterLevel(conn, level) // level is checked by the caller
		s.w = s.zw
	} else {
		in = &plainCheck{src: in}
	}
	s.r = bufio.NewReaderSize(in, 32<<10)
	return s
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func (s *stream) readRaw(p []byte) (int, error) {
	s.mu.Lock()
	switch {
	case s.stopping:
		_ = s.conn.SetReadDeadline(longAgo)
	case !s.deadline.IsZero():
		_ = s.conn.SetReadDeadline(s.deadline)
	case s.armed && s.stall > 0:
		_ = s.conn.SetReadDeadline(time.Now().Add(s.stall))
	default:
		_ = s.conn.SetReadDeadline(time.Time{})
	}
	s.mu.Unlock()
	return s.conn.Read(p)
}

// arm starts or ends the stall timer for the pack being read.
func (s *stream) arm(on bool) {
	s.mu.Lock()
	s.armed = on
	s.mu.Unlock()
}

// setDeadline sets (or, with the zero time, clears) an absolute deadline
// for reads.
func (s *stream) setDeadline(t time.Time) {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
}

// stop makes blocked and future reads fail at once.
func (s *stream) stop() {
	s.mu.Lock()
	s.stopping = true
	_ = s.conn.SetReadDeadline(longAgo)
	s.mu.Unlock()
}

// writePack writes b (one or more framed packs) and flushes it to the wire.
func (s *stream) writePack(b []byte, timeout time.Duration) error {
	if timeout > 0 {
		_ = s.conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if s.zw != nil {
		return s.zw.Flush()
	}
	return nil
}

// lazyInflater starts the zlib reader on the first Read, because
// zlib.NewReader reads the stream header and would block a constructor.
type lazyInflater struct {
	src io.Reader
	zr  io.ReadCloser
}

func (l *lazyInflater) Read(p []byte) (int, error) {
	if l.zr == nil {
		zr, err := zlib.NewReader(l.src)
		if errors.Is(err, zlib.ErrHeader) {
			return 0, fmt.Errorf("%w: this end has compression-type = deflate and the other end does not compress (%v); set the same compression-type on both ends",
				ErrCompressionMismatch, err)
		}
		if err != nil {
			return 0, err
		}
		l.zr = zr
	}
	return l.zr.Read(p)
}

// ErrCompressionMismatch is the error of a connection whose two ends
// disagree on compression-type: one deflates its stream, the other does
// not. Without it a user sees only "zlib: invalid header" or a frame size
// made of compressed bytes.
var ErrCompressionMismatch = errors.New("the two ends' compression differs")

// plainCheck reads an uncompressed stream and fails it when its first two
// bytes are a zlib header: the other end deflates while this one does not.
// A plain stream starts with a pack's serial, which counts from 0 on a new
// connection, so its first byte is 0 where a zlib header's is 0x78.
type plainCheck struct {
	src     io.Reader
	checked bool
	first   int // 1 + the first byte, once it was read alone; 0 before
}

func (c *plainCheck) Read(p []byte) (int, error) {
	n, err := c.src.Read(p)
	if c.checked || n == 0 {
		return n, err
	}
	b := p[:n]
	if c.first > 0 { // the first byte came alone; b[0] is the second
		b = []byte{byte(c.first - 1), b[0]}
	} else if n == 1 {
		c.first = int(p[0]) + 1
		return n, err
	}
	c.checked = true
	if b[0] == 0x78 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0 {
		return 0, fmt.Errorf("%w: the other end deflates its stream (it starts with a zlib header) and this end has no compression-type; set compression-type = deflate on both ends, or on neither",
			ErrCompressionMismatch)
	}
	return n, err
}
