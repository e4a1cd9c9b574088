package hdfssink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/atomicfile"
)

// record is the journal entry of one file that is being written or waits
// to be finished. It is written (atomically, synced) before the file is
// created and removed only after the file is finished, so a start after a
// crash finds every file an earlier run left unfinished.
type record struct {
	ID     string `json:"id"`
	Store  string `json:"store"`  // the store's URL prefix (file://, s3a://bucket, hdfs://host:port)
	InUse  string `json:"inUse"`  // where it is written: a path in the store, or the staging file
	Target string `json:"target"` // its finished name in the store
	Format format `json:"format"`
	// Staged is true when InUse is a local staging file (S3, HDFS).
	Staged bool `json:"staged,omitempty"`
	// HDFSInUse is the in-use name on HDFS a staged file is copied to
	// before its rename.
	HDFSInUse string `json:"hdfsInUse,omitempty"`
	// Upload is the multipart upload in progress, if any.
	Upload *upload `json:"upload,omitempty"`
	// Closed is true once the file is complete and only waits to be
	// finished (renamed or uploaded).
	Closed bool `json:"closed,omitempty"`
}

type upload struct {
	ID       string `json:"id"`
	PartSize int64  `json:"partSize"`
	Parts    []part `json:"parts,omitempty"`
}

type part struct {
	Number int    `json:"n"`
	ETag   string `json:"etag"`
	Size   int64  `json:"size"`
}

// journal is a directory of records, one file each.
type journal struct {
	dir  string
	lock *os.File
	seq  atomic.Int64
	base string
}

// openJournal opens (creating) the journal in dir and locks it, so that
// two agents never share a staging directory.
func openJournal(dir string) (*journal, error) {
	if err := os.MkdirAll(filepath.Join(dir, "open"), 0o755); err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open staging lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("staging directory %s is in use by another process (%v); give each hdfs sink its own hdfs.stagingDir", dir, err)
	}
	j := &journal{dir: dir, lock: f, base: fmt.Sprintf("%d", time.Now().UnixMilli())}
	return j, nil
}

func (j *journal) close() error {
	if j.lock == nil {
		return nil
	}
	err := j.lock.Close()
	j.lock = nil
	return err
}

// newID returns an id unique across runs of this journal.
func (j *journal) newID() string {
	return fmt.Sprintf("%s-%06d", j.base, j.seq.Add(1))
}

// stagingPath is where a staged file of id lives.
func (j *journal) stagingPath(id string) string {
	return filepath.Join(j.dir, "data", id)
}

// put writes rec atomically: a temporary file, synced, renamed over the
// record, and the directory synced.
func (j *journal) put(rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	name := filepath.Join(j.dir, "open", rec.ID+".json")
	return atomicfile.WriteFile(name, b, 0o644)
}

func (j *journal) remove(rec *record) error {
	err := os.Remove(filepath.Join(j.dir, "open", rec.ID+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Join(j.dir, "open"))
}

// list returns every record, oldest first.
func (j *journal) list() ([]*record, error) {
	ents, err := os.ReadDir(filepath.Join(j.dir, "open"))
	if err != nil {
		return nil, err
	}
	var out []*record
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			// A put cut short: atomicfile's temporary copy, or the fixed
			// .tmp name earlier versions used.
			if atomicfile.IsTemp(name) || strings.HasSuffix(name, ".json.tmp") {
				_ = os.Remove(filepath.Join(j.dir, "open", name)) // litter; tried again at the next start
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(j.dir, "open", name))
		if err != nil {
			return nil, err
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("staging journal %s is damaged (%v); move it away to start, and finish the file it names by hand", name, err)
		}
		out = append(out, &r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}
