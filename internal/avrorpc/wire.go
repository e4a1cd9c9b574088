package avrorpc

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sluicehq/sluice/internal/event"
)

// The Avro binary encoding of the few types the protocol uses, written by
// hand over byte slices so that every length read from the wire is checked
// against the bytes actually left before anything is allocated.

// ErrMalformed is wrapped by every error about bytes that do not decode.
var ErrMalformed = errors.New("malformed avro data")

// ErrTooLarge is wrapped by every error about a length over a limit.
var ErrTooLarge = errors.New("over limit")

// Decoded-size costs charged against a decoder's budget for what decoding
// allocates beyond the bytes themselves (an Event value, a map entry).
const (
	eventCost  = 64
	headerCost = 48
)

// decoder reads Avro binary data from one message. Strings and byte slices
// it returns alias buf, which must not be modified afterwards.
type decoder struct {
	buf    []byte
	off    int
	budget int // bytes of decoded structure still allowed
	// reserve, when set, is asked for every charge too (a budget shared
	// with other connections); its error ends decoding.
	reserve func(n int) error
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func (d *decoder) remaining() int { return len(d.buf) - d.off }

func (d *decoder) long() (int64, error) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if shift > 63 {
			return 0, malformed("varint longer than 10 bytes at offset %d", d.off)
		}
		if d.off >= len(d.buf) {
			return 0, malformed("truncated varint at offset %d", d.off)
		}
		b := d.buf[d.off]
		d.off++
		u |= uint64(b&0x7f) << shift
		if b < 0x80 {
			break
		}
	}
	return int64(u>>1) ^ -int64(u&1), nil
}

// length reads a string or bytes length and checks it against what is left.
func (d *decoder) length(what string) (int, error) {
	n, err := d.long()
	if err != nil {
		return 0, err
	}
	if n < 0 || n > int64(d.remaining()) {
		return 0, malformed("%s length %d with %d bytes left", what, n, d.remaining())
	}
	return int(n), nil
}

func (d *decoder) bytes() ([]byte, error) {
	n, err := d.length("bytes")
	if err != nil {
		return nil, err
	}
	b := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	return b, nil
}

// str returns a string sharing buf's memory (no copy): buf is never written
// after decoding.
func (d *decoder) str() (string, error) {
	b, err := d.bytes()
	if err != nil || len(b) == 0 {
		return "", err
	}
	return unsafe.String(&b[0], len(b)), nil
}

func (d *decoder) fixed(dst []byte) error {
	if d.remaining() < len(dst) {
		return malformed("truncated fixed(%d) at offset %d", len(dst), d.off)
	}
	d.off += copy(dst, d.buf[d.off:])
	return nil
}

func (d *decoder) boolean() (bool, error) {
	if d.off >= len(d.buf) {
		return false, malformed("truncated boolean at offset %d", d.off)
	}
	b := d.buf[d.off]
	d.off++
	switch b {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, malformed("boolean byte %#x", b)
}

// blockCount reads an array or map block header: the item count of the
// next block (0 ends the array or map). A negative count is followed by the
// block's size in bytes, which is read and checked. minItem is the fewest
// bytes one item can take, so a count that cannot fit in what is left is
// refused before anything is allocated for it.
func (d *decoder) blockCount(minItem int) (int, error) {
	n, err := d.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == -n { // MinInt64
			return 0, malformed("block count %d", n)
		}
		n = -n
		size, err := d.long()
		if err != nil {
			return 0, err
		}
		if size < 0 || size > int64(d.remaining()) {
			return 0, malformed("block size %d with %d bytes left", size, d.remaining())
		}
	}
	if n > int64(d.remaining()/minItem) {
		return 0, malformed("block of %d items with %d bytes left", n, d.remaining())
	}
	return int(n), nil
}

func (d *decoder) charge(n int) error {
	d.budget -= n
	if d.budget < 0 {
		return fmt.Errorf("%w: decoded message exceeds the decode budget", ErrTooLarge)
	}
	if d.reserve != nil {
		return d.reserve(n)
	}
	return nil
}

// stringMap reads a map<string>; it returns nil for an empty map.
func (d *decoder) stringMap() (event.Headers, error) {
	var m event.Headers
	for {
		n, err := d.blockCount(2)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			m.Dedupe() // a map on the wire may repeat a key: the last one wins
			return m, nil
		}
		if err := d.charge(n * headerCost); err != nil {
			return nil, err
		}
		if m == nil {
			m = make(event.Headers, 0, n)
		}
		for range n {
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			v, err := d.str()
			if err != nil {
				return nil, err
			}
			m = append(m, event.Header{Key: k, Value: v})
		}
	}
}

// skipBytesMap reads a map<bytes> (call and handshake metadata) and drops it.
func (d *decoder) skipBytesMap() error {
	for {
		n, err := d.blockCount(2)
		if err != nil || n == 0 {
			return err
		}
		for range n {
			if _, err := d.bytes(); err != nil {
				return err
			}
			if _, err := d.bytes(); err != nil {
				return err
			}
		}
	}
}

// event reads one AvroFlumeEvent {map<string> headers; bytes body}.
// The caller charges eventCost for it.
func (d *decoder) event(e *event.Event) error {
	h, err := d.stringMap()
	if err != nil {
		return fmt.Errorf("event headers: %w", err)
	}
	body, err := d.bytes()
	if err != nil {
		return fmt.Errorf("event body: %w", err)
	}
	*e = event.Event{Headers: h, Body: body}
	return nil
}

// events reads an array<AvroFlumeEvent>, appending to dst.
func (d *decoder) events(dst []event.Event, maxEvents int) ([]event.Event, error) {
	for {
		n, err := d.blockCount(2)
		if err != nil {
			return dst, err
		}
		if n == 0 {
			return dst, nil
		}
		if len(dst)+n > maxEvents {
			return dst, fmt.Errorf("%w: batch of more than %d events", ErrTooLarge, maxEvents)
		}
		if err := d.charge(n * eventCost); err != nil {
			return dst, err
		}
		dst = grow(dst, n)
		for range n {
			dst = dst[:len(dst)+1]
			if err := d.event(&dst[len(dst)-1]); err != nil {
				return dst[:len(dst)-1], fmt.Errorf("event %d: %w", len(dst)-1, err)
			}
		}
	}
}

func grow(s []event.Event, n int) []event.Event {
	if cap(s)-len(s) >= n {
		return s
	}
	out := make([]event.Event, len(s), len(s)+n)
	copy(out, s)
	return out
}

// Encoding: append-style helpers.

func appendLong(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

func appendBytes(b, v []byte) []byte {
	b = appendLong(b, int64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, v string) []byte {
	b = appendLong(b, int64(len(v)))
	return append(b, v...)
}

func appendEvent(b []byte, e *event.Event) []byte {
	if len(e.Headers) > 0 {
		b = appendLong(b, int64(len(e.Headers)))
		for k, v := range e.Headers.All() {
			b = appendString(b, k)
			b = appendString(b, v)
		}
	}
	b = append(b, 0)
	return appendBytes(b, e.Body)
}

func appendEvents(b []byte, events []event.Event) []byte {
	if len(events) > 0 {
		b = appendLong(b, int64(len(events)))
		for i := range events {
			b = appendEvent(b, &events[i])
		}
	}
	return append(b, 0)
}
