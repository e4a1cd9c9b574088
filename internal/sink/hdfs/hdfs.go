// Package hdfssink implements Flume's hdfs sink (HDFSEventSink) on three kinds
// of store, chosen by the scheme of hdfs.path: a local or mounted
// filesystem (a plain path or file://), S3 (s3a://, s3://) and HDFS
// (hdfs://).
//
// Events go to bucket files named by hdfs.path and hdfs.filePrefix with
// Flume's escapes expanded per event; each file is written as
// <inUsePrefix><prefix>.<counter><suffix><inUseSuffix> and renamed (or
// uploaded) when it rolls on rollInterval, rollSize, rollCount, idleTimeout
// or maxOpenFiles. Files are SequenceFiles (Hadoop's format, byte for byte),
// DataStream (a serializer's output) or CompressedStream (the same,
// compressed with a Hadoop codec).
//
// Delivery: a batch's take commits only after the bytes of every file it
// touched are durable: fdatasync'ed on local disks, or fdatasync'ed into a
// local staging file for S3 (which cannot append; the file is uploaded,
// multipart when large, when it rolls) and HDFS (whose Go client has no
// hflush; the file is copied, closed and renamed when it rolls). Every file
// being written or waiting to be finished is recorded in a journal in the
// staging directory first, so the next start after a crash cuts each such
// file after its last complete batch and finishes it: no ".tmp" file and
// no multipart upload is left behind.
package hdfssink

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bucketpath"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/serializer"
)

// Flume's defaults.
const (
	DefaultBatchSize    = 100
	DefaultRollInterval = 30 * time.Second
	DefaultRollSize     = 1024
	DefaultRollCount    = 10
	DefaultMaxOpenFiles = 5000
	DefaultCallTimeout  = 30 * time.Second
	DefaultRetry        = 180 * time.Second
	DefaultThreads      = 10
	// DefaultMaxPendingBytes is how many bytes of closed files may wait to
	// be finished (an S3 outage) before the sink stops taking events.
	DefaultMaxPendingBytes = 1 << 30
)

// Sink is the hdfs sink: Flume's transaction loop around a Writer.
type Sink struct {
	*flow.BatchSink
	w *Writer
}

// Health reports a store that has refused files for longer than a grace
// period.
func (s *Sink) Health() error { return s.w.Health() }

// Start logs in to Kerberos first when the store is a kerberized HDFS, so
// that a login the KDC refuses stops the start with its reason, as in
// Flume; then it starts the writer.
func (s *Sink) Start(ctx context.Context) error {
	hs, _ := s.w.store.(*hdfsStore)
	if hs != nil {
		if err := hs.login(); err != nil {
			return fmt.Errorf("hdfs sink: %w", err)
		}
	}
	err := s.BatchSink.Start(ctx)
	if err != nil && hs != nil {
		_ = hs.close()
	}
	return err
}

var _ flow.HealthReporter = (*Sink)(nil)

