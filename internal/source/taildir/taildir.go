// Package taildirsource is Flume's taildir source ("taildir"): it follows the
// files whose names match each file group's pattern, turns every line into
// an event, and remembers how far it got in a position file in Flume's
// format, so that a restart continues where it stopped (and a Flume position
// file can be taken over).
//
// Delivery: a file's position moves past a line only after the batch that
// holds the line was committed to every required channel, and the position
// file (written atomically every writePosInterval and at stop) holds only
// such positions. A graceful stop and restart therefore neither loses nor
// repeats a line; a crash repeats at most the lines committed since the last
// position write (at-least-once).
//
// Files are tracked by device and inode, not by name:
//   - a file renamed by rotation keeps its position, whether its new name
//     still matches the pattern (it is not read again from the start, which
//     is Flume's duplicate bug) or not (its unread tail is still read through
//     the open descriptor, and after a restart it is found again by inode in
//     its directory);
//   - a file that became shorter than the position (copytruncate), or whose
//     bytes just before the position changed (truncated and rewritten past
//     the position before it was looked at), is read again from 0;
//   - a deleted file is read to its end through the open descriptor, then
//     closed once idle;
//   - at a stop (the agent has closed the intake by then), the unread lines
//     of files rotated away or deleted are copied into spill files beside
//     the position file and sent at the next start (spill.go);
//   - an inode reused by a new file is told apart the same way as a
//     truncation, since a file the source holds open cannot lose its inode.
//
// The partial last line of a file waits for its newline, or for the file to
// be idle for idleTimeout, when it is sent as it is (as Flume does). A line
// longer than maxLineLength bytes is sent in pieces of at most that many
// bytes, as soon as each is full, marked by the headers linePiece (1, 2,
// ...) and linePieceLast (true on the last), counted in SplitLineCount and
// logged (throttled), so one line never holds more than the limit in memory.
// Directories are watched with inotify (fsnotify), so an idle file costs
// nothing; a rescan every few seconds, and polling when watching is not
// possible, catch what notifications miss. A group's directory may hold
// wildcards (/var/log/pods/*/*): directories are then found as they come
// and go (discover.go).
//
// Container logs (format = cri, docker, auto) are read as records, the
// pieces of a line joined per stream, also across a rotation (records.go,
// container.go), with the pod's metadata from the path and the kubelet
// (k8s.go).
package taildirsource

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kubelet"
	"github.com/sluicehq/sluice/internal/metrics"
)

// DefaultMaxLineLength is maxLineLength's default: the most bytes of a line
// one event holds.
const DefaultMaxLineLength = 8 << 20

// group is one file group: a directory and a pattern for the file names in
// it. The directory may hold shell wildcards (/var/log/pods/*/*): then the
// group's files are in every directory that matches, found as they come
// and go.
type group struct {
	name    string
	dir     string // the directory, or the wildcard pattern of directories
	glob    bool   // dir holds wildcards
	root    string // the longest leading part of dir without wildcards
	pattern string
	re      *regexp.Regexp
	headers event.Headers
	format  string // line, cri, docker or auto
}

// hasDir reports whether the group's files may be in directory dir.
func (g *group) hasDir(dir string) bool {
	if !g.glob {
		return g.dir == dir
	}
	ok, _ := filepath.Match(g.dir, dir)
	return ok
}

// Source is the taildir source. Build it with New.
type Source struct {
	env              flow.Env
	groups           []*group
	positionFile     string
	byteOffsetHeader bool
	fileHeader       bool
	fileHeaderKey    string
	skipToEnd        bool
	idleTimeout      time.Duration
	writePosInterval time.Duration
	batch            flow.Batching
	maxBatchCount    int64
	backoffIncrement time.Duration
	maxBackoff       time.Duration
	pollInterval     time.Duration
	watch            bool
	maxLineLength    int
	counters         *metrics.SourceCounters
	splitLines       *atomic.Int64 // SplitLineCount: lines sent in pieces
	joinedLines      *atomic.Int64 // JoinedLineCount: lines joined from several records
	badRecords       *atomic.Int64 // BadRecordCount: lines of a cri or docker file that are not its records
	kubeMiss         *atomic.Int64 // KubeletMissCount: events without the kubelet's metadata
	kubeMeta         string        // none, path or kubelet
	kubeConf         kubelet.Config

	worker flow.Worker // the reading goroutine
}

