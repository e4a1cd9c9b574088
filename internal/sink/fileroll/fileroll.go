// Package fileroll implements Flume's file_roll sink (RollingFileSink): it
// writes events to files in a directory and starts a new file every
// rollInterval. Events are written as Flume's serializers write them: TEXT
// (the body and a newline), HEADER_AND_TEXT ("{k=v, ...} body" and a
// newline) or avro_event (an Avro object container file of
// {headers, body} records, one block per batch at least).
//
// Each batch is written through a large buffer and flushed to the operating
// system before its take commits (as Flume does; with sink.fsync = true, a
// sluice extension, the file is also fsynced). Files roll between batches,
// never inside one, so a rolled file holds whole batches and is closed. A
// file is opened when the first batch after a roll arrives, so an idle sink
// leaves no empty files (Flume opens one every interval).
//
// If a write fails, the file is closed, the batch is rolled back and retried
// into a new file; the failed file may end with part of that batch, which
// then appears twice (at-least-once).
package fileroll

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hamba/avro/v2/ocf"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

const (
	// DefaultBatchSize is Flume's default sink.batchSize.
	DefaultBatchSize = 100
	// DefaultRollInterval is Flume's default sink.rollInterval.
	DefaultRollInterval = 30 * time.Second
	// bufferSize is the write buffer of the open file: a batch of 100
	// 256-byte events (25 KiB) or 1000 of them goes out in one write.
	bufferSize = 256 << 10
	// DefaultAvroSyncBytes is Flume's default syncIntervalBytes.
	DefaultAvroSyncBytes = 2048000
)

// Options configure a Writer.
type Options struct {
	Directory string
	// RollInterval is how often a new file is started; 0 never rolls.
	RollInterval time.Duration
	// Prefix and Extension frame file names as
	// <Prefix><startMillis>-<n>[.<Extension>].
	Prefix, Extension string
	// RollTime names files <Prefix><yyyyMMddHHmmss>-<n>[.<Extension>]
	// after the local time each is opened (Flume's ROLLTIME path manager),
	// n counting from 1 within each second.
	RollTime bool
	// Serializer is how events are written: Text (the default),
	// HeaderAndText or AvroEvent.
	Serializer Serializer
	// AppendNewline writes '\n' after each event in the text serializers
	// (their appendNewline, true by default).
	AppendNewline bool
	// AvroCodec compresses the blocks of an avro_event file: "null" (the
	// default), "deflate", "snappy" or "zstandard".
	AvroCodec string
	// AvroSyncBytes is roughly how many bytes an avro_event block holds
	// before it is written; every batch also ends its block.
	AvroSyncBytes int
	// Fsync syncs the file after each batch, before the take commits.
	Fsync bool
}

// Serializer names an event format of the file_roll sink.
type Serializer int

const (
	// Text writes each body (Flume's TEXT, BodyTextEventSerializer).
	Text Serializer = iota
	// HeaderAndText writes the headers as {k=v, ...}, a space, then the
	// body (Flume's HEADER_AND_TEXT).
	HeaderAndText
	// AvroEvent writes an Avro object container file of records
	// {headers: map<string>, body: bytes} (Flume's avro_event).
	AvroEvent
)

// avroEventSchema is the record schema of Flume's avro_event serializer.
const avroEventSchema = `{"type":"record","name":"Event","fields":[{"name":"headers","type":{"type":"map","values":"string"}},{"name":"body","type":"bytes"}]}`

