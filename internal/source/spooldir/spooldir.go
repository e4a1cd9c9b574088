// Package spooldirsource is Flume's spooling directory source ("spooldir"): it
// reads the files dropped into a directory, one at a time, turns each line
// into an event, and marks a file done (renames it with fileSuffix, records
// it in trackerDir, or deletes it) once every line of it was committed to
// the channels.
//
// Progress: after every batch committed to the channels, the source records
// how far it got in the file (trackerDir/.sluice-spool-progress.json,
// written atomically: temporary file, fsync, rename, fsync of the
// directory), and reads the next batch only once that is on disk. So a
// stop, a restart or a crash continues the file after its last committed
// line: a clean stop repeats nothing, a crash (SIGKILL, power loss) repeats
// at most the one batch committed but not yet recorded. A file is never
// read again from its start once some of it was delivered.
//
// Files must not change once they are in the directory. A file that does
// (it grows, shrinks, is touched or replaced while it is read) is reported
// once, at WARN, naming it: what was delivered of it stays delivered, its
// progress is kept, and it is left in place, not marked done and not read
// further until the source restarts (Flume stops the whole source instead;
// sluice goes on with the other files). A restarted source continues it
// after its last delivered line, as Flume does after a restart, so lines
// appended to it are delivered once and nothing is repeated; a file that
// became shorter than what was delivered, or another file under its name,
// cannot be continued and is left for the operator for good.
package spooldirsource

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Source is the spooldir source. Build it with New.
type Source struct {
	env               flow.Env
	dir               string
	suffix            string
	deleteImmediate   bool
	include, ignore   *regexp.Regexp
	trackerDir        string
	trackerMarks      bool // trackingPolicy tracker_dir
	consumeOrder      string
	pollDelay         time.Duration
	batch             flow.Batching
	maxBackoff        time.Duration
	fileHeader        bool
	fileHeaderKey     string
	basenameHeader    bool
	basenameHeaderKey string
	maxLineLength     int
	maxBlob           int // the BlobDeserializer's maxBlobLength; 0: the LINE deserializer
	decodePolicy      string
	counters          *metrics.SourceCounters

	worker      flow.Worker           // the reading goroutine
	progressErr atomic.Pointer[error] // why the progress file cannot be written now, or nil
}