// New builds a taildir source from Flume's properties filegroups,
// filegroups.<g>, positionFile (~/.flume/taildir_position.json),
// headers.<g>.<k>, byteOffsetHeader (false), fileHeader (false),
// fileHeaderKey (file), skipToEnd (false), idleTimeout (120000 ms),
// writePosInterval (3000 ms), batchSize (100; left unset, batches grow to the
// channels' transactionCapacity: flow.Batching), maxBatchCount (unlimited),
// backoffSleepIncrement (1000 ms), maxBackoffSleep (5000 ms) and
// cachePatternMatching (accepted; the directory watch does its job), plus
// sluice's pollInterval (1000 ms: how often files are polled when they
// cannot be watched), watchFiles (true: use inotify), maxLineLength
// (8 MiB: a longer line is sent in pieces of at most that many bytes),
// format and format.<g> (line: how container runtimes write logs, see
// records.go and k8s.go) and kubernetesMetadata with its keys.
func New(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &Source{env: env}
	names := p.Fields("filegroups")
	if len(names) == 0 {
		p.Required("filegroups")
	}
	byName := map[string]*group{}
	for _, name := range names {
		if byName[name] != nil {
			p.Errorf("filegroups", "file group %q is listed twice", name)
			continue
		}
		key := "filegroups." + name
		v := p.Required(key)
		if v == "" {
			continue
		}
		g, err := parseGroup(name, v)
		if err != nil {
			p.Errorf(key, "%v", err)
			continue
		}
		byName[name] = g
		s.groups = append(s.groups, g)
	}
	for _, k := range p.Keys("headers.") {
		rest := strings.TrimPrefix(k, "headers.")
		gname, hk, ok := strings.Cut(rest, ".")
		v := p.String(k, "")
		if !ok || gname == "" || hk == "" {
			p.Errorf(k, "a header is set as headers.<filegroup>.<header> = value")
			continue
		}
		g := byName[gname]
		if g == nil {
			if len(names) > 0 {
				p.Errorf(k, "file group %q is not listed in filegroups", gname)
			}
			continue
		}
		g.headers.Set(hk, v)
	}

	format := p.Enum("format", "line", formats...)
	for _, k := range p.Keys("format.") {
		gname := strings.TrimPrefix(k, "format.")
		g := byName[gname]
		if g == nil {
			if gname != "" && !strings.Contains(gname, ".") && len(names) > 0 {
				p.Errorf(k, "file group %q is not listed in filegroups", gname)
			} else if gname == "" || strings.Contains(gname, ".") {
				p.Errorf(k, "a file group's format is set as format.<filegroup> = %s", strings.Join(formats, " | "))
			}
			continue
		}
		g.format = p.Enum(k, format, formats...)
	}
	for _, g := range s.groups {
		if g.format == "" {
			g.format = format
		}
	}
	s.kubeMeta = p.Enum("kubernetesMetadata", "none", "none", "path", "kubelet")
	s.kubeConf = kubeletConfig(p, s.kubeMeta == "kubelet")

	def := "~/.flume/taildir_position.json"
	if home, err := os.UserHomeDir(); err == nil {
		def = filepath.Join(home, ".flume", "taildir_position.json")
	}
	s.positionFile = p.String("positionFile", def)
	if strings.TrimSpace(s.positionFile) == "" {
		p.Errorf("positionFile", "must not be empty")
	} else if abs, err := filepath.Abs(s.positionFile); err == nil {
		s.positionFile = abs
	}
	s.byteOffsetHeader = p.Bool("byteOffsetHeader", false)
	s.fileHeader = p.Bool("fileHeader", false)
	s.fileHeaderKey = p.String("fileHeaderKey", "file")
	s.skipToEnd = p.Bool("skipToEnd", false)
	s.idleTimeout = millis(p, "idleTimeout", 120000, 1)
	s.writePosInterval = millis(p, "writePosInterval", 3000, 1)
	s.batch = flow.ReadBatching(p, "batchSize", flow.DefaultBatchSize)
	s.maxBatchCount = p.Int64("maxBatchCount", math.MaxInt64)
	if s.maxBatchCount < 1 {
		p.Errorf("maxBatchCount", "must be at least 1")
		s.maxBatchCount = math.MaxInt64
	}
	s.backoffIncrement = millis(p, "backoffSleepIncrement", 1000, 1)
	s.maxBackoff = millis(p, "maxBackoffSleep", 5000, 1)
	p.Bool("cachePatternMatching", true)
	s.pollInterval = millis(p, "pollInterval", 1000, 1)
	s.watch = p.Bool("watchFiles", true)
	s.maxLineLength = p.IntRange("maxLineLength", DefaultMaxLineLength, 1, 1<<30)

	s.counters = metrics.NewSourceCounters(env.Name, env.Type)
	s.splitLines = s.counters.Counter("SplitLineCount")
	if s.containerFormats() {
		s.joinedLines = s.counters.Counter("JoinedLineCount")
		s.badRecords = s.counters.Counter("BadRecordCount")
	} else {
		s.joinedLines, s.badRecords = new(atomic.Int64), new(atomic.Int64)
	}
	s.kubeMiss = new(atomic.Int64)
	if s.kubeMeta == "kubelet" {
		s.kubeMiss = s.counters.Counter("KubeletMissCount")
		s.kubeConf.Requests = s.counters.Counter("KubeletRequestCount")
		s.kubeConf.Failures = s.counters.Counter("KubeletRequestFail")
		s.kubeConf.Name = "taildir source " + env.Name
		s.kubeConf.Log = env.Log().With("source", env.Name)
		if _, err := kubelet.New(s.kubeConf); err != nil {
			p.Errorf("kubernetesMetadata.kubeletURL", "%v", err)
		}
	}
	env.Registry().Add(s.counters.Set)
	return s, nil
}

