package hdfssink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/atomicfile"
)

// store is where files end up: a local (or mounted) filesystem, an S3
// bucket, or HDFS. The sink writes a file as rec.InUse and, once closed,
// finishes it as rec.Target.
type store interface {
	// String names the store (its URL prefix) for logs and the journal.
	String() string
	// create starts rec's file. Stores that cannot append durably (S3, and
	// HDFS through a client without hflush) stage it in a local file.
	create(ctx context.Context, rec *record) (pendingFile, error)
	// trim cuts an in-use file left by a crash after its last complete
	// batch (n = keep), where the store can.
	trim(ctx context.Context, rec *record) error
	// finish makes a closed file its target (rename, upload). It runs again
	// after a failure or a crash, so it must cope with work already done.
	finish(ctx context.Context, rec *record, j *journal) error
	close() error
}

// pendingFile is a file being written.
type pendingFile interface {
	io.Writer
	// Sync makes everything written durable: fdatasync, of the file itself
	// or of its local staging copy (S3, HDFS).
	Sync() error
	// Truncate cuts the file back to size after a failed batch;
	// errors.ErrUnsupported where the store cannot.
	Truncate(size int64) error
	Close() error
}

// localFile is a pendingFile on a local filesystem.
type localFile struct{ f *os.File }

func createLocal(path string) (*localFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return &localFile{f: f}, nil
}

func (l *localFile) Write(p []byte) (int, error) { return l.f.Write(p) }

// Sync uses fdatasync: the data and the size, not the times.
func (l *localFile) Sync() error {
	for {
		err := unix.Fdatasync(int(l.f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: l.f.Name(), Err: err}
			}
			return nil
		}
	}
}

func (l *localFile) Truncate(size int64) error {
	if err := l.f.Truncate(size); err != nil {
		return err
	}
	if _, err := l.f.Seek(size, io.SeekStart); err != nil {
		return err
	}
	return l.Sync()
}

func (l *localFile) Close() error { return l.f.Close() }

// trimLocal cuts the local file at path after its last complete batch
// unit of format f and syncs it. A file with nothing complete is removed
// (removed reports it).
func trimLocal(path string, f format) (removed bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	n, err := f.scan(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if n == 0 {
		return true, os.Remove(path)
	}
	if n == len(data) {
		return false, nil
	}
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false, err
	}
	err = fh.Truncate(int64(n))
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return false, err
}

// localStore writes files in a local or mounted filesystem and finishes
// them by renaming (the in-use name is the target with inUsePrefix and
// inUseSuffix).
type localStore struct{}

func (localStore) String() string { return "file://" }

func (localStore) create(_ context.Context, rec *record) (pendingFile, error) {
	return createLocal(rec.InUse)
}

func (localStore) trim(_ context.Context, rec *record) error {
	_, err := trimLocal(rec.InUse, rec.Format)
	return err
}

func (localStore) finish(_ context.Context, rec *record, _ *journal) error {
	if rec.InUse == rec.Target {
		return nil
	}
	if _, err := os.Stat(rec.InUse); errors.Is(err, fs.ErrNotExist) {
		return nil // renamed before a crash, or nothing complete was in it
	}
	if _, err := os.Stat(rec.Target); err == nil {
		return fmt.Errorf("cannot rename %s: %s exists", rec.InUse, rec.Target)
	}
	if err := os.Rename(rec.InUse, rec.Target); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(rec.Target))
}

func (localStore) close() error { return nil }

// location is an expanded hdfs.path split into its store and the path in
// it.
type location struct {
	scheme string // "file", "s3a", "s3", "hdfs"
	host   string // bucket or namenode address
	path   string // local path, object key prefix, or HDFS path
}

// parseLocation splits p (hdfs.path after expansion, or its static
// prefix). A path without a scheme uses defaultFS (Hadoop's fs.defaultFS)
// when set, else the local filesystem.
func parseLocation(p, defaultFS string) (location, error) {
	i := strings.Index(p, "://")
	if i < 0 {
		if defaultFS != "" && !strings.HasPrefix(defaultFS, "file:") {
			l, err := parseLocation(strings.TrimSuffix(defaultFS, "/")+"/"+strings.TrimPrefix(p, "/"), "")
			return l, err
		}
		return location{scheme: "file", path: p}, nil
	}
	scheme := strings.ToLower(p[:i])
	rest := p[i+3:]
	host, path, _ := strings.Cut(rest, "/")
	switch scheme {
	case "file":
		if host != "" && host != "localhost" {
			return location{}, fmt.Errorf("%q: a file:// path names no host; write file:///dir", p)
		}
		return location{scheme: "file", path: "/" + path}, nil
	case "s3a", "s3", "s3n":
		if host == "" {
			return location{}, fmt.Errorf("%q names no bucket; write s3a://bucket/dir", p)
		}
		return location{scheme: scheme, host: host, path: path}, nil
	case "hdfs":
		return location{scheme: scheme, host: host, path: "/" + path}, nil
	}
	return location{}, fmt.Errorf("%q: scheme %s:// is not supported; use a local path, file://, s3a://, s3:// or hdfs://", p, scheme)
}