// New builds a spooldir source from Flume's properties spoolDir, fileSuffix
// (.COMPLETED), deletePolicy (never|immediate), fileHeader (false),
// fileHeaderKey (file), basenameHeader (false), basenameHeaderKey
// (basename), includePattern (^.*$), ignorePattern (^$), trackerDir
// (.flumespool, relative to spoolDir), trackingPolicy (rename|tracker_dir),
// consumeOrder (oldest|youngest|random), pollDelay (500 ms), batchSize
// (100; left unset, batches grow to the channels' transactionCapacity:
// flow.Batching), maxBackoff (4000 ms), inputCharset (UTF-8), decodeErrorPolicy
// (FAIL|REPLACE|IGNORE), deserializer (LINE) with
// deserializer.maxLineLength (2048) and deserializer.outputCharset (UTF-8)
// or Flume's BlobDeserializer (the whole file, in pieces of
// deserializer.maxBlobLength bytes, 100000000, each an event), and
// recursiveDirectorySearch (only false). Flume's deprecated
// bufferMaxLines and bufferMaxLineLength are accepted and ignored, as Flume
// ignores them.
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	s.dir = p.Required("spoolDir")
	if s.dir != "" {
		if abs, err := filepath.Abs(s.dir); err == nil {
			s.dir = abs
		}
	}
	s.suffix = p.String("fileSuffix", ".COMPLETED")
	if s.suffix == "" {
		p.Errorf("fileSuffix", "must not be empty: done files would be read again")
	}
	s.deleteImmediate = p.Enum("deletePolicy", "never", "never", "immediate") == "immediate"
	s.fileHeader = p.Bool("fileHeader", false)
	s.fileHeaderKey = p.String("fileHeaderKey", "file")
	s.basenameHeader = p.Bool("basenameHeader", false)
	s.basenameHeaderKey = p.String("basenameHeaderKey", "basename")
	s.include = pattern(p, "includePattern", "^.*$")
	s.ignore = pattern(p, "ignorePattern", "^$")
	s.trackerDir = p.String("trackerDir", ".flumespool")
	if !filepath.IsAbs(s.trackerDir) && s.dir != "" {
		s.trackerDir = filepath.Join(s.dir, s.trackerDir)
	}
	s.trackerMarks = p.Enum("trackingPolicy", "rename", "rename", "tracker_dir") == "tracker_dir"
	s.consumeOrder = p.Enum("consumeOrder", "oldest", "oldest", "youngest", "random")
	s.pollDelay = time.Duration(p.IntRange("pollDelay", 500, 1, math.MaxInt32)) * time.Millisecond
	s.batch = flow.ReadBatching(p, "batchSize", flow.DefaultBatchSize)
	s.maxBackoff = time.Duration(p.IntRange("maxBackoff", 4000, 1, math.MaxInt32)) * time.Millisecond
	if p.Bool("recursiveDirectorySearch", false) {
		p.Errorf("recursiveDirectorySearch", "sluice reads only the files directly in spoolDir; set it to false")
	}
	if cs := strings.ToUpper(p.String("inputCharset", "UTF-8")); cs != "UTF-8" && cs != "UTF8" {
		p.Errorf("inputCharset", "%q is not supported; sluice reads UTF-8", cs)
	}
	s.decodePolicy = p.Enum("decodeErrorPolicy", "fail", "FAIL", "REPLACE", "IGNORE")
	switch d := strings.TrimSpace(p.String("deserializer", "LINE")); {
	case strings.EqualFold(d, "LINE") || d == "org.apache.flume.serialization.LineDeserializer$Builder":
	case d == blobDeserializer:
		s.maxBlob = p.IntRange("deserializer.maxBlobLength", 100000000, 1, math.MaxInt32)
	default:
		p.Errorf("deserializer", "%q is not supported; sluice has the LINE deserializer and %s", d, blobDeserializer)
	}
	s.maxLineLength = p.IntRange("deserializer.maxLineLength", 2048, 1, 1<<30)
	if cs := strings.ToUpper(p.String("deserializer.outputCharset", "UTF-8")); cs != "UTF-8" && cs != "UTF8" {
		p.Errorf("deserializer.outputCharset", "%q is not supported; sluice writes UTF-8", cs)
	}
	for _, k := range []string{"bufferMaxLines", "bufferMaxLineLength"} {
		p.Ignored(k, "deprecated and ignored by Flume too; deserializer.maxLineLength bounds a line")
	}
	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// blobDeserializer is Flume's BlobDeserializer, by its class name (Flume
// has no short name for it).
const blobDeserializer = "org.apache.flume.sink.solr.morphline.BlobDeserializer$Builder"

func pattern(p *config.Props, key, def string) *regexp.Regexp {
	v := p.String(key, def)
	re, err := regexp.Compile("^(?:" + v + ")$")
	if err != nil {
		p.Errorf(key, "%q is not a valid regular expression: %v", v, err)
		return regexp.MustCompile("^(?:" + def + ")$")
	}
	return re
}

// BatchSize reports batchSize, so the agent can check it against the
// channels' transactionCapacity.
func (s *Source) BatchSize() int { return s.batch.Size() }

// Health reports a progress file that cannot be written: reading waits
// until it can.
func (s *Source) Health() error {
	if err := s.progressErr.Load(); err != nil {
		return fmt.Errorf("cannot save its progress in %s (reading waits until it can): %w", s.trackerDir, *err)
	}
	return nil
}

// Start checks the directories and starts reading in a goroutine that Stop
// ends.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.worker.Running() {
		return fmt.Errorf("spooldir %s: already started", s.env.Name)
	}
	r, err := newReader(s, p)
	if err != nil {
		return fmt.Errorf("spooldir %s: %w", s.env.Name, err)
	}
	s.counters.Started()
	s.worker.Go("spooldir source "+s.env.Name, func(ctx context.Context) {
		r.run(ctx)
		r.throttle.Flush()
		r.puts.Stop()
		r.saves.Stop()
		r.lists.Stop()
	})
	return nil
}

// Stop stops reading and waits for the batch in flight (its progress is
// recorded once it is committed).
func (s *Source) Stop(ctx context.Context) error {
	if !s.worker.Running() {
		return nil
	}
	defer s.counters.Stopped()
	if err := s.worker.Stop(ctx); err != nil {
		return fmt.Errorf("spooldir %s: stop: %w", s.env.Name, err)
	}
	return nil
}