// New builds an hdfs sink from Flume's properties (see docs/components.md
// for each one and its default).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	opt := Options{}
	pathText := p.Required("hdfs.path")
	var err error
	if opt.Path, err = bucketpath.Parse(pathText); err != nil {
		p.Errorf("hdfs.path", "%v", err)
		opt.Path, _ = bucketpath.Parse("")
	}
	prefix := p.String("hdfs.filePrefix", "FlumeData")
	if opt.Prefix, err = bucketpath.Parse(prefix); err != nil {
		p.Errorf("hdfs.filePrefix", "%v", err)
		opt.Prefix, _ = bucketpath.Parse("FlumeData")
	}
	if strings.Contains(prefix, "/") {
		p.Errorf("hdfs.filePrefix", "%q contains '/'; put directories in hdfs.path", prefix)
	}
	opt.Suffix = p.String("hdfs.fileSuffix", "")
	opt.InUsePrefix = p.String("hdfs.inUsePrefix", "")
	opt.InUseSuffix = p.String("hdfs.inUseSuffix", ".tmp")
	if p.Bool("hdfs.emptyInUseSuffix", false) {
		opt.InUseSuffix = ""
	}

	seconds := func(key string, def time.Duration) time.Duration {
		v := p.Float(key, def.Seconds())
		if v < 0 || math.IsNaN(v) || v > 1e9 {
			p.Errorf(key, "%v is not a valid number of seconds; use 0 to turn it off", v)
			return def
		}
		return time.Duration(v * float64(time.Second))
	}
	opt.RollInterval = seconds("hdfs.rollInterval", DefaultRollInterval)
	opt.RollSize = nonNegative(p, "hdfs.rollSize", DefaultRollSize)
	opt.RollCount = nonNegative(p, "hdfs.rollCount", DefaultRollCount)
	opt.IdleTimeout = seconds("hdfs.idleTimeout", 0)
	batch := p.IntRange("hdfs.batchSize", DefaultBatchSize, 1, math.MaxInt32)
	opt.MaxOpenFiles = p.IntRange("hdfs.maxOpenFiles", DefaultMaxOpenFiles, 1, math.MaxInt32)
	opt.CallTimeout = time.Duration(p.Int64("hdfs.callTimeout", DefaultCallTimeout.Milliseconds())) * time.Millisecond
	opt.Threads = p.IntRange("hdfs.threadsPoolSize", DefaultThreads, 1, 1000)
	p.Ignored("hdfs.rollTimerPoolSize", "one timer goroutine rolls every file")
	p.Ignored("hdfs.minBlockReplicas", "sluice does not roll on under-replicated blocks; replication is the cluster's setting")
	p.Ignored("hdfs.useRawLocalFileSystem", "local files are written directly, without Hadoop's checksum files")
	opt.CloseTries = p.IntRange("hdfs.closeTries", 0, 0, math.MaxInt32)
	opt.RetryInterval = seconds("hdfs.retryInterval", DefaultRetry)
	opt.MaxPendingBytes = p.Int64("hdfs.maxPendingBytes", DefaultMaxPendingBytes)

	// Time escapes.
	if tz := strings.TrimSpace(p.String("hdfs.timeZone", "")); tz != "" {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			p.Errorf("hdfs.timeZone", "%q is not a time zone name (such as UTC or America/Los_Angeles): %v", tz, err)
		}
		opt.Time.Location = loc
	}
	opt.Time.UseLocalTime = p.Bool("hdfs.useLocalTimeStamp", false)
	if p.Bool("hdfs.round", false) {
		opt.Time.Round = true
		unit := p.Enum("hdfs.roundUnit", "second", "second", "minute", "hour")
		limit := 60
		switch unit {
		case "minute":
			opt.Time.RoundUnit = bucketpath.Minute
		case "hour":
			opt.Time.RoundUnit, limit = bucketpath.Hour, 24
		}
		opt.Time.RoundValue = p.IntRange("hdfs.roundValue", 1, 1, limit)
	} else {
		p.MarkUsed("hdfs.roundUnit")
		p.MarkUsed("hdfs.roundValue")
	}

	// File format.
	switch ft := strings.TrimSpace(p.String("hdfs.fileType", "SequenceFile")); {
	case strings.EqualFold(ft, "SequenceFile"):
		opt.Format.Type = sequenceFile
	case strings.EqualFold(ft, "DataStream"):
		opt.Format.Type = dataStream
	case strings.EqualFold(ft, "CompressedStream"):
		opt.Format.Type = compressedStream
	default:
		p.Errorf("hdfs.fileType", "%q is not a file type; use SequenceFile, DataStream or CompressedStream", ft)
	}
	if name := strings.TrimSpace(p.String("hdfs.codeC", "")); name != "" {
		c, err := codecByName(name)
		if err != nil {
			p.Errorf("hdfs.codeC", "%v", err)
		} else {
			opt.Format.Codec = c.name
		}
	}
	switch opt.Format.Type {
	case dataStream:
		if opt.Format.Codec != "" {
			p.Errorf("hdfs.codeC", "fileType DataStream does not compress; remove hdfs.codeC or use fileType CompressedStream")
		}
	case compressedStream:
		if opt.Format.Codec == "" && p.Err() == nil {
			p.Errorf("hdfs.codeC", "fileType CompressedStream needs a codec; set hdfs.codeC to gzip, bzip2, deflate, snappy, lz4 or zstd")
		}
	}
	if opt.Format.Type == sequenceFile {
		wf := p.Enum("hdfs.writeFormat", "writable", "Writable", "Text")
		opt.Format.TextValues = wf == "text"
		// Flume's SequenceFile writer ignores the serializer too, so a
		// serializer set without hdfs.fileType (the guide's avro_event
		// examples) writes SequenceFiles there as here: say so, rather
		// than that sluice does not read serializer.* at all.
		keys := p.Keys("serializer.")
		if p.Has("serializer") {
			keys = append([]string{"serializer"}, keys...)
		}
		for _, k := range keys {
			p.MarkUsed(k)
		}
		if len(keys) > 0 {
			with := ""
			if len(keys) > 1 {
				with = ", with " + strings.Join(keys[1:], ", ")
			}
			p.Warnf(keys[0], "ignored%s: hdfs.fileType is SequenceFile (the default), which uses no serializer (it writes hdfs.writeFormat records, as in Flume); set hdfs.fileType = DataStream to write with the serializer", with)
		}
	} else {
		opt.Format.Serializer = serializer.Parse(p, "serializer")
		p.MarkUsed("hdfs.writeFormat")
	}

	// Store.
	hc := loadHadoopConf(os.Getenv("HADOOP_CONF_DIR"))
	auth := readAuth(env, p)
	opt.DefaultFS = hc["fs.defaultFS"]
	static := staticPrefix(pathText)
	loc, err := parseLocation(static, opt.DefaultFS)
	if err != nil {
		p.Errorf("hdfs.path", "%v", err)
	}
	opt.StagingDir = p.String("hdfs.stagingDir", filepath.Join("sluice-staging", env.Agent, env.Name))
	if abs, err := filepath.Abs(opt.StagingDir); err == nil {
		opt.StagingDir = abs
	}
	var st store = localStore{}
	switch loc.scheme {
	case "s3a", "s3", "s3n":
		cfg := readS3Config(p, hc, loc.host)
		if p.Err() == nil {
			if st, err = newS3Store(loc, cfg); err != nil {
				p.Errorf("hdfs.path", "%v", err)
			}
		}
	case "hdfs":
		if st, err = newHDFSStore(loc, hc, auth); err != nil {
			p.Errorf("hdfs.path", "%v", err)
		}
	default:
		auth.unused(p)
		readS3Config(p, hc, "") // mark fs.s3a.* read; they do nothing here
	}

	c := newCounters(env)
	w := newWriter(opt, st, c, env.Log())
	return &Sink{BatchSink: flow.NewBatchSink(env, w, batch, c.SinkCounters), w: w}, nil
}

func nonNegative(p *config.Props, key string, def int64) int64 {
	v := p.Int64(key, def)
	if v < 0 {
		p.Errorf(key, "%d is negative; use 0 to turn it off", v)
		return def
	}
	return v
}

// staticPrefix is the part of a path template before its first escape,
// which must hold the scheme and the bucket or namenode.
func staticPrefix(s string) string {
	if i := strings.IndexByte(s, '%'); i >= 0 {
		return s[:i]
	}
	return s
}

func newCounters(env flow.Env) *counters {
	sc := metrics.NewSinkCounters(env.Name, env.Type)
	c := &counters{
		SinkCounters:  sc,
		opened:        sc.Counter("FilesOpenedCount"),
		closed:        sc.Counter("FilesClosedCount"),
		failed:        sc.Counter("FilesFailedCount"),
		bytes:         sc.Counter("BytesWrittenCount"),
		timeFallback:  sc.Counter("EventTimestampMissingCount"),
		finishLatency: env.Registry().Latency(metrics.Stage("hdfs_finish"), env.Name),
	}
	env.Registry().Add(sc.Set)
	return c
}
