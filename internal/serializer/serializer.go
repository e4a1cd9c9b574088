// Package serializer writes events as Flume's EventSerializers do, for the
// sinks that write files (file_roll, hdfs): TEXT (the body and a newline),
// HEADER_AND_TEXT ("{k=v, ...} body" and a newline) and avro_event (an Avro
// object container file of {headers, body} records).
//
// A Serializer follows Flume's EventSerializer life: it is made for one
// output stream when a file is created (the avro container header goes out
// then), writes events, ends a batch with Flush (avro_event ends its block,
// so everything written so far is readable), and Close ends the file.
package serializer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/hamba/avro/v2/ocf"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
)

// Kind names an event format.
type Kind int

const (
	// Text writes each body (Flume's TEXT, BodyTextEventSerializer).
	Text Kind = iota
	// HeaderAndText writes the headers as {k=v, ...}, a space, then the
	// body (Flume's HEADER_AND_TEXT).
	HeaderAndText
	// AvroEvent writes an Avro object container file of records
	// {headers: map<string>, body: bytes} (Flume's avro_event).
	AvroEvent
)

func (k Kind) String() string {
	switch k {
	case HeaderAndText:
		return "HEADER_AND_TEXT"
	case AvroEvent:
		return "avro_event"
	}
	return "TEXT"
}

// DefaultAvroSyncBytes is Flume's default syncIntervalBytes.
const DefaultAvroSyncBytes = 2048000

// Options choose and tune a serializer.
type Options struct {
	Kind Kind
	// AppendNewline writes '\n' after each event in the text serializers
	// (their appendNewline, true by default).
	AppendNewline bool
	// AvroCodec compresses the blocks of an avro_event file: "null" (the
	// default), "deflate", "snappy" or "zstandard".
	AvroCodec string
	// AvroSyncBytes is roughly how many bytes an avro_event block holds
	// before it is written; every Flush also ends its block.
	AvroSyncBytes int
}

// Parse reads a serializer's settings from p as Flume names them: key
// itself (TEXT, HEADER_AND_TEXT, avro_event or their builder class names;
// TEXT when unset), key.appendNewline (true) for the text serializers, and
// key.syncIntervalBytes (2048000) and key.compressionCodec (null) for
// avro_event. file_roll passes "sink.serializer", hdfs "serializer".
func Parse(p *config.Props, key string) Options {
	var opt Options
	switch s := strings.TrimSpace(p.String(key, "TEXT")); {
	case strings.EqualFold(s, "TEXT") || s == "org.apache.flume.serialization.BodyTextEventSerializer$Builder":
		opt.Kind = Text
	case strings.EqualFold(s, "HEADER_AND_TEXT") || s == "org.apache.flume.serialization.HeaderAndBodyTextEventSerializer$Builder":
		opt.Kind = HeaderAndText
	case strings.EqualFold(s, "AVRO_EVENT") || s == "org.apache.flume.serialization.FlumeEventAvroEventSerializer$Builder":
		opt.Kind = AvroEvent
	default:
		p.Errorf(key, "%q is not a supported serializer; use TEXT, HEADER_AND_TEXT or avro_event", s)
	}
	if opt.Kind == AvroEvent {
		opt.AvroSyncBytes = p.IntRange(key+".syncIntervalBytes", DefaultAvroSyncBytes, 32, math.MaxInt32)
		opt.AvroCodec = p.Enum(key+".compressionCodec", "null", "null", "deflate", "snappy", "zstandard")
	} else {
		opt.AppendNewline = p.Bool(key+".appendNewline", true)
	}
	return opt
}

// Serializer writes events to one output stream.
type Serializer interface {
	// Write writes one event. Errors may be sticky and reported by Flush.
	Write(e *event.Event) error
	// Flush ends a batch: everything written is handed to the stream in a
	// form a reader can decode (avro_event ends its block).
	Flush() error
	// Close ends the file (it does not close the stream).
	Close() error
}