// parseGroup splits "/abs/dir/name-regex" into a directory and a pattern
// that must match a whole file name, as Flume's matcher does. The
// directory may hold shell wildcards (*, ?, [...]; matched with
// filepath.Match, one path element each), which Flume does not have.
func parseGroup(name, v string) (*group, error) {
	if !filepath.IsAbs(v) {
		return nil, fmt.Errorf("%q is not an absolute path; use /directory/file-name-regex", v)
	}
	i := strings.LastIndexByte(v, '/')
	dir, pat := filepath.Clean(v[:i+1]), v[i+1:]
	if pat == "" {
		return nil, fmt.Errorf("%q has no file name pattern after the directory", v)
	}
	re, err := regexp.Compile("^(?:" + pat + ")$")
	if err != nil {
		return nil, fmt.Errorf("file name pattern %q is not a valid regular expression: %v", pat, err)
	}
	g := &group{name: name, dir: dir, root: dir, pattern: pat, re: re}
	if strings.ContainsAny(dir, "*?[\\") {
		if _, err := filepath.Match(dir, dir); err != nil {
			return nil, fmt.Errorf("directory pattern %q is not a valid wildcard pattern: %v", dir, err)
		}
		g.glob = true
		parts := strings.Split(dir, "/")
		k := 0
		for k < len(parts) && !strings.ContainsAny(parts[k], "*?[\\") {
			k++
		}
		g.root = filepath.Clean("/" + strings.Join(parts[:k], "/"))
	}
	return g, nil
}

// formats are the values of format.
var formats = []string{"line", "cri", "docker", "auto"}

// containerFormats reports whether a file group reads container logs.
func (s *Source) containerFormats() bool {
	for _, g := range s.groups {
		if g.format != "line" {
			return true
		}
	}
	return false
}

// millis reads a duration in milliseconds of at least lo.
func millis(p *config.Props, key string, def, lo int64) time.Duration {
	n := p.Int64(key, def)
	if n < lo {
		p.Errorf(key, "%d is too small; use at least %d (milliseconds)", n, lo)
		n = def
	}
	return time.Duration(n) * time.Millisecond
}

// BatchSize reports batchSize, so the agent can check it against the
// channels' transactionCapacity.
func (s *Source) BatchSize() int { return s.batch.Size() }

// Start loads the position file, finds the files and starts following them
// in a goroutine that Stop ends. A file group's directory must exist, as in
// Flume.
func (s *Source) Start(_ context.Context, p flow.Processor) error {
	if s.worker.Running() {
		return fmt.Errorf("taildir %s: already started", s.env.Name)
	}
	for _, g := range s.groups {
		st, err := os.Stat(g.root)
		if err != nil {
			return fmt.Errorf("taildir %s: file group %s: %w", s.env.Name, g.name, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("taildir %s: file group %s: %s is not a directory", s.env.Name, g.name, g.root)
		}
	}
	if err := os.MkdirAll(filepath.Dir(s.positionFile), 0o755); err != nil {
		return fmt.Errorf("taildir %s: position file directory: %w", s.env.Name, err)
	}
	saved, err := loadPositions(s.positionFile)
	if err != nil {
		// Flume logs and goes on with what it could read; so does sluice,
		// loudly, because files are then read again from the start.
		s.env.Log().Error("taildir source cannot read its position file; files without a position are read from the start",
			"source", s.env.Name, "file", s.positionFile, "err", err)
	}
	t := newTailer(s, p, saved)
	if s.kubeMeta == "kubelet" {
		// The tailer's goroutine owns the kubelet cache's and stops it.
		kc, err := kubelet.New(s.kubeConf)
		if err != nil {
			return fmt.Errorf("taildir %s: %w", s.env.Name, err)
		}
		t.kube = kc
		kc.Start()
	}
	if err := t.open(); err != nil {
		t.close()
		if t.kube != nil {
			t.kube.Stop()
		}
		return fmt.Errorf("taildir %s: %w", s.env.Name, err)
	}
	s.counters.Started()
	s.worker.Go("taildir source "+s.env.Name, func(ctx context.Context) {
		t.run(ctx)
		if t.kube != nil {
			t.kube.Stop()
		}
		t.throttle.Flush()
		t.puts.Stop()
	})
	return nil
}

// Stop stops reading, waits for the batch in flight, writes the position
// file and closes the files.
func (s *Source) Stop(ctx context.Context) error {
	if !s.worker.Running() {
		return nil
	}
	defer s.counters.Stopped()
	if err := s.worker.Stop(ctx); err != nil {
		return fmt.Errorf("taildir %s: stop: %w", s.env.Name, err)
	}
	return nil
}