// appendAvroEvent appends the Avro binary encoding of e as a record of
// avroEventSchema: the headers map as one block (count, then key and value
// strings) ended by a zero count, then the body as bytes. Every length is a
// zigzag varint.
func appendAvroEvent(dst []byte, e *event.Event) []byte {
	if n := len(e.Headers); n > 0 {
		dst = binary.AppendVarint(dst, int64(n))
		for k, v := range e.Headers {
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

// Writer writes event bodies to rolling files. Write and the roll timer are
// serialised by a mutex, so a roll happens only between batches.
type Writer struct {
	opt Options
	c   *metrics.SinkCounters
	log *slog.Logger

	mu       sync.Mutex
	f        *os.File
	bw       *bufio.Writer
	enc      *ocf.Encoder // avro_event only
	hdr      []byte
	path     string
	series   int64  // start time of the sink in Unix ms, as Flume's DefaultPathManager
	index    int    // number of the last file opened
	lastTime string // second of the last ROLLTIME name

	stop chan struct{}
	done chan struct{}
	// rolled, when set (tests), receives after each timed roll.
	rolled chan<- string
}

// NewWriter returns a Writer; c receives the connection counters (a file
// opened counts as a connection created, as in Flume).
func NewWriter(opt Options, c *metrics.SinkCounters, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	return &Writer{opt: opt, c: c, log: log}
}

// Start creates the directory if needed and starts the roll timer.
func (w *Writer) Start(context.Context) error {
	if err := os.MkdirAll(w.opt.Directory, 0o755); err != nil {
		return fmt.Errorf("file_roll: create directory: %w", err)
	}
	w.mu.Lock()
	w.series = time.Now().UnixMilli()
	w.mu.Unlock()
	if w.opt.RollInterval > 0 {
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go w.rollLoop(w.opt.RollInterval, w.stop, w.done)
	}
	return nil
}

// Stop ends the roll timer and closes the current file.
func (w *Writer) Stop(context.Context) error {
	if w.stop != nil {
		close(w.stop)
		<-w.done
		w.stop = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closeFile()
}

func (w *Writer) rollLoop(every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		path := w.path
		if err := w.closeFile(); err != nil {
			w.log.Error("file_roll: closing a rolled file failed; its last batch was already flushed", "file", path, "err", err)
		}
		rolled := w.rolled
		w.mu.Unlock()
		if rolled != nil && path != "" {
			rolled <- path
		}
	}
}

// Write appends the bodies of events to the current file (opening one if
// none is open) and returns once they were handed to the operating system
// (and synced, with Fsync).
func (w *Writer) Write(_ context.Context, events []event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		if err := w.open(); err != nil {
			return err
		}
	}
	err := w.serialize(events)
	if err == nil {
		err = w.bw.Flush()
	}
	if err == nil && w.opt.Fsync {
		err = w.f.Sync()
	}
	if err != nil {
		path := w.path
		w.c.ConnectionFailed.Add(1)
		w.bw.Reset(nil)
		w.f.Close()
		w.f, w.path, w.enc = nil, "", nil
		return fmt.Errorf("file_roll: write %s: %w", path, err)
	}
	return nil
}

// serialize writes events into the buffer (and, for avro_event, ends the
// block). Caller holds mu.
func (w *Writer) serialize(events []event.Event) error {
	bw := w.bw
	switch w.opt.Serializer {
	case AvroEvent:
		for i := range events {
			w.hdr = appendAvroEvent(w.hdr[:0], &events[i])
			if _, err := w.enc.Write(w.hdr); err != nil {
				return err
			}
		}
		return w.enc.Flush()
	case HeaderAndText:
		for i := range events {
			w.hdr = appendHeaders(w.hdr[:0], events[i].Headers)
			w.hdr = append(w.hdr, ' ')
			bw.Write(w.hdr)
			bw.Write(events[i].Body)
			if w.opt.AppendNewline {
				bw.WriteByte('\n')
			}
		}
	default:
		for i := range events {
			bw.Write(events[i].Body) // errors are sticky and returned by Flush
			if w.opt.AppendNewline {
				bw.WriteByte('\n')
			}
		}
	}
	return nil
}

// appendHeaders appends h as Java's Map.toString prints it, {k=v, k2=v2},
// with keys sorted.
func appendHeaders(dst []byte, h map[string]string) []byte {
	dst = append(dst, '{')
	if len(h) > 0 {
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = append(dst, k...)
			dst = append(dst, '=')
			dst = append(dst, h[k]...)
		}
	}
	return append(dst, '}')
}

// open opens the next file. It never truncates an existing file: a name
// that exists is skipped.
func (w *Writer) open() error {
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(nil, bufferSize)
	}
	for range 1000 {
		path := filepath.Join(w.opt.Directory, w.nextName())
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			w.c.ConnectionFailed.Add(1)
			return fmt.Errorf("file_roll: open %w", err)
		}
		w.f, w.path = f, path
		w.bw.Reset(f)
		if w.opt.Serializer == AvroEvent {
			// The container header goes out with the first batch.
			codec := ocf.CodecName(w.opt.AvroCodec)
			if codec == "" {
				codec = ocf.Null
			}
			w.enc, err = ocf.NewEncoder(avroEventSchema, w.bw,
				ocf.WithCodec(codec), ocf.WithBlockLength(0), ocf.WithBlockSize(w.opt.AvroSyncBytes))
			if err != nil {
				w.bw.Reset(nil)
				f.Close()
				w.f, w.path = nil, ""
				w.c.ConnectionFailed.Add(1)
				return fmt.Errorf("file_roll: start avro file %s: %w", path, err)
			}
		}
		w.c.ConnectionCreated.Add(1)
		w.log.Debug("file_roll: opened file", "file", path)
		return nil
	}
	w.c.ConnectionFailed.Add(1)
	return fmt.Errorf("file_roll: no free file name in %s", w.opt.Directory)
}

