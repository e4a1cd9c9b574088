package avrorpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Netty framing, as Avro's NettyTransportCodec writes it (big-endian):
//
//	pack  = serial:int32 frameCount:int32 frame*frameCount
//	frame = length:int32 bytes*length
//
// The frames of a pack concatenate to one request or response.

// Limits bound what a peer can make this side read and allocate. The zero
// value of a field means its default.
type Limits struct {
	// MaxMessageBytes bounds one request or response (the sum of its
	// frames). Default 64 MiB.
	MaxMessageBytes int
	// MaxBatchEvents bounds the events of one appendBatch. Default 100000.
	MaxBatchEvents int
}

// Default limits.
const (
	DefaultMaxMessageBytes = 64 << 20
	DefaultMaxBatchEvents  = 100_000
)

func (l Limits) withDefaults() Limits {
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if l.MaxBatchEvents <= 0 {
		l.MaxBatchEvents = DefaultMaxBatchEvents
	}
	return l
}

// maxFrames bounds the frame count of one pack. Java writes frames of at
// most 8 KiB unless a large body travels in a frame of its own, so a real
// message never comes near one frame per 64 bytes.
func (l Limits) maxFrames() int { return l.MaxMessageBytes/64 + 1024 }

// decodeBudget bounds the memory decoding one message may allocate beyond
// its bytes (Event values, header map entries).
func (l Limits) decodeBudget() int { return 2 * l.MaxMessageBytes }

// pack is one framed request or response.
type pack struct {
	serial int32
	msg    []byte // the frames, concatenated
}

// readPack reads one pack from r. started is called once the first byte of
// the pack has arrived (the server arms its stall timer there). The message
// buffer grows as bytes arrive, so a peer that announces a large frame and
// sends nothing makes this side allocate nothing.
func readPack(r *bufio.Reader, lim Limits, started func()) (pack, error) {
	return readPackMem(r, lim, started, nil)
}

// readPackMem is readPack with reserve, when not nil, asked for the bytes
// of each new message buffer before it is allocated (and given back, as a
// negative count, the bytes of the one it replaces); its error ends the read.
func readPackMem(r *bufio.Reader, lim Limits, started func(), reserve func(n int) error) (pack, error) {
	var hdr [8]byte
	if _, err := r.ReadByte(); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// A deflate stream is never finished: the peer just closes.
			err = io.EOF
		}
		return pack{}, err // io.EOF here is a clean end between packs
	}
	_ = r.UnreadByte()
	if started != nil {
		started()
	}
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return pack{}, fmt.Errorf("read pack header: %w", unexpected(err))
	}
	p := pack{serial: int32(binary.BigEndian.Uint32(hdr[0:4]))}
	count := int32(binary.BigEndian.Uint32(hdr[4:8]))
	if count < 0 || int(count) > lim.maxFrames() {
		return p, fmt.Errorf("%w: frame count %d (limit %d)", ErrTooLarge, count, lim.maxFrames())
	}
	total := 0
	var buf []byte
	for i := range int(count) {
		if _, err := io.ReadFull(r, hdr[:4]); err != nil {
			return p, fmt.Errorf("read frame %d length: %w", i, unexpected(err))
		}
		n := int32(binary.BigEndian.Uint32(hdr[:4]))
		if n < 0 || int64(total)+int64(n) > int64(lim.MaxMessageBytes) {
			return p, fmt.Errorf("%w: frame of %d bytes after %d makes the message larger than %d bytes", ErrTooLarge, n, total, lim.MaxMessageBytes)
		}
		total += int(n)
		var err error
		if buf, err = readAppend(r, buf, int(n), lim.MaxMessageBytes, reserve); err != nil {
			return p, fmt.Errorf("read frame %d of %d bytes: %w", i, n, unexpected(err))
		}
	}
	p.msg = buf
	return p, nil
}

// readAppend appends n bytes from r to buf. buf grows only as bytes
// arrive (at most one 64 KiB chunk ahead, or doubling up to limit), and
// only once reserve (when not nil) granted the growth.
func readAppend(r io.Reader, buf []byte, n, limit int, reserve func(int) error) ([]byte, error) {
	const chunk = 64 << 10
	for n > 0 {
		if cap(buf)-len(buf) < min(n, chunk) {
			size := max(len(buf)+min(n, chunk), min(2*cap(buf), limit))
			if reserve != nil {
				// The old buffer lives until it is copied: take the whole
				// new one, then give the old one back.
				if err := reserve(size); err != nil {
					return buf, err
				}
			}
			nb := make([]byte, len(buf), size)
			copy(nb, buf)
			if reserve != nil {
				_ = reserve(-cap(buf))
			}
			buf = nb
		}
		m := min(n, cap(buf)-len(buf))
		got, err := io.ReadFull(r, buf[len(buf):len(buf)+m])
		buf = buf[:len(buf)+got]
		n -= got
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// appendPack frames msg as one pack with one frame.
func appendPack(dst []byte, serial int32, msg []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(serial))
	dst = binary.BigEndian.AppendUint32(dst, 1)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msg)))
	return append(dst, msg...)
}
