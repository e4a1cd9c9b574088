package hdfssink

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/serializer"
)

// fileType is Flume's hdfs.fileType.
type fileType int

const (
	sequenceFile fileType = iota
	dataStream
	compressedStream
)

func (t fileType) String() string {
	switch t {
	case dataStream:
		return "DataStream"
	case compressedStream:
		return "CompressedStream"
	}
	return "SequenceFile"
}

// format is everything that decides the bytes of a file. It is recorded in
// the journal so that recovery after a crash knows how to find the end of
// the last complete batch.
type format struct {
	Type       fileType
	Codec      string // codec name, "" for none
	TextValues bool   // SequenceFile writeFormat Text
	Serializer serializer.Options
}

func (f format) codec() *codec {
	if f.Codec == "" {
		return nil
	}
	c, _ := codecByName(f.Codec)
	return c
}

// encoder turns a file's events into its bytes, batch by batch.
type encoder interface {
	// add encodes one event; key is the SequenceFile key (event time, ms).
	add(e *event.Event, key int64) error
	// endBatch returns the bytes to append to the file for everything
	// added since the last call, in a form readers decode whole (Flume's
	// sync()). The slice is valid until the next call.
	endBatch() ([]byte, error)
	// close returns the last bytes of the file.
	close() ([]byte, error)
}

func (f format) newEncoder() (encoder, error) {
	switch f.Type {
	case sequenceFile:
		return &seqEncoder{w: newSeqWriter(f.codec(), f.TextValues)}, nil
	default:
		e := &streamEncoder{codec: f.codec()}
		s, err := serializer.New(f.Serializer, &e.buf)
		if err != nil {
			return nil, err
		}
		e.ser = s
		return e, nil
	}
}

type seqEncoder struct {
	w    *seqWriter
	done []byte
}

func (s *seqEncoder) add(e *event.Event, key int64) error { return s.w.add(key, e.Body) }

func (s *seqEncoder) endBatch() ([]byte, error) {
	if err := s.w.flush(); err != nil {
		return nil, err
	}
	// Hand out out and start a fresh one: the caller may hold the slice
	// while the writer goes on.
	s.done, s.w.out = s.w.out, s.done[:0]
	return s.done, nil
}

func (s *seqEncoder) close() ([]byte, error) { return s.endBatch() }

// streamEncoder is DataStream (codec nil) and CompressedStream: the
// serializer writes into buf, and each batch leaves as it is or as one
// compressed unit.
type streamEncoder struct {
	codec *codec
	ser   serializer.Serializer
	buf   bytes.Buffer
	out   []byte
}

func (s *streamEncoder) add(e *event.Event, _ int64) error { return s.ser.Write(e) }

func (s *streamEncoder) endBatch() ([]byte, error) {
	if err := s.ser.Flush(); err != nil {
		return nil, err
	}
	return s.take()
}

func (s *streamEncoder) take() ([]byte, error) {
	if s.buf.Len() == 0 {
		return nil, nil
	}
	if s.codec == nil {
		s.out = append(s.out[:0], s.buf.Bytes()...)
	} else {
		var err error
		if s.out, err = s.codec.compress(s.out[:0], s.buf.Bytes()); err != nil {
			return nil, err
		}
	}
	s.buf.Reset()
	return s.out, nil
}

func (s *streamEncoder) close() ([]byte, error) {
	if err := s.ser.Close(); err != nil {
		return nil, err
	}
	return s.take()
}

// scan returns the length of the longest prefix of data that ends a
// complete batch unit of format f (see scanSeq and the codecs' scans).
func (f format) scan(data []byte) (int, error) {
	switch {
	case f.Type == sequenceFile:
		return scanSeq(data, f.codec())
	case f.Type == compressedStream:
		c := f.codec()
		if c == nil {
			return 0, fmt.Errorf("unknown codec %q", f.Codec)
		}
		return c.scan(data), nil
	case f.Serializer.Kind == serializer.AvroEvent:
		return scanAvro(data), nil
	case f.Serializer.AppendNewline:
		return bytes.LastIndexByte(data, '\n') + 1, nil
	}
	return len(data), nil
}

// scanAvro returns the end of the last complete block of an Avro object
// container (or of its header, or 0).
func scanAvro(data []byte) int {
	if len(data) < 4 || string(data[:4]) != "Obj\x01" {
		return 0
	}
	pos := 4
	// Metadata map: blocks of count (negative: followed by a byte size)
	// then key string and value bytes, ended by 0.
	for {
		n, k := binary.Varint(data[pos:])
		if k <= 0 {
			return 0
		}
		pos += k
		if n == 0 {
			break
		}
		if n < 0 {
			n = -n
			_, k := binary.Varint(data[pos:])
			if k <= 0 {
				return 0
			}
			pos += k
		}
		for range 2 * n {
			l, k := binary.Varint(data[pos:])
			if k <= 0 || l < 0 || pos+k+int(l) > len(data) {
				return 0
			}
			pos += k + int(l)
		}
	}
	if pos+16 > len(data) {
		return 0
	}
	sync := data[pos : pos+16]
	pos += 16
	good := pos
	for pos < len(data) {
		_, k := binary.Varint(data[pos:])
		if k <= 0 {
			break
		}
		size, k2 := binary.Varint(data[pos+k:])
		if k2 <= 0 || size < 0 {
			break
		}
		end := pos + k + k2 + int(size)
		if end+16 > len(data) || !bytes.Equal(data[end:end+16], sync) {
			break
		}
		pos = end + 16
		good = pos
	}
	return good
}

// eventKey is the SequenceFile key of e, as Flume's serializers make it:
// the timestamp header, else the current time.
func eventKey(e *event.Event, now int64) int64 {
	if ts, ok := e.Headers.Get("timestamp"); ok {
		if ms, err := strconv.ParseInt(ts, 10, 64); err == nil {
			return ms
		}
	}
	return now
}
