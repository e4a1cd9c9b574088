// Package filerollsink implements Flume's file_roll sink (RollingFileSink): it
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
package filerollsink

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/serializer"
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
	DefaultAvroSyncBytes = serializer.DefaultAvroSyncBytes
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

// Serializer names an event format of the file_roll sink; the formats
// live in internal/serializer, shared with the hdfs sink.
type Serializer = serializer.Kind

const (
	// Text writes each body (Flume's TEXT).
	Text = serializer.Text
	// HeaderAndText writes "{k=v, ...} body" (Flume's HEADER_AND_TEXT).
	HeaderAndText = serializer.HeaderAndText
	// AvroEvent writes an Avro container of {headers, body} records.
	AvroEvent = serializer.AvroEvent
)

// Writer writes event bodies to rolling files. Write and the roll timer are
// serialised by a mutex, so a roll happens only between batches.
type Writer struct {
	opt Options
	c   *metrics.SinkCounters
	log *slog.Logger

	mu       sync.Mutex
	f        *os.File
	bw       *bufio.Writer
	ser      serializer.Serializer
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
		stop, done := w.stop, w.done
		panics.Go("file_roll sink "+w.c.Name+": roll timer", func() { w.rollLoop(w.opt.RollInterval, stop, done) })
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
	var err error
	for i := range events {
		if err = w.ser.Write(&events[i]); err != nil {
			break
		}
	}
	if err == nil {
		err = w.ser.Flush()
	}
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
		_ = w.f.Close() // the write failed already; that error is returned
		w.f, w.path, w.ser = nil, "", nil
		return fmt.Errorf("file_roll: write %s: %w", path, err)
	}
	return nil
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
		// The avro container header goes out with the first batch.
		w.ser, err = serializer.New(serializer.Options{Kind: w.opt.Serializer, AppendNewline: w.opt.AppendNewline,
			AvroCodec: w.opt.AvroCodec, AvroSyncBytes: w.opt.AvroSyncBytes}, w.bw)
		if err != nil {
			w.bw.Reset(nil)
			_ = f.Close() // nothing was written to it
			w.f, w.path = nil, ""
			w.c.ConnectionFailed.Add(1)
			return fmt.Errorf("file_roll: start %s: %w", path, err)
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
	if w.ser != nil {
		err = w.ser.Close()
		w.ser = nil
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
	so := serializer.Parse(p, "sink.serializer")
	opt.Serializer, opt.AppendNewline, opt.AvroCodec, opt.AvroSyncBytes = so.Kind, so.AppendNewline, so.AvroCodec, so.AvroSyncBytes
	batch := p.IntRange("sink.batchSize", DefaultBatchSize, 1, math.MaxInt32)
	opt.RollTime = p.Enum("sink.pathManager", "default", "DEFAULT", "ROLLTIME") == "rolltime"
	opt.Prefix = p.String("sink.pathManager.prefix", "")
	opt.Extension = p.String("sink.pathManager.extension", "")
	opt.Fsync = p.Bool("sink.fsync", false)

	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	return flow.NewBatchSink(env, NewWriter(opt, c, env.Log()), batch, c), nil
}