func (w *Writer) nextName() string {
	var b []byte
	b = append(b, w.opt.Prefix...)
	if w.opt.RollTime {
		now := time.Now().Format("20060102150405")
		if now != w.lastTime {
			w.lastTime, w.index = now, 0
		}
		b = append(b, now...)
	} else {
		b = strconv.AppendInt(b, w.series, 10)
	}
	w.index++
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(w.index), 10)
	if w.opt.Extension != "" {
		b = append(b, '.')
		b = append(b, w.opt.Extension...)
	}
	return string(b)
}

// closeFile flushes and closes the open file, if any. Caller holds mu.
func (w *Writer) closeFile() error {
	if w.f == nil {
		return nil
	}
	f, path := w.f, w.path
	w.f, w.path = nil, ""
	var err error
	if w.enc != nil {
		err = w.enc.Close()
		w.enc = nil
	}
	if err == nil {
		err = w.bw.Flush()
	}
	w.bw.Reset(nil)
	if err == nil && w.opt.Fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		w.c.ConnectionFailed.Add(1)
		return fmt.Errorf("file_roll: close %s: %w", path, err)
	}
	w.c.ConnectionClosed.Add(1)
	w.log.Debug("file_roll: closed file", "file", path)
	return nil
}

// New builds a file_roll sink from its properties: sink.directory
// (required), sink.rollInterval (30 s; 0 never rolls; fractions allowed),
// sink.serializer (TEXT), sink.serializer.appendNewline (true) with TEXT
// and HEADER_AND_TEXT; sink.serializer.syncIntervalBytes
// (2048000) and sink.serializer.compressionCodec (null) with avro_event;
// sink.batchSize (100), sink.pathManager (DEFAULT or ROLLTIME),
// sink.pathManager.prefix, sink.pathManager.extension, and sink.fsync
// (false; a sluice extension).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	opt := Options{Directory: p.Required("sink.directory")}
	roll := p.Float("sink.rollInterval", DefaultRollInterval.Seconds())
	if roll < 0 || math.IsNaN(roll) || roll > 1e9 {
		p.Errorf("sink.rollInterval", "%v is not a valid interval; give seconds between rolls, or 0 to never roll", roll)
		roll = DefaultRollInterval.Seconds()
	}
	opt.RollInterval = time.Duration(roll * float64(time.Second))
	switch s := strings.TrimSpace(p.String("sink.serializer", "TEXT")); {
	case strings.EqualFold(s, "TEXT") || s == "org.apache.flume.serialization.BodyTextEventSerializer$Builder":
		opt.Serializer = Text
	case strings.EqualFold(s, "HEADER_AND_TEXT") || s == "org.apache.flume.serialization.HeaderAndBodyTextEventSerializer$Builder":
		opt.Serializer = HeaderAndText
	case strings.EqualFold(s, "AVRO_EVENT") || s == "org.apache.flume.serialization.FlumeEventAvroEventSerializer$Builder":
		opt.Serializer = AvroEvent
	default:
		p.Errorf("sink.serializer", "%q is not a supported serializer; use TEXT, HEADER_AND_TEXT or avro_event", s)
	}
	if opt.Serializer == AvroEvent {
		opt.AvroSyncBytes = p.IntRange("sink.serializer.syncIntervalBytes", DefaultAvroSyncBytes, 32, math.MaxInt32)
		opt.AvroCodec = p.Enum("sink.serializer.compressionCodec", "null", "null", "deflate", "snappy", "zstandard")
	} else {
		opt.AppendNewline = p.Bool("sink.serializer.appendNewline", true)
	}
	batch := p.IntRange("sink.batchSize", DefaultBatchSize, 1, math.MaxInt32)
	opt.RollTime = p.Enum("sink.pathManager", "default", "DEFAULT", "ROLLTIME") == "rolltime"
	opt.Prefix = p.String("sink.pathManager.prefix", "")
	opt.Extension = p.String("sink.pathManager.extension", "")
	opt.Fsync = p.Bool("sink.fsync", false)

	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, NewWriter(opt, c, env.Log()), batch, c), nil
}