// New returns a serializer writing to w. For avro_event the container
// header is written to w at once.
func New(opt Options, w io.Writer) (Serializer, error) {
	switch opt.Kind {
	case AvroEvent:
		codec := ocf.CodecName(opt.AvroCodec)
		if codec == "" {
			codec = ocf.Null
		}
		size := opt.AvroSyncBytes
		if size <= 0 {
			size = DefaultAvroSyncBytes
		}
		enc, err := ocf.NewEncoder(avroEventSchema, w,
			ocf.WithCodec(codec), ocf.WithBlockLength(0), ocf.WithBlockSize(size))
		if err != nil {
			return nil, fmt.Errorf("start avro container: %w", err)
		}
		return &avroSerializer{enc: enc}, nil
	case HeaderAndText:
		return &textSerializer{w: writerOf(w), headers: true, newline: opt.AppendNewline}, nil
	default:
		return &textSerializer{w: writerOf(w), newline: opt.AppendNewline}, nil
	}
}

// byteWriter is what the text serializers write to; a *bufio.Writer or a
// *bytes.Buffer is one already.
type byteWriter interface {
	io.Writer
	WriteByte(byte) error
}

type flusher interface{ Flush() error }

func writerOf(w io.Writer) byteWriter {
	if bw, ok := w.(byteWriter); ok {
		return bw
	}
	return bufio.NewWriter(w)
}

type textSerializer struct {
	w       byteWriter
	headers bool
	newline bool
	buf     []byte
	err     error
}

func (s *textSerializer) Write(e *event.Event) error {
	if s.err != nil {
		return s.err
	}
	if s.headers {
		s.buf = AppendHeaders(s.buf[:0], e.Headers)
		s.buf = append(s.buf, ' ')
		if _, err := s.w.Write(s.buf); err != nil {
			s.err = err
			return err
		}
	}
	if _, err := s.w.Write(e.Body); err != nil {
		s.err = err
		return err
	}
	if s.newline {
		if err := s.w.WriteByte('\n'); err != nil {
			s.err = err
			return err
		}
	}
	return nil
}

func (s *textSerializer) Flush() error {
	if s.err != nil {
		return s.err
	}
	if f, ok := s.w.(flusher); ok {
		return f.Flush()
	}
	return nil
}

func (s *textSerializer) Close() error { return s.Flush() }

// AppendHeaders appends h as Java's Map.toString prints it, {k=v, k2=v2},
// with keys sorted (Flume's HEADER_AND_TEXT; a HashMap's order is not
// defined, sorted is the stable choice).
func AppendHeaders(dst []byte, h event.Headers) []byte {
	dst = append(dst, '{')
	if len(h) > 0 {
		var scratch [16]event.Header
		for i, kv := range h.AppendSorted(scratch[:0]) {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = append(dst, kv.Key...)
			dst = append(dst, '=')
			dst = append(dst, kv.Value...)
		}
	}
	return append(dst, '}')
}

// avroEventSchema is the record schema of Flume's avro_event serializer.
const avroEventSchema = `{"type":"record","name":"Event","fields":[{"name":"headers","type":{"type":"map","values":"string"}},{"name":"body","type":"bytes"}]}`

type avroSerializer struct {
	enc *ocf.Encoder
	buf []byte
}

func (s *avroSerializer) Write(e *event.Event) error {
	s.buf = appendAvroEvent(s.buf[:0], e)
	_, err := s.enc.Write(s.buf)
	return err
}

func (s *avroSerializer) Flush() error { return s.enc.Flush() }
func (s *avroSerializer) Close() error { return s.enc.Close() }

// appendAvroEvent appends the Avro binary encoding of e as a record of
// avroEventSchema: the headers map as one block (count, then key and value
// strings) ended by a zero count, then the body as bytes. Every length is a
// zigzag varint.
func appendAvroEvent(dst []byte, e *event.Event) []byte {
	if n := len(e.Headers); n > 0 {
		dst = binary.AppendVarint(dst, int64(n))
		for k, v := range e.Headers.All() {
			dst = binary.AppendVarint(dst, int64(len(k)))
			dst = append(dst, k...)
			dst = binary.AppendVarint(dst, int64(len(v)))
			dst = append(dst, v...)
		}
	}
	dst = append(dst, 0)
	dst = binary.AppendVarint(dst, int64(len(e.Body)))
	return append(dst, e.Body...)
}
